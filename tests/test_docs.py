"""The reference pages say what the code does: every env preset, comm key and logger key is in the guide,
the guide's tables have no stray rows, the resume comment that --help shows names every key resume=
takes, and checkpoint files are named as they are written."""

from __future__ import annotations

import re

import yaml

from rlexp.checkpoint import checkpoint_path
from rlexp.rundir import RESUMABLE_KEYS
from tests.conftest import ROOT

GUIDE = (ROOT / "docs" / "guide.md").read_text()
PAGES = {p.relative_to(ROOT): p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]}


def table_row(group: str) -> str:
    """The guide's row of config group ``group`` (its table of groups)."""
    rows = [ln for ln in GUIDE.splitlines() if ln.startswith(f"| `{group}` |")]
    assert len(rows) == 1, rows
    return rows[0]


def test_the_guide_names_every_env_preset_and_comm_key():
    row = table_row("env")
    missing = [p.stem for p in sorted((ROOT / "conf" / "env").glob("*.yaml")) if f"`{p.stem}`" not in row]
    assert not missing, f"env presets missing from the guide's env row: {missing}"
    comm = yaml.safe_load((ROOT / "conf" / "comm" / "mpi.yaml").read_text())
    row = table_row("comm")
    assert [k for k in comm if f"`{k}`" not in row] == []


def test_the_guide_names_every_top_level_and_logger_key():
    conf = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())
    top = GUIDE[GUIDE.index("Top level: ") :].split("\n\n", 1)[0]
    keys = [k for k in conf if k not in ("defaults", "hydra", "env", "network", "score", "logger")]
    keys += list(conf["logger"])
    assert [k for k in keys if f"`{k}`" not in top] == []


def test_every_table_row_of_the_guide_is_in_a_table():
    """A row on its own (a blank line before and after it) renders as a paragraph of pipes."""
    lines = GUIDE.splitlines()
    stray = [
        i + 1
        for i, line in enumerate(lines)
        if line.startswith("|")
        and not (i > 0 and lines[i - 1].startswith("|"))
        and not (i + 1 < len(lines) and lines[i + 1].startswith("|"))
    ]
    assert stray == [], f"docs/guide.md lines {stray} are table rows outside a table"


def test_the_resume_comment_names_every_key_resume_takes():
    """conf/config.yaml's comment above resume: (shown by --help) lists what resume_config allows."""
    lines = (ROOT / "conf" / "config.yaml").read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("resume:"))
    comment = []
    for line in reversed(lines[:at]):
        if not line.startswith("#"):
            break
        comment.insert(0, line)
    text = " ".join(comment)
    missing = [k for k in RESUMABLE_KEYS if k not in text]
    assert missing == [], f"the resume comment does not name {missing}"


def test_checkpoint_files_are_named_in_the_docs_as_they_are_written():
    assert checkpoint_path("run", 2, ".pt").name == "epoch_000002.pt"
    wrong = {
        str(page): m.group(0) for page, text in PAGES.items() for m in re.finditer(r"epoch_N\.\w+", text)
    }
    assert wrong == {}, f"checkpoints are epoch_000002.pt, not {wrong}"
