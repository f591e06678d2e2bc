"""End-to-end runs of the real CLI: learning, MPI ranks, determinism, checkpoints, failures, sweeps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from rlexp.checkpoint import list_checkpoints

from .conftest import ROOT, run_cli, train
from .test_algos import COLUMNS, THROUGHPUT

SMALL = ["algo.epochs=3", "algo.steps_per_epoch=600", "algo.train_pi_iters=10", "algo.train_v_iters=10"]


def test_default_run_learns_cartpole(tmp_path):
    """`make run`'s experiment (PPO, CartPole-v1, seed 0) at half its epochs already balances the pole."""
    df = train(tmp_path / "run", "algo.epochs=25", timeout=240)
    assert len(df) == 25
    assert df["AverageEpRet"].iloc[0] < 60  # random policy: ~22
    assert df["AverageEpRet"].iloc[-1] >= 400, df["AverageEpRet"].tolist()
    assert df["TotalEnvInteracts"].iloc[-1] == 25 * 4000


def test_progress_columns_are_spinning_ups_ppo_keys(tmp_path):
    df = train(tmp_path / "run", *SMALL)
    assert list(df.columns) == COLUMNS["ppo"]  # Spinning Up's PPO keys, listed in test_algos
    assert df["Epoch"].tolist() == [0, 1, 2] and df["TotalEnvInteracts"].tolist() == [600, 1200, 1800]
    assert (df["StopIter"] <= 79).all() and (df["KL"].abs() < 0.1).all()


def test_lunar_lander_preset_trains(tmp_path):
    """env=LunarLander-v3 (the README's preset; box2d is a dependency) trains an epoch."""
    pytest.importorskip("Box2D", reason="box2d has no wheel for this platform or Python")
    df = train(tmp_path / "run", "env=LunarLander-v3", "algo.epochs=1", "algo.steps_per_epoch=400")
    assert df["Epoch"].tolist() == [0] and df["TotalEnvInteracts"].tolist() == [400]


@pytest.mark.mpi
def test_two_ranks_on_halfcheetah_as_in_the_readme(tmp_path):
    run_dir = tmp_path / "run"
    df = train(run_dir, "algo=ppo", "env=HalfCheetah-v4", "comm.procs=2", "algo.epochs=3", timeout=300)
    assert df["TotalEnvInteracts"].tolist() == [4000, 8000, 12000]
    # 2 ranks x 2000 steps per epoch: every 1000-step episode ends inside an epoch boundary pair
    assert df["EpLen"].dropna().eq(1000).all()
    assert (run_dir / "checkpoints").is_dir()


def test_same_seed_same_progress(tmp_path):
    """Two runs at one seed agree (2 ranks: see test_resume.test_resume_with_two_ranks_is_exact)."""
    a = train(tmp_path / "a", *SMALL, "seed=3")
    b = train(tmp_path / "b", *SMALL, "seed=3")
    c = train(tmp_path / "c", "algo.epochs=1", *SMALL[1:], "seed=4")
    timing = ["Time", *THROUGHPUT]
    pd.testing.assert_frame_equal(a.drop(columns=timing), b.drop(columns=timing))
    assert a["LossV"].iloc[0] != c["LossV"].iloc[0]  # the seed matters, so the equality above means something


def test_checkpoints_are_complete_and_load_without_pickle(tmp_path):
    run_dir = tmp_path / "run"
    train(run_dir, *SMALL, "algo.save_freq=2")
    ckpts = list_checkpoints(run_dir)
    assert sorted(ckpts) == [2, 3]  # every save_freq epochs, and after the last
    state = torch.load(ckpts[3], weights_only=True)
    assert state["algo"] == "ppo" and state["loop"]["epoch"] == 3
    learner = state["learner"]
    assert {"pi.logits_net.0.weight", "v.v_net.0.weight"} <= set(learner["modules"]["ac"])
    assert set(learner["optimizers"]) == {"pi", "vf"} and learner["optimizers"]["pi"]["state"]
    assert not list(run_dir.glob("checkpoints/*.tmp"))


