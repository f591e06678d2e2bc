"""The learning benchmark survives being stopped (issue 27): SIGKILL of the whole benchmark mid-run,
then the same command again, gives the figures of a benchmark that never stopped."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlexp.rundir import claim, in_use
from tests.conftest import ROOT

BENCH = str(ROOT / "benchmarks" / "bench_learning.py")
TINY = (  # SAC on Pendulum, 6 epochs of 300 steps, a checkpoint after each
    "--algo", "sac", "--kinds", "defaults", "--envs", "Pendulum-v1", "--seeds", "0", "--steps", "1800",
    "--set", "algo.steps_per_epoch=300", "algo.start_steps=200", "algo.update_after=200", "algo.batch_size=32",
    "network.hidden_sizes=[32,32]", "algo.num_test_episodes=2", "algo.save_freq=1",
)  # fmt: skip
NAME = "sac-defaults_Pendulum-v1_s0"


def bench(tmp: Path, *changes: str, **kwargs) -> subprocess.Popen:
    """The tiny benchmark writing under ``tmp``; ``changes``: ``OPTION VALUE`` pairs that replace TINY's."""
    tiny = list(TINY)
    for option, value in zip(changes[::2], changes[1::2], strict=True):
        tiny[tiny.index(option) + 1] = value
    args = [sys.executable, BENCH, *tiny, "--out", str(tmp / "out"), "--results", str(tmp / "results")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(args, cwd=ROOT, env=env, text=True, **kwargs)


def bench_module():
    """benchmarks/bench_learning.py as a module."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_learning
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench_learning


def kill_mid_run(proc: subprocess.Popen, run_dir: Path) -> None:
    """SIGKILL the whole benchmark ``proc`` (started in its own session) once ``run_dir`` holds its third
    checkpoint: its process and the training process, mid-epoch."""
    checkpoint = run_dir / "checkpoints" / "epoch_000003.pt"
    deadline = time.time() + 240
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the benchmark ended before it could be killed"
    training = [pid for pid in pids_with(str(run_dir.parent)) if pid != proc.pid]
    assert training, "no training process found"
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in training:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    assert 3 <= len(pd.read_table(run_dir / "progress.txt")) < 6  # stopped part-way


def pids_with(text: str) -> list[int]:
    """The processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_benchmark_killed_mid_run_and_started_again_gives_the_uninterrupted_figures(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert bench(whole, stdout=subprocess.DEVNULL).wait(timeout=300) == 0

    kill_mid_run(bench(cut, stdout=subprocess.DEVNULL, start_new_session=True), cut / "out" / NAME)
    assert not (cut / "results" / f"{NAME}.json").exists()

    again = bench(cut, stdout=subprocess.PIPE)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"{NAME}: continuing" in out
    a = json.loads((whole / "results" / f"{NAME}.json").read_text())
    b = json.loads((cut / "results" / f"{NAME}.json").read_text())
    for key in ("test", "det10", "last100", "steps", "settings"):
        assert a[key] == b[key], key
    assert a["steps"] == 1800
    # the learning curve, an entry per epoch, the same but for the training seconds (which go on rising)
    for key in ("steps", "test", "train"):
        assert a["curve"][key] == b["curve"][key], key
    assert a["curve"]["steps"] == [300 * (i + 1) for i in range(6)]
    assert all(isinstance(v, float) for v in a["curve"]["test"])
    seconds = b["curve"]["seconds"]
    assert len(seconds) == 6 and all(t1 > t0 for t0, t1 in itertools.pairwise(seconds))
    # the logs too: the resumed run logged the epochs after its checkpoint once, as the whole run did
    assert (whole / "out" / NAME / "episodes.csv").read_text() == (
        cut / "out" / NAME / "episodes.csv"
    ).read_text()
    timing = ["Time", "SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm"]
    pa, pb = (pd.read_table(d / "out" / NAME / "progress.txt").drop(columns=timing) for d in (whole, cut))
    pd.testing.assert_frame_equal(pa, pb)
    # a third run reuses the finished result
    third = bench(cut, stdout=subprocess.PIPE)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0 and "training" not in out and "continuing" not in out


def test_a_result_from_before_a_key_was_added_is_reused_at_the_value_it_trained_with():
    """A result recorded before ``algo.utd_ratio`` existed trained with what the key's default keeps (a
    burst of update_every steps): it is reused; one whose settings differ from the preset's is not."""
    bench_learning = bench_module()

    settings = bench_learning.training_settings(["algo=sac", "env=Pendulum-v1", "seed=0"])
    old = {**settings, "algo": {k: v for k, v in settings["algo"].items() if k != "utd_ratio"}}
    bench_learning.check_reusable(Path("old.json"), old, settings)  # no SystemExit
    changed = {**settings, "algo": {**settings["algo"], "utd_ratio": 2.0}}
    try:
        bench_learning.check_reusable(Path("changed.json"), changed, settings)
    except SystemExit as exc:
        assert str(exc) == (
            "bench_learning: changed.json was trained with algo.utd_ratio=2.0, but the preset now gives 1.0; "
            "move it (and its run directory) away to train again, or use another --results"
        )
    else:
        raise AssertionError("a changed setting was reused")


def test_each_summary_line_holds_the_figure_that_follows_its_references_protocol(capsys):
    """SB3-zoo's number against det10 (its deterministic evaluation of the final policy), MinAtar's DQN
    curve against last100 (training episodes as played): the median over the seeds, and the ratio; a
    line per env against the first reference with a number, and MinAtar's DQN at rlexp's step size."""
    bench_learning = bench_module()

    def runs(test: float, det10: float, last100: float) -> list[dict]:
        return [
            {"test": test + d, "det10": det10 + d, "last100": last100 + d, "sps": 1.0} for d in (-1, 0, 5)
        ]

    namespace = argparse.Namespace(steps=None, seeds=[0, 1, 2])

    def summary(algo: str, kind: str, results: dict) -> list[str]:
        envs = [env for _, env in results]
        bench_learning.report(algo, [kind], envs, results, namespace)
        out = capsys.readouterr().out.splitlines()
        return [" ".join(line.split()) for line in out if line.startswith(f"{algo} ")]

    breakout, pong = ("tuned", "MinAtar/Breakout-v1"), ("tuned", "ALE/Pong-v5")
    assert summary("dqn", "tuned", {breakout: runs(15.0, 26.0, 8.0), pong: runs(0, -5, -8)}) == [
        "dqn tuned MinAtar/Breakout-v1 rlexp last100 8.0 MinAtar DQN 10.0 0.80x",
        # MinAtar's DQN also at rlexp's step size (its sensitivity plot), a line of its own
        "dqn tuned MinAtar/Breakout-v1 rlexp last100 8.0 MinAtar DQN lr 2^-12 8.9 0.90x",
        # Atari: human-normalised scores (Pong's random -20.7, human 14.6) and their ratio
        "dqn tuned ALE/Pong-v5 rlexp det10 -5.0 (HNS 0.44) SB3-zoo 20.6 (HNS 1.17) 0.38x",
    ]
    bench_learning.report("dqn", ["tuned"], [breakout[1]], {breakout: runs(15.0, 26.0, 8.0)}, namespace)
    table = [
        " ".join(line.split()) for line in capsys.readouterr().out.splitlines() if line.startswith("| M")
    ]
    # small returns keep a decimal (MinAtar's references too)
    assert table == [
        "| MinAtar/Breakout-v1 | tuned | 15.0 (14.0-20.0) | 26.0 (25.0-31.0) | 8.0 (7.0-13.0) | 1 (1-1) | - | - "
        "| 10.0 | 8.9 |"
    ]
    # CartPole has SB3-zoo's and CleanRL's numbers: a line against the first only
    assert summary("dqn", "tuned", {("tuned", "CartPole-v1"): runs(480, 500, 240)}) == [
        "dqn tuned CartPole-v1 rlexp det10 500.0 SB3-zoo 500.0 1.00x"
    ]
    assert summary("sac", "defaults", {("defaults", "Hopper-v4"): runs(3100, 2326, 0)}) == [
        "sac defaults Hopper-v4 rlexp det10 2,326.0 SB3-zoo 2,326.0 1.00x"
    ]
    # MinAtar: act6 (its DQN's exploration over 6 actions) in a line of its own, over the seeds that have it
    with_act6 = [{**r, "act6": 10.5 + d} for r, d in zip(runs(15.0, 26.0, 8.0), (-1, 0, 5), strict=True)]
    assert summary("dqn", "tuned", {breakout: with_act6}) == [
        "dqn tuned MinAtar/Breakout-v1 rlexp last100 8.0 MinAtar DQN 10.0 0.80x",
        "dqn tuned MinAtar/Breakout-v1 rlexp act6 10.5 MinAtar DQN 10.0 1.05x",
        "dqn tuned MinAtar/Breakout-v1 rlexp last100 8.0 MinAtar DQN lr 2^-12 8.9 0.90x",
        "dqn tuned MinAtar/Breakout-v1 rlexp act6 10.5 MinAtar DQN lr 2^-12 8.9 1.18x",
    ]
    with_act6[2].pop("act6")  # a result whose run directory is gone
    assert summary("dqn", "tuned", {breakout: with_act6})[1] == (
        "dqn tuned MinAtar/Breakout-v1 rlexp act6 10.0 (2 of 3 seeds) MinAtar DQN 10.0 1.00x"
    )


def test_with_sb3_a_last_line_holds_rlexp_against_sb3_measured_in_the_same_benchmark(capsys):
    """--sb3: one more line per rlexp kind and env, the medians of det10 (the figure both sides have)
    and their ratio; on Atari of the human-normalised scores; the seed counts where the sides differ."""
    bench_learning = bench_module()

    def runs(*det10: float) -> list[dict]:
        return [{"test": None, "det10": d, "last100": d - 1, "sps": 1.0} for d in det10]

    results = {
        ("tuned", "CartPole-v1"): runs(500, 480, 450),
        ("sb3", "CartPole-v1"): runs(200, 400, 300),
        ("tuned", "ALE/Pong-v5"): runs(-10.4, -2.4, 0.6),
        ("sb3", "ALE/Pong-v5"): runs(8.9, -21.0),
        ("tuned", "LunarLander-v3"): runs(250),  # no SB3 run of this env: no line against SB3
    }
    envs = ["CartPole-v1", "ALE/Pong-v5", "LunarLander-v3"]
    bench_learning.report("dqn", ["tuned", "sb3"], envs, results, argparse.Namespace(steps=None, seeds=[0]))
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    against_sb3 = [line for line in lines if line.startswith("dqn tuned") and " sb3 det10 " in line]
    assert against_sb3 == [
        "dqn tuned CartPole-v1 rlexp det10 480.0 sb3 det10 300.0 1.60x",
        # HNS (-2.4 + 20.7) / 35.3 = 0.518 against (-6.05 + 20.7) / 35.3 = 0.415
        "dqn tuned ALE/Pong-v5 rlexp det10 -2.4 (HNS 0.52, 3 seeds) sb3 det10 -6.0 (HNS 0.42, 2 seeds) 1.25x",
    ]
    assert "dqn sb3 ALE/Pong-v5 sb3 det10 -6.0 (HNS 0.42) SB3-zoo 20.6 (HNS 1.17) 0.35x" in lines


def test_stored_trains_nothing_and_reports_the_stored_results(tmp_path):
    """--stored: the runs with a stored result are reported, those without one are named and left out,
    and nothing is trained (no run directory, no SB3 child)."""
    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    sb3 = {"algo": "dqn", "kind": "sb3", "env": "CartPole-v1", "seed": 0, "test": None, "last100": 178.9}
    (results / "sb3-dqn-zoo_CartPole-v1_s0.json").write_text(json.dumps(sb3 | {"det10": 18.3, "sps": 1580.0}))
    args = ["--algo", "dqn", "--kinds", "tuned", "--envs", "CartPole-v1", "--seeds", "0", "1", "--sb3"]
    done = subprocess.run(
        [sys.executable, BENCH, *args, "--stored", "--out", str(out), "--results", str(results)],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = [" ".join(line.split()) for line in done.stdout.splitlines()]
    left_out = [line for line in lines if line.endswith("no stored result, left out (--stored)")]
    assert [line.split(":")[0] for line in left_out] == [
        "dqn-tuned_CartPole-v1_s0",
        "dqn-tuned_CartPole-v1_s1",
        "sb3-dqn-zoo_CartPole-v1_s1",
    ]
    assert (
        "| CartPole-v1 | sb3 | - | 18 (18-18) | 179 (179-179) | 1,580 (1,580-1,580) | 500 | 489 | - | - |"
        in lines
    )
    assert "| CartPole-v1 | tuned | - | - | - | - | 500 | 489 | - | - |" in lines
    assert list(out.iterdir()) == []  # nothing trained


@pytest.mark.parametrize(
    ("game", "expected"), [("Breakout", [0, 1, 0, 2, 0, 0]), ("SpaceInvaders", [0, 1, 0, 2, 0, 3])]
)
def test_each_of_minatars_six_actions_maps_to_the_v1_action_that_plays_the_same(game, expected):
    """act6's random actions: MinAtar's 6 (the -v0 ids) as -v1 actions. Stepping a -v1 game with the
    mapped actions gives exactly the observations and rewards of the -v0 game with the 6 actions."""
    from rlexp.envs import make_env
    from tests.conftest import composed

    bench_learning = bench_module()
    v0, v1 = (
        make_env(composed("algo=dqn", "env=minatar", f"env.id=MinAtar/{game}-v{v}").env) for v in (0, 1)
    )
    as_v1 = bench_learning.minatar_v1_actions(v1)
    assert as_v1 == expected
    actions = np.random.default_rng(3).integers(0, 6, 600)
    (o0, _), (o1, _) = v0.reset(seed=5), v1.reset(seed=5)
    rewards = 0.0
    for a in actions:
        o0, r0, t0, _, _ = v0.step(int(a))
        o1, r1, t1, _, _ = v1.step(as_v1[a])
        assert (r0, t0) == (r1, t1) and np.array_equal(o0, o1)
        rewards += r0
        if t0:
            (o0, _), (o1, _) = v0.reset(), v1.reset()
    assert rewards > 0  # the games were played, not only reset


def test_act6_with_no_exploration_is_the_greedy_evaluation(tmp_path):
    """minatar_acting's episodes are det10's when epsilon is 0 (same reset seeds, same policy), and
    exploring over the 6 actions changes them."""
    from tests.conftest import train

    bench_learning = bench_module()
    run = tmp_path / "run"
    train(
        run, "algo=dqn", "env=minatar", "env.id=MinAtar/Breakout-v1", "network=minatar_cnn",
        "algo.epochs=1", "algo.steps_per_epoch=300", "algo.start_steps=100", "algo.update_after=100",
        "algo.num_test_episodes=0",
    )  # fmt: skip
    greedy = bench_learning.minatar_acting(str(run), epsilon=0.0, episodes=bench_learning.EVAL_EPISODES)
    assert greedy == bench_learning.evaluate(str(run))
    assert bench_learning.minatar_acting(str(run), epsilon=1.0, episodes=10) != greedy

    # a result stored before act6 existed gets it from its run's final checkpoint, stored again
    stored = {"det10": greedy, "steps": 300, "settings": {"algo": {"steps_per_epoch": 300}}}
    result_file = tmp_path / "dqn-tuned_MinAtar-Breakout-v1_s0.json"
    result_file.write_text(json.dumps(stored))
    filled = bench_learning.with_act6(stored, "MinAtar/Breakout-v1", run, result_file)
    assert filled == {**stored, "act6": bench_learning.minatar_acting(str(run))}
    assert json.loads(result_file.read_text()) == filled
    # not where the run is gone or its checkpoint is not the result's, nor off MinAtar: stored as it was
    result_file.write_text(json.dumps(stored))
    for env_id, run_dir, steps in (
        ("MinAtar/Breakout-v1", tmp_path / "gone", 300),
        ("MinAtar/Breakout-v1", run, 600),
        ("CartPole-v1", run, 300),
    ):
        assert bench_learning.with_act6({**stored, "steps": steps}, env_id, run_dir, result_file) == {
            **stored,
            "steps": steps,
        }
    assert json.loads(result_file.read_text()) == stored


def test_an_sb3_run_stopped_part_way_continues_from_its_checkpoint_to_its_budget(tmp_path):
    """SB3's side (--sb3) continues too: SIGTERM to the benchmark mid-run saves SB3's checkpoint (model,
    replay, episodes so far), the same command continues from it and ends at the run's budget. Needs
    stable-baselines3, which the benchmark installs on first use (not in the test environment)."""
    pytest.importorskip("stable_baselines3")
    args = [sys.executable, BENCH, "--algo", "dqn", "--envs", "CartPole-v1", "--sb3", "--only-sb3"]
    args += ["--steps", "20000", "--seeds", "0", "--out", str(tmp_path / "out"), "--results", str(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    name = "sb3-dqn-zoo_CartPole-v1_s0"
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    log, deadline = tmp_path / "out" / f"{name}.log", time.time() + 120
    while not (log.is_file() and "training 20000 steps" in log.read_text()) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # training (CartPole: ~1,000 steps/s)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "stopped; run the same command again to continue" in out, out
    stopped = int(out.split("(stopped after ")[1].split(" of")[0])
    assert 0 < stopped < 20000
    assert (tmp_path / "out" / name / "checkpoint" / "replay.pkl").is_file()
    assert not (tmp_path / f"{name}.json").exists()

    again = subprocess.run(args, cwd=ROOT, env=env, text=True, capture_output=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{name}: continuing" in again.stdout
    assert f"continuing after {stopped} of 20000 steps" in log.read_text()
    result = json.loads((tmp_path / f"{name}.json").read_text())
    assert 20000 <= result["steps"] < 20000 + 256  # the zoo's CartPole collects 256 steps a round
    assert not (tmp_path / "out" / name / "checkpoint").exists()  # a finished run drops its replay
    assert result["train_s"] < 1000 and 0 <= result["det10"] <= 500 and result["last100"] > 9


def test_kinds_that_train_the_same_settings_share_one_run(tmp_path, monkeypatch, capsys):
    """SAC's tuned preset on Hopper-v4 is Spinning Up's settings (issue 27's choice), which the defaults
    kind trains too: the benchmark trains them once and reports that run under both kinds; the zoo kind
    trains SB3-zoo's entry. A result stored under one kind is reused for the other without training."""
    bench_learning = bench_module()

    calls = []

    def fake_run(algo, kind, env_id, seed, args, variant, overrides, settings):
        calls.append((kind, overrides, settings))
        return {"test": 3.0 + len(calls), "det10": 2.0, "last100": 1.0, "sps": 9.0}

    monkeypatch.setattr(bench_learning, "run_rlexp", fake_run)
    monkeypatch.setattr(bench_learning._CHILDREN, "install", lambda: None)
    results = tmp_path / "results"
    argv = ["bench_learning.py", "--algo", "sac", "--envs", "Hopper-v4", "--seeds", "0"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(tmp_path / "out"), "--results", str(results)])
    bench_learning.main()
    assert [kind for kind, _, _ in calls] == ["tuned", "zoo"]  # defaults: the tuned run
    assert "tuned_preset=sac/_zoo_mujoco" in calls[1][1] and calls[1][2]["algo"]["batch_size"] == 256
    assert calls[0][2]["algo"]["batch_size"] == 100
    out = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert (
        "sac-defaults Hopper-v4 seed 0: test 4.0 det10 2.0 last100 1.0 9 SPS (the run of sac-tuned_Hopper-v4_s0)"
        in out
    )
    assert "| Hopper-v4 | zoo | 5 (5-5) | 2 (2-2) | 1 (1-1) | 9 (9-9) | 2,326 | 2,310 | 3,150 |" in out

    # on disk: a stored defaults result is the tuned kind's too; the zoo kind's settings differ
    defaults, tuned = (calls[0][2], bench_learning.training_settings(calls[0][1]))
    assert defaults == tuned
    results.mkdir()
    stored = {"kind": "defaults", "test": 7.0, "det10": 6.0, "last100": 5.0, "sps": 4.0, "settings": defaults}
    (results / "sac-defaults_Hopper-v4_s0.json").write_text(json.dumps(stored))
    monkeypatch.undo()
    args = argparse.Namespace(out=tmp_path / "out", results=results)
    r = bench_learning.run_rlexp("sac", "tuned", "Hopper-v4", 0, args, [], calls[0][1], tuned)
    assert (r["kind"], r["det10"], r["same_run_as"]) == ("tuned", 6.0, "sac-defaults_Hopper-v4_s0")
    assert list((tmp_path / "out").iterdir()) == []  # nothing trained
    assert bench_learning.same_run(results, "sac", "Hopper-v4", 0, calls[1][2]) is None


def test_a_variant_trains_only_the_algorithms_whose_config_has_its_keys(tmp_path, monkeypatch, capsys):
    """``--algo sac crossq --variant w256 algo.critic_width=256 --only-variant``: the 300k table's command.
    CrossQ trains the variant alone; SAC, which has no critic_width, trains its own tuned kind."""
    bench_learning = bench_module()
    assert bench_learning.takes_variant("crossq", ["algo.critic_width=256", "network=mlp64x64_relu"])
    assert not bench_learning.takes_variant("sac", ["algo.critic_width=256"])
    assert bench_learning.takes_variant("sac", ["+algo.lr=1e-3"])

    calls = []

    def fake_run(algo, kind, env_id, seed, args, variant, overrides, settings):
        calls.append((algo, kind, variant, settings))
        return {"test": 3.0, "det10": 2.0 if algo == "sac" else 4.0, "last100": 1.0, "sps": 9.0}

    monkeypatch.setattr(bench_learning, "run_rlexp", fake_run)
    monkeypatch.setattr(bench_learning._CHILDREN, "install", lambda: None)
    argv = "bench_learning.py --algo sac crossq --envs HalfCheetah-v4 --seeds 0 --steps 300000 --variant w256"
    argv += " algo.critic_width=256 --only-variant"
    monkeypatch.setattr(
        sys, "argv", [*argv.split(), "--out", str(tmp_path / "out"), "--results", str(tmp_path / "r")]
    )
    bench_learning.main()
    assert [(algo, kind, variant) for algo, kind, variant, _ in calls] == [
        ("sac", "tuned", []),
        ("crossq", "tuned-w256", ["algo.critic_width=256"]),
    ]
    assert calls[1][3]["algo"]["critic_width"] == 256
    out = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert "bench_learning: sac lacks a key that --variant sets: sac trains tuned" in out
    assert "crossq tuned-w256 HalfCheetah-v4 rlexp det10 4.0 rlexp sac det10 2.0 2.00x" in out


def test_a_kind_continues_the_unfinished_run_of_another_kind_with_the_same_settings(tmp_path):
    """SAC's tuned preset on Hopper-v4 is Spinning Up's settings: a `--kinds tuned` benchmark after a
    `--kinds defaults` one was killed part-way continues the defaults run (stored under its name, reported
    as tuned) instead of training the same settings a second time."""
    hopper = ("--envs", "Hopper-v4")
    defaults, tuned = "sac-defaults_Hopper-v4_s0", "sac-tuned_Hopper-v4_s0"
    killed = bench(tmp_path, *hopper, stdout=subprocess.DEVNULL, start_new_session=True)
    kill_mid_run(killed, tmp_path / "out" / defaults)
    deadline = time.time() + 30  # the killed training process lets go of the directory
    while in_use(tmp_path / "out" / defaults) and time.time() < deadline:
        time.sleep(0.2)
    with claim(tmp_path / "out" / defaults):  # as if another command trained it now: one line, nothing run
        for kind, shared in (("tuned", f" ({tuned} would continue it)"), ("defaults", "")):
            busy = bench(tmp_path, *hopper, "--kinds", kind, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            out, _ = busy.communicate(timeout=300)
            assert busy.returncode != 0 and out.strip().splitlines()[-1] == (
                f"bench_learning: {defaults} is training in another command now{shared}; "
                "run this again when that one ends"
            ), out
            assert "Traceback" not in out and not (tmp_path / "out" / tuned).exists()

    again = bench(tmp_path, *hopper, "--kinds", "tuned", stdout=subprocess.PIPE)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"{tuned}: continuing the run of {defaults} (the same settings)" in out
    assert not (tmp_path / "out" / tuned).exists() and not (tmp_path / "results" / f"{tuned}.json").exists()
    stored = json.loads((tmp_path / "results" / f"{defaults}.json").read_text())
    assert (stored["kind"], stored["steps"], stored.get("same_run_as")) == ("defaults", 1800, None)
    line = next(line for line in out.splitlines() if line.strip().startswith("sac-tuned "))
    assert f"det10 {stored['det10']:8.1f}" in line and f"(the run of {defaults})" in line
    # the defaults kind now reuses the finished result without training
    third = bench(tmp_path, *hopper, stdout=subprocess.PIPE)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0 and "training" not in out and "continuing" not in out, out


def test_plot_curves_draws_stored_curves_against_hours_and_steps_and_keeps_an_existing_figure(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    for name, seeds in (("sac-tuned", (0, 1)), ("crossq-tuned", (0,))):
        for seed in seeds:
            curve = {
                "steps": [1000, 2000, 3000],
                "seconds": [10.0 + seed, 20.0, 30.0],
                "test": [1.0, None, 3.0 + seed],
                "train": [0.5, 1.5, 2.5],
            }
            (results / f"{name}_Pendulum-v1_s{seed}.json").write_text(
                json.dumps({"seed": seed, "curve": curve})
            )
    (results / "td3-tuned_Pendulum-v1_s0.json").write_text(json.dumps({"seed": 0}))  # stored before curves
    script = [sys.executable, str(ROOT / "benchmarks" / "plot_curves.py"), "--env", "Pendulum-v1"]
    for x in ("hours", "steps"):
        out = tmp_path / f"{x}.png"
        args = [
            *script,
            "--runs",
            "sac-tuned",
            "crossq-tuned",
            "td3-tuned",
            "--x",
            x,
            "--results",
            str(results),
        ]
        done = subprocess.run([*args, "--output", str(out)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "td3-tuned_Pendulum-v1_s0.json has no curve" in done.stdout
        again = subprocess.run([*args, "--output", str(out)], capture_output=True, text=True)
        assert again.returncode == 1 and again.stderr.strip().endswith("exists; pass --force to replace it")
    nothing = subprocess.run(
        [*script, "--runs", "ppo-tuned", "--results", str(results)], capture_output=True, text=True
    )
    assert nothing.returncode == 1 and "nothing to draw for Pendulum-v1" in nothing.stderr
