"""Resume: a run that stops and continues gives the numbers and parameters of one that never stopped.

The contract (issue 5): train N epochs, stop, resume, train M more == an uninterrupted N+M run at the
same seed: every progress.txt column except wall-clock time, and every saved array (networks, target
networks, optimizer moments, RNG states, replay buffer), bit for bit on CPU.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlexp.checkpoint import latest_checkpoint, list_checkpoints, load_npz
from tests.conftest import ROOT, run_cli, train
from tests.test_algos import THROUGHPUT

TIMING = ["Time", *THROUGHPUT]  # wall-clock columns: no two runs share them

ON_POLICY = ("env=CartPole-v1", "algo.steps_per_epoch=500", "algo.train_pi_iters=5", "algo.train_v_iters=5")
OFF_POLICY = (
    "env=Pendulum-v1",
    "algo.steps_per_epoch=300",  # Pendulum's episodes are 200 steps: epochs end mid-episode
    "algo.start_steps=200",
    "algo.update_after=200",
    "algo.update_every=50",
    "algo.batch_size=32",
    "algo.num_test_episodes=1",
    "network.hidden_sizes=[32,32]",
    "algo.keep_checkpoints=null",
)
CASES = {
    "ppo-torch": ("algo=ppo", "backend=torch", *ON_POLICY),
    "ppo-tf": ("algo=ppo", "backend=tf", *ON_POLICY),
    "sac-torch": ("algo=sac", "backend=torch", *OFF_POLICY),
    "td3-tf": ("algo=td3", "backend=tf", *OFF_POLICY),
    "tqc-torch": ("algo=tqc", "backend=torch", *OFF_POLICY),
    # CrossQ: the running statistics of batch renormalisation are state too
    "crossq-tf": ("algo=crossq", "backend=tf", *OFF_POLICY, "algo.critic_width=32"),
}


def final_state(run_dir: Path) -> dict:
    """The newest checkpoint of a run as nested dicts of numpy arrays and plain values."""
    return read_checkpoint(latest_checkpoint(run_dir)[1])


def read_checkpoint(path: Path) -> dict:
    """A checkpoint file as nested dicts of numpy arrays and plain values (either backend)."""
    if path.suffix == ".npz":
        return load_npz(path)
    import torch

    def to_numpy(obj):
        if isinstance(obj, torch.Tensor):
            return obj.numpy()
        if isinstance(obj, dict):
            return {k: to_numpy(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [to_numpy(v) for v in obj]
        return obj

    return to_numpy(torch.load(path, map_location="cpu", weights_only=True))  # a GPU run's too


def assert_same(a, b, where: str = "checkpoint") -> None:
    """Equal structure and bit-equal arrays (NaN == NaN)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"{where} differs"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_run(a: Path, b: Path) -> None:
    pa, pb = pd.read_table(a / "progress.txt"), pd.read_table(b / "progress.txt")
    pd.testing.assert_frame_equal(pa.drop(columns=TIMING), pb.drop(columns=TIMING), check_exact=True)
    sa, sb = final_state(a), final_state(b)
    sa["loop"].pop("time"), sb["loop"].pop("time")
    assert_same(sa, sb)


def cut_back(whole: Path, part: Path, epoch: int) -> None:
    """``part``: ``whole`` as it was when it had saved ``epoch`` epochs and then crashed (the log may run ahead)."""
    shutil.copytree(whole, part)
    for e, path in list_checkpoints(part).items():
        if e > epoch:
            for p in part.glob(f"checkpoints/{path.stem}*"):
                p.unlink()


def assert_resumes_exactly(whole: Path, part: Path, epoch: int, *overrides: str) -> None:
    """``part`` (``whole`` cut back to its checkpoint after ``epoch`` epochs) resumed with ``overrides``
    must succeed and end exactly as ``whole`` did."""
    cut_back(whole, part, epoch)
    res = run_cli(f"resume={part}", *overrides)
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_run(whole, part)


