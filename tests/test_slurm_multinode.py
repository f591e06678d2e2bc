"""One run's MPI ranks over two nodes of a REAL SLURM cluster on this machine.

tests/slurm/multinode_up.sh brings up a 2-node cluster: each node a network + UTS namespace with its
own hostname (node1, node2), address (10.213.0.11, .12) and slurmd; munge, slurmctld and slurmdbd on
the host. The nodes share the filesystem (as NFS would), so run directories are seen by both. Its
traffic stays on loopback and the bridge between those namespaces. Needs root and network
namespaces; skipped with the reason otherwise. The module's last step takes the cluster down (leaving
a stub slurm.conf, so that no Slurm client ever asks DNS for a controller).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ROOT, one_slurm_cluster
from tests.test_slurm import _preempt_after_an_epoch, sweep_starter

pytestmark = [pytest.mark.slurm, pytest.mark.mpi]

SCRIPTS = Path(__file__).resolve().parent / "slurm"
PYTHON = sys.executable
# On this one machine every node would bind its rank to the same core: no binding.
NO_BINDING = "comm.extra_args=[--bind-to,none]"
TIMING = ["Time", "SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm"]


def _namespaces_missing() -> str | None:
    """Why this machine cannot host the cluster, or None."""
    if os.geteuid() != 0:
        return "a multi-node SLURM cluster on one machine needs root"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"network namespaces are not available here ({probe.stderr.strip()})"
    return None


@pytest.fixture(scope="module")
def cluster():
    reason = _namespaces_missing()
    if reason is not None:
        pytest.skip(reason)
    with one_slurm_cluster():
        yield from _cluster()


def _cluster():
    """Bring up the 2-node cluster for the module's tests, and down again after them."""
    # Not under pytest's tmp dir (mode 700): munged runs as user munge and writes its log there.
    state = tempfile.mkdtemp(prefix="rlexp-slurm-mn-")
    os.chmod(state, 0o755)
    env = {**os.environ, "SLURM_MN_DIR": state, "MN_PURGE": "1"}
    up = subprocess.run(
        ["bash", str(SCRIPTS / "multinode_up.sh"), "2"], capture_output=True, text=True, env=env, timeout=900
    )
    try:
        if "port 6817 is in use" in up.stderr:
            pytest.skip("another SLURM controller runs on this machine (port 6817)")
        assert up.returncode == 0, f"multinode_up.sh failed:\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
        yield
    finally:
        subprocess.run(
            ["bash", str(SCRIPTS / "multinode_down.sh")], env=env, capture_output=True, timeout=300
        )


@pytest.fixture
def sweeps(cluster):
    """``sweeps(dir, *overrides)`` starts a sweep on the 2-node cluster (test_slurm's :func:`sweep_starter`)."""
    with sweep_starter() as start:
        yield start


