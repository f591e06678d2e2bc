"""rlexp as an installed package: the built wheel runs from any directory (its YAML presets inside),
and an installed plugin package adds an algorithm through the ``rlexp.algos`` entry-point group
(examples/entppo, the worked example of docs/plugins.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.mpi


def _pip(*args: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def _run(cwd: Path, site: Path, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` from ``cwd`` with ``site`` (a --target install) first on the import path."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def _copy_project(dest: Path) -> Path:
    """The files a wheel is built from, copied (a build writes build/ next to its sources)."""
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("rlexp", "conf", "hydra_plugins"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    return dest


def test_the_built_wheel_runs_from_any_directory(tmp_path):
    src = _copy_project(tmp_path / "src")
    _pip("wheel", "--no-deps", "--no-build-isolation", "-q", str(src), "-w", str(tmp_path / "dist"))
    (wheel,) = (tmp_path / "dist").glob("rlexp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # The presets and rlexp's Hydra plugins (hydra_plugins is a namespace package) are inside.
    for name in (
        "rlexp/conf/config.yaml",
        "rlexp/conf/algo/sac.yaml",
        "hydra_plugins/rlexp_sweeper/optuna_sweeper.py",
    ):
        assert name in names, name
    site = tmp_path / "site"
    _pip("install", "--no-deps", "-q", "--target", str(site), str(wheel))  # dependencies: this venv's
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run(work, site, "-c", "import rlexp.config as c; print(c.__file__); print(c.CONF_DIR)")
    assert where.stdout.split() == [str(site / "rlexp" / "config.py"), str(site / "rlexp" / "conf")]
    job = _run(work, site, "-m", "rlexp", "--cfg", "job")
    assert job.returncode == 0, job.stderr[-3000:]
    assert "name: ppo" in job.stdout and "id: CartPole-v1" in job.stdout
    train = _run(
        work,
        site,
        "-m",
        "rlexp",
        "comm.procs=2",
        "algo.epochs=1",
        "algo.steps_per_epoch=400",
        "env=Pendulum-v1",
    )
    assert train.returncode == 0, train.stderr[-3000:]
    (run,) = (work / "outputs").glob("*/*_ppo_Pendulum-v1_s0_*")
    assert list(pd.read_table(run / "progress.txt")["Epoch"]) == [0]
    assert (run / "checkpoints" / "epoch_000001.rank1.pt").is_file()
    # rlexp's Hydra plugins (the checked sweeper, the Optuna sweeper) come with the wheel too.
    sweep = _run(
        work,
        site,
        "-m",
        "rlexp",
        "--multirun",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=1",
        "algo.lr=interval(1e-4,1e-2)",
        "algo.epochs=1",
        "algo.steps_per_epoch=400",
        f"hydra.sweep.dir={work / 'sweep'}",
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert (work / "sweep" / "optimization_results.yaml").is_file()


def test_a_plugin_package_adds_an_algorithm(tmp_path):
    plugin = shutil.copytree(ROOT / "examples" / "entppo", tmp_path / "entppo")
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-build-isolation", "-q", "--target", str(site), str(plugin))
    run = tmp_path / "run"
    res = _run(
        ROOT,
        site,
        "-m",
        "rlexp",
        "algo=entppo",
        "comm.procs=2",  # every rank finds the algorithm too
        "algo.epochs=2",
        "algo.steps_per_epoch=400",
        "algo.mean_ent_coef=0.05",
        f"hydra.run.dir={run}",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    config = (run / "config.yaml").read_text()
    assert "name: entppo" in config and "mean_ent_coef: 0.05" in config
    assert list(pd.read_table(run / "progress.txt")["Epoch"]) == [0, 1]
    assert (run / "checkpoints" / "epoch_000002.rank1.pt").is_file()
    test = _run(ROOT, site, "-m", "rlexp.test_policy", str(run), "--norender", "-n", "2")
    assert test.returncode == 0 and "AverageEpRet" in test.stdout, test.stderr[-3000:]
    # The plugin's own checks and backends are rlexp's one-line errors.
    for override, line in (
        ("algo.mean_ent_coef=-1", "rlexp: error: algo.mean_ent_coef=-1.0 is out of range; use >= 0"),
        ("backend=tf", "rlexp: error: backend=tf has no entppo learner; available for entppo: torch"),
    ):
        bad = _run(ROOT, site, "-m", "rlexp", "algo=entppo", override, f"hydra.run.dir={tmp_path / 'bad'}")
        assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == line, bad.stderr[-2000:]


@pytest.mark.parametrize(
    "version,allowed", [("1.0.0", False), ("1.0.2", False), ("1.1.0", True), ("1.4.0", True)]
)
def test_the_gymnasium_floor_is_the_release_whose_api_rlexp_uses(version, allowed):
    """rlexp.envs runs async vector envs with gymnasium.vector.AutoresetMode and resets ended envs with
    the reset_mask option, both added in gymnasium 1.1: a 1.0.x install would fail every async run
    (issue 32), so pyproject must not admit it."""
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (gym,) = [Requirement(d) for d in deps if Requirement(d).name == "gymnasium"]
    assert gym.specifier.contains(version) is allowed
    import gymnasium

    assert hasattr(gymnasium.vector, "AutoresetMode")  # the installed one has it
