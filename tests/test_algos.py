"""Every algorithm end to end: Spinning Up's log columns, a MuJoCo smoke run, learning at fixed seeds,
two MPI ranks, and checkpoint contents. The learning budgets are small; the thresholds are not."""

from __future__ import annotations

import pytest
import torch

from rlexp.checkpoint import list_checkpoints

from .conftest import train

ON_POLICY_COLUMNS = [
    "Epoch",
    "AverageEpRet",
    "StdEpRet",
    "MaxEpRet",
    "MinEpRet",
    "EpLen",
    "AverageVVals",
    "StdVVals",
    "MaxVVals",
    "MinVVals",
    "TotalEnvInteracts",
    "LossPi",
    "LossV",
    "DeltaLossPi",
    "DeltaLossV",
]
OFF_POLICY_COLUMNS = [
    "Epoch",
    "AverageEpRet",
    "StdEpRet",
    "MaxEpRet",
    "MinEpRet",
    "AverageTestEpRet",
    "StdTestEpRet",
    "MaxTestEpRet",
    "MinTestEpRet",
    "EpLen",
    "TestEpLen",
    "TotalEnvInteracts",
]


def mm(key: str) -> list[str]:
    return [f"Average{key}", f"Std{key}", f"Max{key}", f"Min{key}"]


# rlexp's throughput columns (rlexp/timing.py), logged after Spinning Up's; they vary run to run.
THROUGHPUT = ["SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm"]
# Spinning Up's documented log_tabular keys, in order (reference/spinningup.md section 1.2), then ours.
COLUMNS = {
    "vpg": [*ON_POLICY_COLUMNS, "Entropy", "KL", "Time", *THROUGHPUT],
    "trpo": [*ON_POLICY_COLUMNS, "KL", "BacktrackIters", "Time", *THROUGHPUT],
    "ppo": [*ON_POLICY_COLUMNS, "Entropy", "KL", "ClipFrac", "StopIter", "Time", *THROUGHPUT],
    "ddpg": [*OFF_POLICY_COLUMNS, *mm("QVals"), "LossPi", "LossQ", "Time", *THROUGHPUT],
    "td3": [*OFF_POLICY_COLUMNS, *mm("Q1Vals"), *mm("Q2Vals"), "LossPi", "LossQ", "Time", *THROUGHPUT],
    "sac": [
        *OFF_POLICY_COLUMNS,
        *mm("Q1Vals"),
        *mm("Q2Vals"),
        *mm("LogPi"),
        "LossPi",
        "LossQ",
        "Time",
        *THROUGHPUT,
    ],
    # SAC's relatives tune alpha by default (sb3-contrib's ent_coef 'auto')
    "tqc": [
        *OFF_POLICY_COLUMNS,
        *mm("QVals"),
        *mm("LogPi"),
        "LossPi",
        "LossQ",
        "Alpha",
        "LossAlpha",
        "Time",
        *THROUGHPUT,
    ],
    "crossq": [
        *OFF_POLICY_COLUMNS,
        *mm("Q1Vals"),
        *mm("Q2Vals"),
        *mm("LogPi"),
        "LossPi",
        "LossQ",
        "Alpha",
        "LossAlpha",
        "Time",
        *THROUGHPUT,
    ],
}
ON_SHORT = ["algo.train_v_iters=5"]
OFF_SHORT = [
    "algo.start_steps=100",
    "algo.update_after=100",
    "algo.update_every=50",
    "algo.num_test_episodes=2",
]
SHORT = {
    "vpg": ON_SHORT,
    "trpo": ON_SHORT,
    "ppo": [*ON_SHORT, "algo.train_pi_iters=5"],
    "ddpg": OFF_SHORT,
    "td3": OFF_SHORT,
    "sac": OFF_SHORT,
    "tqc": OFF_SHORT,
    "crossq": [*OFF_SHORT, "algo.critic_width=64"],
}