@pytest.mark.parametrize("case", list(CASES))
def test_resume_equals_an_uninterrupted_run(tmp_path, case):
    """One on-policy and one off-policy algorithm per backend; the log's later rows are recomputed."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *CASES[case], "algo.epochs=4", "algo.save_freq=1")
    cut_back(whole, part, 2)
    res = run_cli(f"resume={part}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Continuing {part} after 2 epochs" in res.stdout and "dropped 2 later rows" in res.stdout
    assert_same_run(whole, part)


def test_train_n_epochs_then_m_more_equals_n_plus_m(tmp_path):
    args = CASES["ppo-torch"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *args, "algo.epochs=4")
    train(part, *args, "algo.epochs=2")
    res = run_cli(f"resume={part}", "algo.epochs=4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Continuing {part} after 2 epochs" in res.stdout
    assert "algo.epochs: 2 there, 4 now" in res.stdout  # config.yaml now says what the run did
    assert "epochs: 4" in (part / "config.yaml").read_text()
    assert_same_run(whole, part)


@pytest.mark.parametrize(
    "case,procs",
    [("tqc-torch", 1), ("crossq-tf", 1), pytest.param("crossq-torch", 2, marks=pytest.mark.mpi)],
)
def test_sac_relatives_n_epochs_then_m_more_equal_n_plus_m(tmp_path, case, procs):
    """TQC and CrossQ extended by resume=RUN algo.epochs=... (CrossQ's running statistics included; with
    2 ranks each rank's replay, generators and statistics)."""
    algo, backend = case.split("-")
    args = (f"algo={algo}", f"backend={backend}", *OFF_POLICY, f"comm.procs={procs}")
    args += ("algo.critic_width=32",) if algo == "crossq" else ()
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *args, "algo.epochs=3")
    train(part, *args, "algo.epochs=2")
    res = run_cli(f"resume={part}", "algo.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Continuing {part} after 2 epochs" in res.stdout
    assert_same_run(whole, part)


def _start(run_dir: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [sys.executable, "-m", "rlexp", f"hydra.run.dir={run_dir}", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for_rows(run_dir: Path, rows: int, timeout: float = 120) -> None:
    path, deadline = run_dir / "progress.txt", time.time() + timeout
    while time.time() < deadline:
        if path.exists() and len(path.read_text().splitlines()) > rows:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not reach {rows} rows")


def test_ctrl_c_saves_a_checkpoint_and_the_same_job_continues_it(tmp_path):
    args = (*CASES["ppo-torch"], "algo.epochs=150")  # ~0.1 s each: still running after the lock check
    run_dir, whole = tmp_path / "run", tmp_path / "whole"
    proc = _start(run_dir, *args)
    _wait_for_rows(run_dir, 1)
    # While it trains, the same job started again is refused: one process per run directory.
    res = run_cli(f"hydra.run.dir={run_dir}", *args)
    assert res.returncode == 2 and "is in use by another rlexp process" in res.stderr
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-2000:]
    assert "got SIGINT: finishing this epoch and saving a checkpoint" in out
    stopped = max(list_checkpoints(run_dir))
    assert (
        1 <= stopped < 150
        and f"stopped by SIGINT after {stopped} epoch" in out
        and ", checkpoint saved" in out
    )
    assert len(pd.read_table(run_dir / "progress.txt")) == stopped
    # Running the same job again (what a requeued SLURM job does) continues it.
    train(run_dir, *args)
    train(whole, *args)
    assert_same_run(whole, run_dir)


@pytest.mark.mpi
def test_resume_with_two_ranks_is_exact(tmp_path):
    """Each rank saves and restores its own env episode and RNGs: exact with 2 ranks too."""
    args = (*CASES["sac-torch"], "comm.procs=2", "algo.keep_checkpoints=2", "algo.epochs=3")
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *args)
    cut_back(whole, part, 2)
    # best.pt (rank 0's policy of the best test score so far, with best.json) is no resume point
    assert sorted(p.name for p in (part / "checkpoints").iterdir()) == [
        "best.json",
        "best.pt",
        "epoch_000002.pt",
        "epoch_000002.rank1.pt",
    ]
    res = run_cli(f"resume={part}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_run(whole, part)
    assert (part / "checkpoints" / "best.json").read_text() == (
        whole / "checkpoints" / "best.json"
    ).read_text()
    assert sorted(p.name for p in (part / "checkpoints").iterdir()) == [
        "best.json",
        "best.pt",
        "epoch_000002.pt",
        "epoch_000002.rank1.pt",
        "epoch_000003.pt",
        "epoch_000003.rank1.pt",
    ]


@pytest.fixture(scope="module")
def finished_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("finished")
    train(base / "ppo", *CASES["ppo-torch"], "algo.epochs=2")
    train(base / "sac", *CASES["sac-torch"], "algo.epochs=1")
    return base


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _no_ckpt(runs: Path, tmp: Path) -> list[str]:
    run = _copy(runs / "ppo", tmp / "run")
    shutil.rmtree(run / "checkpoints")
    return [f"resume={run}", "algo.epochs=3"]


def _truncated(runs: Path, tmp: Path) -> list[str]:
    run = _copy(runs / "ppo", tmp / "run")
    path = latest_checkpoint(run)[1]
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return [f"resume={run}", "algo.epochs=3"]


def _foreign(runs: Path, tmp: Path) -> list[str]:
    run = _copy(runs / "ppo", tmp / "run")
    shutil.copy(latest_checkpoint(runs / "sac")[1], run / "checkpoints" / "epoch_000009.pt")
    return [f"resume={run}", "algo.epochs=12"]


def _not_a_run(tmp: Path) -> Path:
    """A directory with files in it, none of them a run's."""
    (tmp / "notes.txt").write_text("not a run\n")
    return tmp


BAD_RESUMES = {
    "not a run": (lambda runs, tmp: [f"resume={_not_a_run(tmp)}"], "no config.yaml there"),
    "a folder of runs": (
        lambda runs, tmp: [f"resume={_copy(runs / 'ppo', tmp / 'sweep' / '0_seed=0').parent}"],
        f"no config.yaml there; give the directory of an rlexp run; it holds 1 run, e.g. {os.sep}",
    ),
    "no such directory": (
        lambda runs, tmp: [f"resume={tmp / 'typo'}"],
        "typo: no such run (the directory is missing or empty)",
    ),
    "no checkpoint": (_no_ckpt, "no checkpoint in"),
    "truncated checkpoint": (_truncated, "cannot be read"),
    "checkpoint of another run": (
        _foreign,
        "was written by algo=sac backend=torch env=Pendulum-v1 network=[32, 32] relu; "
        "this run is algo=ppo backend=torch env=CartPole-v1 network=[64, 64] tanh",
    ),
    "changed hyperparameter": (
        lambda runs, tmp: [f"resume={_copy(runs / 'ppo', tmp / 'run')}", "algo.gamma=0.9"],
        "algo.gamma=0.9 cannot be changed (only algo.epochs, backend.device, comm.nodes, comm.hostfile, comm.interface",
    ),
    "fewer epochs": (
        lambda runs, tmp: [f"resume={_copy(runs / 'ppo', tmp / 'run')}", "algo.epochs=1"],
        "algo.epochs=1 but",
    ),
    "resume in a sweep": (
        lambda runs, tmp: ["--multirun", f"resume={_copy(runs / 'ppo', tmp / 'run')}"],
        "cannot be swept",
    ),
}


@pytest.mark.parametrize("case", list(BAD_RESUMES))
def test_a_bad_resume_is_one_line_and_destroys_nothing(tmp_path, finished_runs, case):
    make, fragment = BAD_RESUMES[case]
    args = make(finished_runs, tmp_path)
    before = _snapshot(tmp_path)
    res = run_cli(*args, timeout=120)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: ") and fragment in lines[0], res.stderr
    assert _snapshot(tmp_path) == before


def test_resuming_a_finished_run_does_nothing(finished_runs, tmp_path):
    run = _copy(finished_runs / "ppo", tmp_path / "run")
    before = _snapshot(run)
    res = run_cli(f"resume={run}")
    assert res.returncode == 0 and "has finished its 2 epochs; nothing to do" in res.stdout
    assert _snapshot(run) == before
