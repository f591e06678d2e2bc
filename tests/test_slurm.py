"""Sweeps on a REAL single-node SLURM (slurm-wlm + munge + slurmdbd), brought up by the fixture.

tests/slurm/slurm_up.sh installs the packages when missing (apt-get), starts munge, mariadb,
slurmdbd, slurmctld and slurmd, and tests/slurm/slurm_down.sh stops exactly those daemons again by
PID. A cluster that was already up before the tests is used and left running. Needs root; skipped
otherwise (CI runs as root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, one_slurm_cluster

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

SCRIPTS = Path(__file__).resolve().parent / "slurm"
# timeout_min*60 - signal_delay_s - 30 s (slurmctld's check period) must exceed a job's run time.
LAUNCHER = (
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.timeout_min=5",
    "hydra.launcher.signal_delay_s=10",
)


def _cluster_up() -> bool:
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if shutil.which("sinfo") is None or not conf.is_file():
        return False  # without a slurm.conf, sinfo would ask DNS off this machine for the controller
    res = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=20)
    return res.returncode == 0 and "idle" in res.stdout.split()


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    with one_slurm_cluster():
        if _cluster_up():
            yield
            return
        if os.geteuid() != 0:
            pytest.skip("bringing up a SLURM cluster needs root")
        env = {**os.environ, "SLURM_CI_DIR": str(tmp_path_factory.mktemp("slurm-ci"))}
        up = subprocess.run(
            ["bash", str(SCRIPTS / "slurm_up.sh")], capture_output=True, text=True, env=env, timeout=600
        )
        try:
            assert up.returncode == 0, f"slurm_up.sh failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
            yield
        finally:
            subprocess.run(
                ["bash", str(SCRIPTS / "slurm_down.sh")], env=env, capture_output=True, timeout=300
            )


def _sweep(sweep: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [sys.executable, "-m", "rlexp", "--multirun", f"hydra.sweep.dir={sweep}", *LAUNCHER, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextlib.contextmanager
def sweep_starter() -> Iterator[Callable[..., subprocess.Popen]]:
    """Yields :func:`_sweep`; a launcher still polling its jobs on the way out (a failed test) is killed,
    never left to poll a cluster that goes down after the test."""
    procs: list[subprocess.Popen] = []

    def start(sweep: Path, *args: str) -> subprocess.Popen:
        procs.append(_sweep(sweep, *args))
        return procs[-1]

    try:
        yield start
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


@pytest.fixture
def sweeps(slurm):
    """``sweeps(dir, *overrides)`` starts a sweep on the cluster (:func:`sweep_starter`)."""
    with sweep_starter() as start:
        yield start


def _states(job: str, timeout: float = 180) -> list[str]:
    """The accounting states of every run of ``job`` (-D: requeued runs too), once it has ended. On a
    loaded machine slurmdbd has recorded a finished array only after more than 60 s: wait up to ``timeout``."""
    deadline = time.time() + timeout
    while True:
        res = subprocess.run(
            ["sacct", "-X", "-D", "-n", "--parsable2", "-o", "JobID,State", "-j", job],
            capture_output=True,
            text=True,
        )
        states = [line.split("|")[1] for line in res.stdout.split() if line]
        if (states and states[-1] not in ("PENDING", "RUNNING", "COMPLETING")) or time.time() > deadline:
            return states
        time.sleep(1)


def test_a_two_job_sweep_with_two_ranks_each(sweeps, tmp_path):
    sweep = tmp_path / "sweep"
    proc = sweeps(sweep, "seed=0,1", "comm.procs=2", "algo.epochs=2", "algo.steps_per_epoch=400")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    runs = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert runs == ["0_seed=0", "1_seed=1"]
    for run in runs:
        progress = pd.read_table(sweep / run / "progress.txt")
        assert list(progress["Epoch"]) == [0, 1] and list(progress["TotalEnvInteracts"]) == [400, 800]
        assert (sweep / run / "checkpoints" / "epoch_000002.rank1.pt").is_file()  # both ranks ran
    # The cluster's accounting saw one job array whose two jobs completed.
    # .submitit holds a job folder per array task ("<array>_<task>") beside submitit's symlinks to the
    # submission files (".submission_file_<uuid>.sh"), in no fixed order: read the id off the folders.
    array = {p.name.split("_")[0] for p in (sweep / ".submitit").iterdir() if p.is_dir()}
    assert len(array) == 1, array
    array = array.pop()
    assert _states(array) == ["COMPLETED", "COMPLETED"]


def _preempt_after_an_epoch(sweep: Path, proc: subprocess.Popen) -> str:
    """Once the sweep's job 0 has logged an epoch, send its SLURM job USR2 (what SLURM sends, to every
    job step, before a preemption or the time limit); return the job id."""
    progress = sweep / "0" / "progress.txt"
    deadline = time.time() + 120
    while not (progress.exists() and len(progress.read_text().splitlines()) >= 2):
        assert time.time() < deadline and proc.poll() is None, "the job did not start training"
        time.sleep(0.2)
    job = next(p.name for p in (sweep / ".submitit").iterdir() if p.is_dir())
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    return job


def test_a_preempted_job_is_requeued_and_resumes_from_its_checkpoint(sweeps, tmp_path):
    sweep = tmp_path / "sweep"
    epochs = 8
    proc = sweeps(sweep, "seed=3", "comm.procs=2", f"algo.epochs={epochs}", "algo.steps_per_epoch=1000")
    progress = sweep / "0" / "progress.txt"
    job = _preempt_after_an_epoch(sweep, proc)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    log = "".join(p.read_text() for p in (sweep / ".submitit" / job).glob("*_log.*"))
    assert "got SIGUSR2: finishing this epoch and saving a checkpoint" in log
    stopped = int(log.split("stopped by SIGUSR2 after ")[1].split(" epoch")[0])
    assert 1 <= stopped < epochs
    assert f"Continuing {sweep / '0'} after {stopped} epoch" in log  # the requeued job resumed
    table = pd.read_table(progress)
    assert list(table["Epoch"]) == list(range(epochs))  # every epoch exactly once
    assert list(table["TotalEnvInteracts"]) == [1000 * (e + 1) for e in range(epochs)]
    assert _states(job) == ["REQUEUED", "COMPLETED"]  # requeued once, then finished


def test_a_job_slurm_refuses_is_one_line(sweeps, tmp_path):
    sweep = tmp_path / "sweep"
    proc = sweeps(sweep, "seed=0", "algo.epochs=1", "hydra.launcher.partition=nosuch")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-4000:]
    assert "Traceback" not in out
    last = out.strip().splitlines()[-1]
    assert last.startswith("rlexp: error: SLURM refused the job: sbatch: ") and "partition" in last, out