@pytest.mark.parametrize("algo", list(COLUMNS))
def test_halfcheetah_smoke_with_spinning_ups_columns(tmp_path, algo):
    """One short epoch of every algorithm on HalfCheetah-v4 (100-step episodes so some end)."""
    run_dir = tmp_path / "run"
    df = train(
        run_dir,
        f"algo={algo}",
        "env=HalfCheetah-v4",
        "env.max_ep_len=100",
        "algo.epochs=2",
        "algo.steps_per_epoch=300",
        *SHORT[algo],
    )
    assert list(df.columns) == COLUMNS[algo]
    assert df["TotalEnvInteracts"].tolist() == [300, 600]
    assert df.drop(columns=["Epoch", "Time"]).notna().all(axis=None), df.iloc[-1].to_dict()
    fracs = df[THROUGHPUT[1:]]  # shares of each epoch's wall-clock time: disjoint phases
    assert (df["SPS"] > 0).all() and fracs.ge(0).all(axis=None) and fracs.sum(axis=1).le(1.0).all()
    assert (df["FracEnv"] > 0).all() and (df["FracAct"] > 0).all() and (df["FracUpdate"].iloc[-1] > 0)
    assert df["Epoch"].tolist() == ([0, 1] if algo in ("vpg", "trpo", "ppo") else [1, 2])  # as Spinning Up
    assert list_checkpoints(run_dir)


def test_off_policy_checkpoint_holds_everything_to_continue(tmp_path):
    run_dir = tmp_path / "run"
    train(
        run_dir,
        "algo=sac",
        "env=Pendulum-v1",
        "algo.epochs=3",
        "algo.steps_per_epoch=300",
        *OFF_SHORT,
        "algo.autotune_alpha=true",
    )
    ckpts = list_checkpoints(run_dir)
    assert sorted(ckpts) == [2, 3]  # keep_checkpoints=2 of the 3 saved (save_freq=1)
    state = torch.load(ckpts[3], weights_only=True)
    learner, loop = state["learner"], state["loop"]
    assert set(learner["modules"]) == {"pi", "q1", "q2", "q1_targ", "q2_targ"}
    assert set(learner["optimizers"]) == {"pi", "q", "alpha"}
    # bursts of 50 updates after env steps 100, 150, ..., 900 (once update_after=100 steps are stored)
    assert learner["extra"]["n_updates"] == 17 * 50 and "log_alpha" in learner["extra"]
    assert loop["epoch"] == 3 and loop["t"] == 900
    assert loop["replay"]["size"] == 900 and loop["replay"]["obs"].shape == (900, 3)
    assert "replay_rng" in loop and "torch_rng" in learner


# (algo, overrides, performance column, threshold). Random play: CartPole ~22, InvertedPendulum ~10,
# Pendulum about -1200 to -1700. Each takes well under a minute on 2 cores. VPG takes one policy step
# per epoch, so its small budget uses pi_lr=1e-2 (Spinning Up's simple-PG tutorial rate).
OFF = [
    "env=Pendulum-v1",
    "algo.steps_per_epoch=1000",
    "algo.start_steps=1000",
    "algo.update_after=500",
    "algo.num_test_episodes=4",
    "network.hidden_sizes=[64,64]",
    "network.activation=relu",
]
LEARNING = [
    # re-derived with the random streams of issue 13: final AverageEpRet 394, 448, 394 at seeds 0, 1, 2
    ("vpg", ["env=CartPole-v1", "algo.epochs=16", "algo.pi_lr=1e-2"], "AverageEpRet", 300),
    # re-derived (issue 13): final AverageEpRet 327, 457, 500 at seeds 0, 1, 2 (torch)
    ("trpo", ["env=CartPole-v1", "algo.epochs=20"], "AverageEpRet", 250),
    # re-derived (issue 13): final AverageEpRet 166, 726, 168 at seeds 0, 1, 2 (torch); random play ~10
    ("ppo", ["env=InvertedPendulum-v4", "algo.epochs=15"], "AverageEpRet", 100),
    ("trpo", ["env=InvertedPendulum-v4", "algo.epochs=20"], "AverageEpRet", 300),
    # re-derived (issue 13): final AverageEpRet 69, 174, 119, 216, 309 (torch) and 119, 82, 195, 146, 90
    # (tf) at seeds 0-4; the first epoch ~10
    ("vpg", ["env=InvertedPendulum-v4", "algo.epochs=20", "algo.pi_lr=1e-2"], "AverageEpRet", 50),
    # final AverageTestEpRet at seeds 0, 1, 2: torch -95, -185, -154; tf -93, -175, -150 (8 epochs left
    # tf seed 0 at -530, between swings of -130 and -664, after a dependency update)
    ("ddpg", [*OFF, "algo.epochs=10"], "AverageTestEpRet", -400),
    ("td3", [*OFF, "algo.epochs=8"], "AverageTestEpRet", -400),
    ("sac", [*OFF, "algo.epochs=5"], "AverageTestEpRet", -400),
]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize(
    "algo,overrides,column,threshold", LEARNING, ids=[f"{a}-{o[0].split('=')[1]}" for a, o, _, _ in LEARNING]
)
def test_learns_at_fixed_seed(tmp_path, algo, overrides, column, threshold, backend):
    df = train(tmp_path / "run", f"algo={algo}", f"backend={backend}", *overrides, timeout=300)
    assert df[column].iloc[-1] >= threshold, df[column].round(1).tolist()


