"""Placement of one run's ranks over several nodes (rlexp/cluster.py), without a cluster: the node count
and its checks, mpiexec's mapping arguments, the world check, the GPU per local rank, a hostfile run
under a real mpiexec, and the SLURM launcher preset. The runs on a real 2-node SLURM cluster are in
test_slurm_multinode.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.cluster import (
    PRTED_AGENT,
    check_world,
    mpiexec_placement,
    rank_gpu,
    read_hostfile,
    resolve_nodes,
    sharing_note,
    slurm_environment,
)
from rlexp.errors import RLExpError
from rlexp.schema import CommConfig
from tests.conftest import ROOT, run_cli, train


def comm(procs: int = 4, nodes: int | None = None, hostfile: str | None = None, **kw) -> CommConfig:
    values = dict(mpiexec=None, oversubscribe=True, extra_args=[], interface=None) | kw
    return CommConfig(procs=procs, nodes=nodes, hostfile=hostfile, **values)


def test_ranks_beyond_the_cores_of_one_machine_are_named_once(monkeypatch, tmp_path):
    """More ranks than usable cores on one machine take turns: a line says so (before the run and in its dry
    run); ranks that fit, one rank, and runs over several nodes or a hostfile get none."""
    monkeypatch.setattr("rlexp.cluster.usable_cores", lambda: 2)
    assert sharing_note(comm(procs=8), nodes=1) == (
        "comm.procs=8: 8 ranks share this machine's 2 cores and take turns (oversubscribed): ranks beyond the "
        "cores add no speed"
    )
    assert "2 ranks in each of 2 runs at a time share this machine's 2 cores" in sharing_note(
        comm(procs=2), 1, jobs=2
    )
    for quiet in (comm(procs=2), comm(procs=1)):
        assert sharing_note(quiet, nodes=1) is None
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a\nb\n")
    assert sharing_note(comm(procs=8, nodes=2), nodes=2) is None
    assert sharing_note(comm(procs=8, hostfile=str(hostfile)), nodes=2) is None
    cores = len(os.sched_getaffinity(0))
    res = run_cli(f"comm.procs={cores + 1}", "dry_run=true")
    assert res.returncode == 0 and res.stdout.startswith(
        f"comm.procs={cores + 1}: {cores + 1} ranks share"
    ), res.stdout


@pytest.fixture
def no_slurm(monkeypatch):
    for var in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def slurm_job(monkeypatch, no_slurm):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")


def test_nodes_outside_slurm(no_slurm):
    assert resolve_nodes(comm(4)) == 1 and resolve_nodes(comm(4, 1)) == 1
    with pytest.raises(RLExpError) as err:
        resolve_nodes(comm(4, 2))
    assert str(err.value) == (
        "comm.nodes=2 but without a SLURM allocation or comm.hostfile there is 1 node; run inside a SLURM "
        "allocation (hydra/launcher=slurm, salloc, sbatch) or give comm.hostfile"
    )


def test_nodes_inside_a_slurm_allocation(slurm_job):
    assert resolve_nodes(comm(4)) == 2  # null: the allocation's nodes
    assert resolve_nodes(comm(4, 1)) == 1 and resolve_nodes(comm(1)) == 1
    with pytest.raises(RLExpError, match=r"^comm.nodes=3 but SLURM job 77 has 2 nodes$"):
        resolve_nodes(comm(6, 3))
    with pytest.raises(RLExpError) as err:
        resolve_nodes(comm(3))
    assert str(err.value) == (
        "comm.procs=3 does not split evenly over comm.nodes=null (2 nodes); use a multiple of 2 "
        "(procs counts the ranks of all nodes)"
    )


def test_hostfile(tmp_path, no_slurm):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode01 slots=16\n\nnode02 slots=16  # second\nnode01\n")
    assert read_hostfile(str(hostfile)) == ["node01", "node02"]
    assert resolve_nodes(comm(32, hostfile=str(hostfile))) == 2
    with pytest.raises(RLExpError, match=r"lists 2 nodes$"):
        resolve_nodes(comm(6, 3, hostfile=str(hostfile)))
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(RLExpError, match=r"lists no host"):
        read_hostfile(str(tmp_path / "empty"))
    with pytest.raises(RLExpError, match=r"^comm.hostfile=/nonexistent cannot be read \(No such file"):
        read_hostfile("/nonexistent")


def test_mpiexec_placement_one_node_is_unchanged(no_slurm):
    assert mpiexec_placement(comm(4), 1, "/venv/bin/mpiexec") == ["--oversubscribe"]
    assert mpiexec_placement(comm(4, oversubscribe=False), 1, "/venv/bin/mpiexec") == []
    env: dict[str, str] = {"SLURM_JOB_ID": "1"}
    slurm_environment(env, comm(4), 1)
    assert env == {"SLURM_JOB_ID": "1", "PRTE_MCA_ras": "^slurm"}  # one task of N CPUs: N slots


def test_mpiexec_placement_over_slurm_nodes(slurm_job, tmp_path):
    mpiexec = tmp_path / "mpiexec"
    (tmp_path / "prted").touch()
    args = mpiexec_placement(comm(8, 2, interface="10.1.0.0/16"), 2, str(mpiexec))
    assert args == [
        "--map-by", "ppr:4:node:OVERSUBSCRIBE",
        "--prtemca", "prte_launch_agent", f"/bin/sh {PRTED_AGENT} {tmp_path / 'prted'}",
        "--prtemca", "oob_tcp_if_include", "10.1.0.0/16", "--mca", "btl_tcp_if_include", "10.1.0.0/16",
    ]  # fmt: skip
    env: dict[str, str] = {"SLURM_JOB_ID": "1", "PRTE_MCA_ras": "^slurm"}
    slurm_environment(env, comm(8, 2), 2)
    assert env["SLURM_OVERLAP"] == "1"  # PRRTE's srun may start inside submitit's job step
    assert env["PRTE_MCA_ras"] == "^slurm"  # a user's own setting is kept: the ranks' check catches it


def test_the_launch_agent_ignores_usr2():
    res = subprocess.run(
        ["/bin/sh", str(PRTED_AGENT), "sh", "-c", "kill -USR2 $$; echo survived"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and res.stdout == "survived\n"


def test_mpiexec_placement_with_a_hostfile(no_slurm, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a\nb\n")
    args = mpiexec_placement(comm(4, hostfile=str(hostfile), oversubscribe=False), 2, "mpiexec")
    assert args == ["--map-by", "ppr:2:node", "--hostfile", str(hostfile)]  # no launch agent without SLURM


def test_check_world():
    check_world(2, ["n1", "n2"], 2, 2)
    check_world(2, ["n1", "n1"], 2, None)
    with pytest.raises(RLExpError) as err:
        check_world(1, ["n1"], 2, 2)
    assert str(err.value).startswith("the MPI world has 1 rank on 1 host (n1) but comm.procs=2;")
    with pytest.raises(RLExpError) as err:
        check_world(4, ["n1"] * 4, 4, 2)
    assert str(err.value).startswith("the 4 ranks run on 1 host (n1) but 2 nodes were asked for;")


def test_each_rank_takes_the_gpu_of_its_local_rank(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    assert rank_gpu("cuda", 2) == 1 and rank_gpu("cuda", 4) == 3 and rank_gpu("auto", 2) == 1
    assert rank_gpu("cuda:0", 4) == 0  # named: every rank uses it
    assert rank_gpu("cpu", 4) is None and rank_gpu("auto", 0) is None


def test_the_slurm_launcher_asks_for_the_nodes(no_slurm):
    from rlexp.api import compose

    launcher = compose(["hydra/launcher=slurm", "comm.procs=8", "comm.nodes=2"]).hydra.launcher
    assert (launcher.nodes, launcher.tasks_per_node, launcher.cpus_per_task) == (2, 1, 4)
    assert launcher._target_ == "hydra_plugins.rlexp_launcher.slurm_launcher.SlurmLauncher"
    launcher = compose(["hydra/launcher=slurm", "comm.procs=3"]).hydra.launcher
    assert (launcher.nodes, launcher.cpus_per_task) == (1, 3)  # one node, as before


def test_bad_node_settings_are_one_line(tmp_path, no_slurm):
    for args, line in [
        (["comm.nodes=0"], "rlexp: error: comm.nodes=0 is out of range; use an integer >= 1 or null"),
        (["comm.procs=2", "comm.nodes=2"], "rlexp: error: comm.nodes=2 but without a SLURM allocation"),
        (
            ["comm.procs=2", "comm.hostfile=/nonexistent"],
            "rlexp: error: comm.hostfile=/nonexistent cannot be read",
        ),
    ]:
        res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", *args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().splitlines()[-1].startswith(line), res.stderr
        assert not (tmp_path / "run").exists()  # nothing written


def test_a_launch_agent_path_with_a_space_is_one_line_before_anything_is_written(tmp_path, slurm_job):
    # PRRTE splits prte_launch_agent at whitespace, so prted under "a b/" would be started as "a"
    bindir = tmp_path / "open mpi" / "bin"
    bindir.mkdir(parents=True)
    for name in ("mpiexec", "prted"):
        (bindir / name).write_text("#!/bin/sh\nexit 1\n")
        (bindir / name).chmod(0o755)
    with pytest.raises(RLExpError, match=r"from '.*open mpi/bin/prted': PRRTE splits"):
        mpiexec_placement(comm(4, 2), 2, str(bindir / "mpiexec"))
    assert mpiexec_placement(comm(2, 1), 1, str(bindir / "mpiexec")) == [
        "--oversubscribe"
    ]  # one node: no agent
    res = run_cli(
        f"hydra.run.dir={tmp_path / 'run'}",
        "comm.procs=2",
        "comm.nodes=2",
        f"comm.mpiexec={bindir / 'mpiexec'}",
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("rlexp: error: ranks on several nodes of a SLURM job cannot be started from"), last
    assert "without spaces" in last
    assert not (tmp_path / "run").exists()  # nothing written


@pytest.mark.mpi
def test_a_hostfile_run_records_where_its_ranks_ran(tmp_path, no_slurm):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    run = tmp_path / "run"
    train(run, "comm.procs=2", f"comm.hostfile={hostfile}", "algo.epochs=1", "algo.steps_per_epoch=400")
    record = json.loads((run / "provenance.json").read_text())
    host = socket.gethostname()
    assert record["placement"] == [
        {"rank": 0, "host": host, "local_rank": 0, "device": "cpu"},
        {"rank": 1, "host": host, "local_rank": 1, "device": "cpu"},
    ]
    assert record["mpi"] == {"world_size": 2, "hosts": [host]}


@pytest.mark.mpi
def test_ranks_check_the_world_they_joined(tmp_path, no_slurm):
    """A world smaller than comm.procs (mpiexec started the workers with another -n) is one line."""
    run = tmp_path / "run"
    train(run, "comm.procs=2", "algo.epochs=1", "algo.steps_per_epoch=400")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    res = subprocess.run(
        [mpiexec, "-n", "1", sys.executable, "-P", "-m", "rlexp.worker", str(run), "--nodes", "1"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert res.returncode != 0 and "Traceback" not in res.stderr
    host = socket.gethostname()
    assert (
        f"rlexp: error (rank 0): the MPI world has 1 rank on 1 host ({host}) but comm.procs=2;" in res.stderr
    )


def test_the_ranks_import_the_launchers_rlexp_not_another_copy(tmp_path):
    """mpiexec starts the ranks with ``python -P``, which imports the rlexp installed in the environment:
    a launcher run from another copy (a second checkout, a git worktree) puts its own first on the ranks'
    PYTHONPATH, and exports it to other nodes."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "rlexp", copy / "rlexp", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "probe.py").write_text(
        "import subprocess, sys, types\n"
        "from rlexp.mpirun import mpi_environment, mpiexec_command\n"
        "from rlexp.schema import CommConfig\n"
        "comm = CommConfig(procs=2, nodes=None, hostfile=None, interface=None, mpiexec=None,\n"
        "                  oversubscribe=True, extra_args=[])\n"
        "cfg = types.SimpleNamespace(comm=comm, backend=types.SimpleNamespace(threads_per_rank=lambda n: 1))\n"
        "print(' '.join(mpiexec_command(cfg, 'mpiexec', sys.argv[1])))\n"
        "rank = [sys.executable, '-P', '-c', 'import rlexp; print(rlexp.__file__)']\n"
        "print(subprocess.run(rank, env=mpi_environment(cfg), capture_output=True, text=True, check=True).stdout)\n"
    )
    res = subprocess.run(
        [sys.executable, "probe.py", str(tmp_path / "run")],
        cwd=copy,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    command, imported = res.stdout.strip().splitlines()
    assert "-x PYTHONPATH " in command
    assert imported == str(copy / "rlexp" / "__init__.py")


def test_a_run_directory_a_node_cannot_see_is_one_line(tmp_path):
    res = run_cli(str(tmp_path / "elsewhere"), module="rlexp.worker")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (
        f"rlexp: error (rank 0): the run directory {tmp_path / 'elsewhere'} does not exist on "
        f"{socket.gethostname()}; runs over several nodes need a filesystem that every node sees at the same path"
    )


def test_an_mpiexec_that_ignores_sigterm_is_killed_after_the_grace_period():
    from rlexp.mpirun import end

    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "1\n"  # its SIGTERM handler is in place
    end(proc, grace=0.5)
    assert proc.returncode == -9  # SIGKILL, half a second after the ignored SIGTERM