def test_run_records_and_no_reuse_of_a_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    train(run_dir, *SMALL, "algo.lr=1e-3")
    cfg_text = (run_dir / "config.yaml").read_text()
    assert "pi_lr: 0.001" in cfg_text and "vf_lr: 0.001" in cfg_text  # the rates really used
    assert '"exp_name":\t"ppo_CartPole-v1"' in (run_dir / "config.json").read_text()
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    # Another experiment in the same directory is refused, naming the first difference.
    res = run_cli(f"hydra.run.dir={run_dir}", *SMALL)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "already holds a different run (algo.lr: 0.001 there, None now)" in res.stderr
    # The same experiment again finds it finished and does nothing.
    res = run_cli(f"hydra.run.dir={run_dir}", *SMALL, "algo.lr=1e-3")
    assert res.returncode == 0 and "has finished its 3 epochs; nothing to do" in res.stdout
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


@pytest.mark.mpi
def test_a_crashing_rank_ends_the_run_promptly(tmp_path):
    t0 = time.time()
    res = run_cli(
        f"hydra.run.dir={tmp_path / 'run'}",
        "env=gym",
        "env.id=tests.envs:RLExpTest/CrashOnRank1-v0",
        "comm.procs=2",
        "algo.steps_per_epoch=400",
        timeout=120,
    )
    assert res.returncode != 0
    assert "deliberate crash on rank 1" in res.stderr
    assert "MPI ranks exited with status" in res.stderr
    assert time.time() - t0 < 60


@pytest.mark.mpi
def test_sigterm_reaches_the_ranks(tmp_path):
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlexp", f"hydra.run.dir={run_dir}", "comm.procs=2", "algo.epochs=1000"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.time() + 60
    while not (run_dir / "progress.txt").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:]
    time.sleep(1.0)
    ps = subprocess.run(["pgrep", "-f", f"rlexp.worker {run_dir}"], capture_output=True, text=True)
    assert ps.stdout.strip() == "", "worker ranks outlived the run"
    # Both ranks finished their epoch and saved their part of a checkpoint that matches the log.
    epoch = max(list_checkpoints(run_dir))
    assert f"stopped by SIGTERM after {epoch} epoch" in out and ", checkpoint saved" in out
    assert (run_dir / "checkpoints" / f"epoch_{epoch:06d}.rank1.pt").is_file()
    assert len(pd.read_table(run_dir / "progress.txt")) == epoch


def test_multirun_gives_each_job_its_own_directory(tmp_path):
    """Two jobs at a time on this machine (hydra/launcher=parallel), each with one thread."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun",
        "hydra/launcher=parallel",
        f"hydra.sweep.dir={sweep}",
        "seed=0,1",
        "algo.lr=1e-3,3e-4",
        "algo.epochs=1",
        "algo.steps_per_epoch=200",
        "algo.train_pi_iters=2",
        "algo.train_v_iters=2",
    )
    assert res.returncode == 0, res.stderr
    runs = sorted(p.parent for p in sweep.glob("*/progress.txt"))
    # Named by the swept keys only (the fixed algo.epochs=1 ... are left out), numbered by job.
    assert sorted(r.name for r in runs) == [
        "0_algo.lr=0.001,seed=0",
        "1_algo.lr=0.0003,seed=0",
        "2_algo.lr=0.001,seed=1",
        "3_algo.lr=0.0003,seed=1",
    ]
    assert all("threads: 1\n" in (r / "config.yaml").read_text() for r in runs)  # 2 cores / 2 jobs


def test_plot_and_test_policy_read_a_finished_run(tmp_path):
    run_dir = tmp_path / "run"
    train(run_dir, *SMALL)
    res = run_cli(str(run_dir), "-n", "3", "-nr", "-d", module="rlexp.test_policy")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("Episode ") == 3 and "AverageEpRet" in res.stdout
    out = tmp_path / "curve.png"
    res = run_cli(str(run_dir), "-o", str(out), module="rlexp.plot")
    assert res.returncode == 0, res.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    for module, args, fragment in [
        ("rlexp.plot", [str(tmp_path / "none")], "no runs"),
        ("rlexp.test_policy", [str(tmp_path)], "not an rlexp run directory"),
        ("rlexp.plot", [str(run_dir), "-y", "Nope"], "column 'Nope'"),
    ]:
        res = run_cli(*args, module=module)
        assert res.returncode == 2 and fragment in res.stderr and "Traceback" not in res.stderr