def _sbatch(script: str, out: Path, timeout: float = 180) -> str:
    """Run ``script`` as a 2-node batch job (one task of one CPU per node) and wait for it to end;
    return its output."""
    job = subprocess.run(
        ["sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "--cpus-per-task=1", f"--chdir={ROOT}",
         f"--output={out}", "--wrap", script],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    deadline = time.time() + timeout
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout.strip():
        assert time.time() < deadline, f"batch job {job} did not end in {timeout} s"
        time.sleep(0.5)
    return out.read_text()


def _local_run(run_dir: Path, *args: str) -> pd.DataFrame:
    """The same run with 2 ranks on this machine, outside SLURM (no SLURM variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    subprocess.run(
        [PYTHON, "-m", "rlexp", f"hydra.run.dir={run_dir}", "comm.procs=2", *args],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )  # fmt: skip
    return pd.read_table(run_dir / "progress.txt").drop(columns=TIMING)


def _placement(path: Path) -> list[tuple[int, str]]:
    return [(row["rank"], row["host"]) for row in json.loads(path.read_text())["placement"]]


def test_ppo_over_two_nodes_equals_the_same_run_on_one_node(sweeps, tmp_path):
    sweep = tmp_path / "sweep"
    args = ("seed=0", "algo.epochs=2", "algo.steps_per_epoch=400")
    proc = sweeps(sweep, *args, "comm.procs=2", "comm.nodes=2", NO_BINDING)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    run = sweep / "0"
    assert _placement(run / "provenance.json") == [(0, "node1"), (1, "node2")]  # one rank per node
    job = next(p for p in (sweep / ".submitit").iterdir() if p.is_dir())
    assert len(list(job.glob("*_result.pkl"))) == 2  # a task per node; the second one returned at once
    multi = pd.read_table(run / "progress.txt").drop(columns=TIMING)
    assert multi.equals(_local_run(tmp_path / "local", *args))


def test_usr2_over_two_nodes_requeues_and_resumes_exactly(sweeps, tmp_path):
    sweep = tmp_path / "sweep"
    epochs = 8
    args = ("seed=3", f"algo.epochs={epochs}", "algo.steps_per_epoch=1000")
    proc = sweeps(sweep, *args, "comm.procs=2", "comm.nodes=2", NO_BINDING)
    progress = sweep / "0" / "progress.txt"
    job = _preempt_after_an_epoch(sweep, proc)  # USR2 reaches every step: PRRTE's daemon on node2 too
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-4000:]
    log = "".join(p.read_text() for p in (sweep / ".submitit" / job).glob("*_log.*"))
    assert "PRTE has lost communication" not in log
    stopped = int(log.split("stopped by SIGUSR2 after ")[1].split(" epoch")[0])
    assert 1 <= stopped < epochs
    assert f"Continuing {sweep / '0'} after {stopped} epoch" in log
    res = subprocess.run(
        ["sacct", "-X", "-D", "-n", "--parsable2", "-o", "State", "-j", job], capture_output=True, text=True
    )
    assert res.stdout.split()[:1] == ["REQUEUED"], res.stdout
    # the requeued job ran over both nodes again, and the run equals one that was never stopped
    assert _placement(sweep / "0" / "provenance.resume1.json") == [(0, "node1"), (1, "node2")]
    multi = pd.read_table(progress).drop(columns=TIMING)
    assert multi.equals(_local_run(tmp_path / "local", *args))


def test_a_run_inside_a_users_allocation_uses_its_nodes(cluster, tmp_path):
    run = tmp_path / "run"
    script = f"{PYTHON} -m rlexp hydra.run.dir={run} comm.procs=2 {NO_BINDING} algo.epochs=1 algo.steps_per_epoch=400"
    out = _sbatch(script, tmp_path / "job.out")
    assert "Run finished" in out, out[-3000:]
    assert _placement(run / "provenance.json") == [(0, "node1"), (1, "node2")]  # comm.nodes=null: both


def test_ranks_that_land_on_one_node_are_refused(cluster, tmp_path):
    """A bare --oversubscribe inside a 2-node allocation puts both ranks on the first node with exit 0
    (measured); the ranks see it and stop with one line."""
    run = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    subprocess.run(
        [PYTHON, "-m", "rlexp", f"hydra.run.dir={run}", "comm.procs=2", "algo.epochs=1", "algo.steps_per_epoch=400"],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )  # fmt: skip
    mpiexec = Path(PYTHON).parent / "mpiexec"
    script = (
        f"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 {mpiexec} -n 2 --oversubscribe "
        f"{PYTHON} -P -m rlexp.worker {run} --nodes 2; echo exit=$?"
    )
    out = _sbatch(script, tmp_path / "job.out")
    errors = [line for line in out.splitlines() if line.startswith("rlexp: error")]
    assert errors == [
        "rlexp: error (rank 0): the 2 ranks run on 1 host (node1) but 2 nodes were asked for; Open MPI did "
        "not read the allocation (an exported PRTE_MCA_ras=^slurm or --oversubscribe in comm.extra_args puts "
        "every rank on the first node)"
    ], out
    assert "exit=0" not in out and "Traceback" not in out
