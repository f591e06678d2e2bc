"""logger.wandb=true in W&B's offline mode: the resolved config and every progress.txt column reach the
W&B run, and a resumed run continues the same W&B run (read back from W&B's own .wandb files)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import run_cli

wandb_pb2 = pytest.importorskip("wandb.proto.wandb_internal_pb2")

OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


def _records(path: Path) -> list:
    """The protobuf records of a .wandb file (W&B's log format: a 7-byte header, then 32 KiB blocks of
    chunks, each crc32 (4) + length (2) + type (1; 1 full, 2 first, 3 middle, 4 last) + payload)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        buf += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            rec = wandb_pb2.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
        elif kind == 0:
            buf = b""
    return out


def _runs(run_dir: Path) -> list[dict]:
    """Each offline W&B run below ``run_dir``: its id, project, tags, group, config and history rows."""
    out = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        run: dict = {"history": []}
        for rec in _records(path):
            kind = rec.WhichOneof("record_type")
            if kind == "run":
                run.update(id=rec.run.run_id, project=rec.run.project, tags=list(rec.run.tags))
                run.update(group=rec.run.run_group)
                run["config"] = {i.key: json.loads(i.value_json) for i in rec.run.config.update}
            elif kind == "history":
                run["history"].append(
                    {(i.key or ".".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
                )
        out.append(run)
    return out


def test_wandb_gets_the_config_and_every_column_and_a_resume_continues_the_run(tmp_path):
    run_dir = tmp_path / "r"
    res = run_cli(
        f"hydra.run.dir={run_dir}",
        "algo.epochs=2",
        "algo.steps_per_epoch=400",
        "logger.wandb=true",
        "logger.wandb_project=proj",
        "logger.wandb_group=grp",
        "logger.wandb_tags=[a,b]",
        env=OFFLINE,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (first,) = _runs(run_dir)
    assert first["id"] == (run_dir / "wandb_run_id").read_text().strip()
    assert (first["project"], first["tags"], first["group"]) == ("proj", ["a", "b"], "grp")
    assert first["config"]["algo"]["name"] == "ppo" and first["config"]["algo"]["steps_per_epoch"] == 400
    assert first["config"]["logger"]["wandb_project"] == "proj"
    progress = pd.read_table(run_dir / "progress.txt")
    assert len(first["history"]) == 2
    for logged, (_, row) in zip(first["history"], progress.iterrows(), strict=True):
        for col in progress.columns:
            assert logged[col] == pytest.approx(row[col], rel=1e-6), col
    more = run_cli(f"resume={run_dir}", "algo.epochs=3", env=OFFLINE)
    assert more.returncode == 0, more.stderr[-3000:]
    runs = _runs(run_dir)
    assert len(runs) == 2 and runs[1]["id"] == first["id"]  # the same W&B run, continued
    assert [h["Epoch"] for h in runs[1]["history"]] == [2]
    assert runs[1]["history"][0]["TotalEnvInteracts"] == 1200


def test_wandb_without_a_login_is_one_line_before_anything_is_written(tmp_path):
    env = {"WANDB_MODE": "online", "WANDB_API_KEY": "", "WANDB_SILENT": "true", "HOME": str(tmp_path)}
    env["WANDB_CONFIG_DIR"] = str(tmp_path / "wandb-config")
    res = run_cli(
        f"hydra.run.dir={tmp_path / 'r'}", "algo.epochs=1", "logger.wandb=true", env=env, timeout=180
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.strip().splitlines() == [
        "rlexp: error: logger.wandb=true: W&B cannot log (No API key configured. Use `wandb login` to log "
        "in.); run `wandb login`, or set WANDB_MODE=offline to log locally"
    ]
    assert not (tmp_path / "r").exists()  # checked before anything was written
