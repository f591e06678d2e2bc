"""Shared helpers: run the real CLI in a subprocess and read what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
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


# `make test` runs the suite on two pytest-xdist workers (--dist loadgroup). Ranks that wait in a
# collective yield their core rather than spin: a test beside an MPI test then gets its share.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's loadgroup: a module with a module-scoped fixture runs on one worker
    (the fixture is built once), and so do the SLURM tests (their two clusters share the controller's
    port, so they must not be up at once). Without xdist the marks do nothing."""
    for item in items:
        if item.get_closest_marker("slurm") is not None:
            group = "slurm"
        elif any(d.scope == "module" for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs):
            group = item.module.__name__
        else:
            continue
        item.add_marker(pytest.mark.xdist_group(group))
