"""Evaluation (issue 16): deterministic test episodes for every algorithm, the checkpoint of the best
score, ending a run at a return, and exact resume with all of it on (rlexp/algos/evaluation.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlexp.checkpoint import best_checkpoint_path, latest_checkpoint, list_checkpoints
from rlexp.display import epochs as count_epochs
from tests.conftest import composed, run_cli, train
from tests.test_algos import THROUGHPUT
from tests.test_resume import ON_POLICY, _snapshot, assert_same, assert_same_run
from tests.test_resume import read_checkpoint as read

TIMING = ["Time", *THROUGHPUT]
TEST_COLUMNS = ["AverageTestEpRet", "StdTestEpRet", "MaxTestEpRet", "MinTestEpRet", "TestEpLen"]
EVAL = ("algo.test_every=1", "algo.num_test_episodes=3")  # 3 deterministic CartPole episodes per epoch


def best_info(run_dir: Path) -> dict:
    return json.loads((run_dir / "checkpoints" / "best.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """PPO on CartPole, 3 epochs with a checkpoint after each: without evaluation (the default), and
    twice with 3 test episodes after every epoch."""
    base = tmp_path_factory.mktemp("evaluation")
    args = ("algo=ppo", *ON_POLICY, "algo.epochs=3", "algo.save_freq=1")
    train(base / "plain", *args)
    train(base / "eval", *args, *EVAL)
    train(base / "again", *args, *EVAL)
    return base


def test_on_policy_evaluation_adds_test_columns_and_changes_nothing_else(runs):
    plain = pd.read_table(runs / "plain" / "progress.txt")
    evaluated = pd.read_table(runs / "eval" / "progress.txt")
    # The default logs Spinning Up's on-policy columns only; evaluation adds the off-policy loop's
    # Test columns in the off-policy order (after EpRet's and after EpLen).
    assert not set(TEST_COLUMNS) & set(plain.columns)
    columns = list(plain.columns)
    columns[columns.index("EpLen") : columns.index("EpLen") + 1] = [*TEST_COLUMNS[:4], "EpLen", "TestEpLen"]
    assert list(evaluated.columns) == columns
    assert evaluated[TEST_COLUMNS].notna().all(axis=None)
    assert (evaluated["TestEpLen"] == evaluated["AverageTestEpRet"]).all()  # CartPole: 1 per step
    # Test episodes draw from their own env and stream, and the deterministic action samples nothing:
    # training, the learner and its generators are those of the run without evaluation.
    pd.testing.assert_frame_equal(
        plain.drop(columns=TIMING), evaluated.drop(columns=[*TIMING, *TEST_COLUMNS]), check_exact=True
    )
    a, b = read(latest_checkpoint(runs / "plain")[1]), read(latest_checkpoint(runs / "eval")[1])
    assert_same(a["learner"], b["learner"], "learner")
    assert_same(a["loop"]["episode"], b["loop"]["episode"], "episode")
    assert "test_env_rng" in b["loop"] and "test_env_rng" not in a["loop"]


def test_evaluation_is_deterministic(runs):
    a = pd.read_table(runs / "eval" / "progress.txt")
    b = pd.read_table(runs / "again" / "progress.txt")
    pd.testing.assert_frame_equal(a[TEST_COLUMNS], b[TEST_COLUMNS], check_exact=True)
    assert best_info(runs / "eval") == best_info(runs / "again")


def test_best_checkpoint_is_the_best_score_and_test_policy_loads_it(runs):
    run_dir = runs / "eval"
    progress = pd.read_table(run_dir / "progress.txt")
    scores = progress["AverageTestEpRet"]
    best = int(progress["Epoch"][scores.idxmax()]) + 1  # on-policy Epoch counts from 0
    info = best_info(run_dir)
    assert info == {
        "epoch": best,
        "score": pytest.approx(scores.max(), rel=1e-12),
        "actions": "deterministic",
        "episodes": 3,
    }
    # best.pt holds the policy of that epoch's checkpoint, with its epoch and score, read without pickle
    state = read(best_checkpoint_path(run_dir))
    assert state["loop"] == {"epoch": info["epoch"], "score": info["score"]} and state["algo"] == "ppo"
    assert_same(state["learner"], read(list_checkpoints(run_dir)[best])["learner"], "best learner")
    res = run_cli(str(run_dir), "--best", "-n", "2", "-nr", "-d", module="rlexp.test_policy")
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"Loaded the best evaluated policy, saved after {best} epoch" in res.stdout
    # A run without evaluation has no best checkpoint: one line says why.
    res = run_cli(str(runs / "plain"), "--best", "-n", "1", "-nr", module="rlexp.test_policy")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "has no best checkpoint" in res.stderr and "algo.test_every" in res.stderr


def test_test_policy_and_best_json_say_which_actions_gave_their_figures(runs):
    """test_policy samples by default (Spinning Up's default) while the evaluations that chose the best
    checkpoint are deterministic: best.json records its mode, and test_policy's closing line names the
    mode of its own mean and, when it sampled, the flag that gives the comparable figure."""
    run_dir = runs / "eval"
    info = best_info(run_dir)
    assert (info["actions"], info["episodes"]) == ("deterministic", 3)
    quoted = f"best.json's {info['score']:.6g} over 3 episodes"
    sampled = run_cli(str(run_dir), "--best", "-n", "2", "-nr", module="rlexp.test_policy")
    assert sampled.returncode == 0, sampled.stderr[-2000:]
    last = sampled.stdout.strip().splitlines()[-1]
    assert last.startswith("Mean return ") and " over 2 episodes with sampled actions; " in last, last
    assert last.endswith(
        f"the run's evaluations ({quoted}) act deterministically: add --deterministic to compare"
    )
    greedy = run_cli(str(run_dir), "--best", "-n", "2", "-nr", "-d", module="rlexp.test_policy")
    last = greedy.stdout.strip().splitlines()[-1]
    assert " over 2 episodes with deterministic actions, as the run's evaluations (" + quoted + ")" in last, (
        last
    )
    # the mean is the table's AverageEpRet
    table = {
        ln.split("|")[1].strip(): ln.split("|")[2].strip()
        for ln in greedy.stdout.splitlines()
        if ln.count("|") >= 3
    }
    assert float(last.split()[2]) == pytest.approx(float(table["AverageEpRet"]), rel=1e-4)


def test_a_resumed_run_replaces_the_best_checkpoint_only_with_a_better_one(tmp_path):
    """The best score is part of the resumable state: an evaluation that does not beat the score of
    the checkpoint a run continues from writes nothing."""
    from rlexp.algos.evaluation import Evaluation
    from rlexp.envs import make_env, rng_state
    from rlexp.logger import EpochLogger
    from rlexp.seeding import RankSeeds

    cfg = composed("algo=ppo", *EVAL)
    seeds = RankSeeds(cfg.seed)
    env = make_env(cfg.env, seeds["env"])
    learner = cfg.algo.learner_class("torch")(env.observation_space, env.action_space, cfg, seeds)
    rng = rng_state(make_env(cfg.env, seeds["test_env"]))
    for best_so_far, written in ((1e9, False), (-1e9, True)):
        run_dir = tmp_path / str(written)
        state = {"test_env_rng": rng, "best": {"epoch": 4, "score": best_so_far}}
        logger = EpochLogger(None, console=False)
        evaluation = Evaluation(cfg, run_dir, learner, logger, seeds, state)
        evaluation.test(5)
        logger.log_tabular("Epoch", 4)
        evaluation.log_returns()
        score = logger.current("AverageTestEpRet")
        logger.dump_tabular()
        assert math.isfinite(score) and evaluation.end_epoch(5) is None
        assert best_checkpoint_path(run_dir).exists() is written
        assert evaluation.best == ({"epoch": 5, "score": score} if written else state["best"])
        assert evaluation.state_dict()["best"] == evaluation.best


# (backend, overrides, score column, epochs it runs): the first epoch whose score is >= 0 ends the run.
STOPS = {
    "test score, torch": ("torch", ("algo.test_every=2", "algo.num_test_episodes=2"), "AverageTestEpRet", 2),
    "training score, tf": ("tf", ("algo.test_every=0",), "AverageEpRet", 1),
}


@pytest.mark.parametrize("case", list(STOPS))
def test_stop_at_return_ends_the_run_as_finished_and_nothing_continues_it(tmp_path, case):
    """With test_every=2 only the evaluation epochs have a score, so the run ends after epoch 2; without
    evaluation the training return decides. Then neither the same job nor resume= trains further."""
    backend, evaluation, column, epochs = STOPS[case]
    run_dir = tmp_path / "run"
    args = (
        "algo=ppo",
        f"backend={backend}",
        *ON_POLICY,
        *evaluation,
        "algo.epochs=6",
        "algo.stop_at_return=0",
    )
    res = run_cli(f"hydra.run.dir={run_dir}", *args)
    assert res.returncode == 0, res.stderr[-3000:]
    progress = pd.read_table(run_dir / "progress.txt")
    assert len(progress) == epochs and list(list_checkpoints(run_dir)) == [epochs]  # a checkpoint at the end
    reason = (
        f"{column} {progress[column].iloc[-1]:.6g} reached algo.stop_at_return=0 after {count_epochs(epochs)}"
    )
    assert f"Finished early: {reason}" in res.stdout and f"early:       {reason}" in res.stdout
    assert read(latest_checkpoint(run_dir)[1])["loop"]["finished"] == reason
    import rlexp

    run = rlexp.load(run_dir)  # the API calls it finished too (a resume loop on run.finished ends)
    assert run.finished and run.epochs_done == epochs < run.config.algo.epochs
    before = _snapshot(run_dir)
    for again in ((f"hydra.run.dir={run_dir}", *args), (f"resume={run_dir}", "algo.epochs=9")):
        res = run_cli(*again)
        assert res.returncode == 0, res.stderr[-3000:]
        assert f"{run_dir} has finished early ({reason}); nothing to do" in res.stdout
        assert _snapshot(run_dir) == before


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_n_epochs_then_m_more_with_evaluation_equals_n_plus_m(tmp_path, backend):
    """The test env's generator and the best score are resumed: rows, checkpoints and the best
    checkpoint are those of the uninterrupted run."""
    args = ("algo=ppo", f"backend={backend}", *ON_POLICY, *EVAL, "algo.stop_at_return=1e9")
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *args, "algo.epochs=4")
    train(part, *args, "algo.epochs=2")
    res = run_cli(f"resume={part}", "algo.epochs=4")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Continuing {part} after 2 epochs" in res.stdout
    assert_same_run(whole, part)
    assert best_info(whole) == best_info(part)
    suffix = ".npz" if backend == "tf" else ".pt"
    wb, pb = read(best_checkpoint_path(whole, suffix)), read(best_checkpoint_path(part, suffix))
    assert_same(wb, pb, "best")
    assert np.isfinite(pd.read_table(part / "progress.txt")["AverageTestEpRet"]).all()


@pytest.mark.mpi
def test_two_ranks_evaluate_resume_exactly_and_stop_together(tmp_path):
    """3 test episodes over 2 ranks (2 + 1), pooled; a resumed 2-rank run is exact; a stop decided on
    rank 0's pooled score ends both ranks (no rank waits in a collective)."""
    args = ("algo=ppo", *ON_POLICY, *EVAL, "comm.procs=2")
    whole, part, stopped = tmp_path / "whole", tmp_path / "part", tmp_path / "stopped"
    train(whole, *args, "algo.epochs=3")
    train(part, *args, "algo.epochs=2")
    res = run_cli(f"resume={part}", "algo.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_run(whole, part)
    assert best_info(whole) == best_info(part)
    res = run_cli(f"hydra.run.dir={stopped}", *args, "algo.epochs=5", "algo.stop_at_return=0", timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Finished early: AverageTestEpRet" in res.stdout
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == [
        "best.json",
        "best.pt",
        "epoch_000001.pt",
        "epoch_000001.rank1.pt",
    ]


def test_a_run_from_before_the_evaluation_keys_continues_as_it_trained(tmp_path):
    """config.yaml without test_every/stop_at_return (and, on-policy, num_test_episodes): the
    off-policy algorithms tested every epoch, the on-policy ones never."""
    import yaml

    from rlexp.config import load_run_config, to_container

    for algo, test_every in (("ppo", 0), ("sac", 1)):
        resolved = to_container(composed(f"algo={algo}", "env=Pendulum-v1"))
        for key in ("test_every", "stop_at_return", *(["num_test_episodes"] if algo == "ppo" else [])):
            del resolved["algo"][key]
        run_dir = tmp_path / algo
        run_dir.mkdir()
        (run_dir / "config.yaml").write_text(yaml.safe_dump(resolved))
        cfg = load_run_config(run_dir)
        assert (cfg.algo.test_every, cfg.algo.stop_at_return) == (test_every, None)
        assert cfg.algo.evaluates is (algo == "sac")