# SAC's relatives take a gradient step per env step: here with minibatches of 128, on torch only, their
# TF update being the same numbers (tests/test_parity.py). Calibrated (torch; final AverageTestEpRet at
# seeds 0, 1, 2): TQC -186, -461, -247; CrossQ -184, -148, -211 (batch 256: TQC -153, -344, -213 and TF
# -152, -516, -212; CrossQ with 256-wide critics -152, -149, -210).
RELATIVES = [
    ("tqc", [*OFF, "algo.epochs=5", "algo.batch_size=128", "algo.lr=1e-3"]),  # lr: the zoo's for Pendulum
    ("crossq", [*OFF, "algo.epochs=5", "algo.batch_size=128", "algo.critic_width=128"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("algo,overrides", RELATIVES, ids=[a for a, _ in RELATIVES])
def test_sac_relatives_learn_at_fixed_seed(tmp_path, algo, overrides):
    df = train(tmp_path / "run", f"algo={algo}", *overrides, timeout=600)
    assert df["AverageTestEpRet"].iloc[-1] >= -400, df["AverageTestEpRet"].round(1).tolist()


# Two ranks: each algorithm runs under mpiexec and improves on its first epoch.
TWO_RANKS = [
    ("vpg", ["env=CartPole-v1", "algo.epochs=10", "algo.pi_lr=1e-2"], "AverageEpRet"),
    ("trpo", ["env=CartPole-v1", "algo.epochs=8"], "AverageEpRet"),
    ("ppo", ["env=CartPole-v1", "algo.epochs=8"], "AverageEpRet"),
    ("ddpg", [*OFF, "algo.epochs=6"], "AverageTestEpRet"),
    ("td3", [*OFF, "algo.epochs=10"], "AverageTestEpRet"),
    ("sac", [*OFF, "algo.epochs=5"], "AverageTestEpRet"),
    # CrossQ's ranks normalise their own halves of each batch and average the running statistics. First and
    # last AverageTestEpRet at seeds 0, 1, 2: -1352 -> -155, -1176 -> -118, -1457 -> -163 (4 epochs were too
    # few for seed 0 after a dependency update: -1352 -> -910)
    ("crossq", [*OFF, "algo.epochs=6", "algo.critic_width=128"], "AverageTestEpRet"),
]


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize("algo,overrides,column", TWO_RANKS, ids=[a for a, _, _ in TWO_RANKS])
def test_two_ranks_run_and_improve(tmp_path, algo, overrides, column):
    df = train(tmp_path / "run", f"algo={algo}", "comm.procs=2", *overrides, timeout=300)
    first, last = df[column].iloc[0], df[column].iloc[-1]
    gain = last - first
    assert gain > 0.5 * abs(first), (
        df[column].round(1).tolist()
    )  # e.g. CartPole 22 -> 33+, Pendulum -1400 -> -700
    assert df["TotalEnvInteracts"].iloc[-1] == len(df) * df["TotalEnvInteracts"].iloc[0]
