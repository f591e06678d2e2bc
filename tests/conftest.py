"""Shared helpers: run the real CLI in a subprocess and read what it wrote."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_cli(
    *args: str, module: str = "rlexp", timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python -m <module> args...`` from the repository root; output captured as text."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def train(run_dir: Path, *overrides: str, timeout: float = 300) -> pd.DataFrame:
    """Train into ``run_dir`` (must succeed) and return its progress.txt as a DataFrame."""
    res = run_cli(f"hydra.run.dir={run_dir}", *overrides, timeout=timeout)
    assert res.returncode == 0, (
        f"rc={res.returncode}\nstdout:\n{res.stdout[-3000:]}\nstderr:\n{res.stderr[-3000:]}"
    )
    return pd.read_table(run_dir / "progress.txt")


def composed(*overrides: str):
    """The RLExpConfig that `python -m rlexp overrides...` would train with."""
    from hydra import compose, initialize_config_dir

    import rlexp.__main__ as entry
    from rlexp.config import load_config

    with initialize_config_dir(config_dir=entry.CONF_DIR, version_base="1.3"):
        return load_config(compose(config_name="config", overrides=list(overrides)))


@pytest.fixture
def cli():
    return run_cli


# `make test` runs the suite on two pytest-xdist workers, a test file per worker at a time (--dist
# loadfile: a module-scoped fixture is built once). Ranks that wait in a collective yield their core
# rather than spin, so that a test beside an MPI test gets its share.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
SLURM_LOCK = Path(tempfile.gettempdir()) / "rlexp-tests-slurm.lock"


@contextlib.contextmanager
def one_slurm_cluster() -> Iterator[None]:
    """Held while a test module's real SLURM cluster is up: the single-node and the 2-node cluster
    share the controller's port, so on two xdist workers one module waits for the other's to end."""
    with open(SLURM_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
