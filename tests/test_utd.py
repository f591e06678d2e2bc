"""The update-to-data ratio of the off-policy family (``algo.utd_ratio``): gradient steps per env step of
a rank, taken in bursts every ``update_every`` env steps (rlexp/algos/off_policy.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from rlexp.algos.off_policy import gradient_steps
from tests.conftest import composed, run_cli, train
from tests.test_resume import OFF_POLICY, assert_resumes_exactly, final_state


def schedule(update_every: int, utd: str, until: int, per_step: int = 1) -> list[int]:
    """The gradient steps the loop takes after each of its iterations (``per_step`` env steps each)."""
    ratio, taken = Fraction(utd), []
    for t in range(per_step, until + 1, per_step):
        before = t - per_step
        burst = t // update_every != before // update_every
        taken.append(
            gradient_steps(t, update_every, ratio) - gradient_steps(before, update_every, ratio)
            if burst
            else 0
        )
    return taken


def test_the_default_is_spinning_ups_bursts():
    """utd_ratio 1 with update_every 50: nothing for 49 steps, then a burst of 50 (Spinning Up's loop)."""
    assert schedule(50, "1", 150) == ([0] * 49 + [50]) * 3


def test_a_fractional_ratio_is_one_step_every_k_env_steps():
    assert schedule(1, "0.25", 12) == [0, 0, 0, 1] * 3
    # 0.3 is exactly 3/10: three steps in every ten env steps, never two or four from float rounding
    steps = schedule(1, "0.3", 1000)
    assert [sum(steps[i : i + 10]) for i in range(0, 1000, 10)] == [3] * 100
    assert sum(schedule(4, "0.5", 400)) == 200  # bursts of 2 every 4 env steps


def test_a_ratio_above_one_is_several_steps_per_env_step():
    assert schedule(1, "4", 5) == [4] * 5
    assert schedule(2, "1.5", 8) == [0, 3] * 4
    # 4 envs per rank: each iteration is 4 env steps, so 2 gradient steps at utd 0.5
    assert schedule(1, "0.5", 40, per_step=4) == [2] * 10


@pytest.mark.parametrize(
    "overrides,expected",
    [
        # bursts from t = 200 (update_after) to 600: floor(600 / 4) - floor(199 / 4) steps
        (("algo.update_every=1", "algo.utd_ratio=0.25"), 150 - 49),
        # the same with 4 envs per rank (t goes 4 at a time)
        (("algo.update_every=1", "algo.utd_ratio=0.25", "env.num_envs=4"), 150 - 49),
        # 3 gradient steps per env step, in bursts every 5 env steps: 3 x (600 - 195)
        (("algo.update_every=5", "algo.utd_ratio=3"), 3 * (600 - 195)),
    ],
    ids=["quarter", "quarter-4-envs", "three-per-step"],
)
def test_a_run_takes_the_gradient_steps_the_ratio_asks_for(tmp_path, overrides, expected):
    progress = train(tmp_path / "run", "algo=sac", *OFF_POLICY, "algo.epochs=2", *overrides)
    assert list(progress["TotalEnvInteracts"]) == [300, 600]
    assert int(final_state(tmp_path / "run")["learner"]["extra"]["n_updates"]) == expected


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_a_fractional_ratio_resumes_exactly_with_4_envs_and_2_ranks(tmp_path, backend):
    """N then M epochs equal N + M with utd_ratio 0.3 (a step at uneven intervals), 4 envs per rank and
    2 ranks: the schedule depends on the step counter alone, which the checkpoint holds."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        "algo=sac" if backend == "torch" else "algo=td3",
        f"backend={backend}",
        *OFF_POLICY,
        "algo.steps_per_epoch=320",  # 40 steps of each of 4 envs on each of 2 ranks
        "algo.update_every=1",
        "algo.utd_ratio=0.3",
        "env.num_envs=4",
        "comm.procs=2",
        "comm.oversubscribe=true",
        "algo.epochs=3",
        "algo.save_freq=1",
    )
    train(whole, *args)
    # each rank counts its own 4 envs: 480 steps in 3 epochs, bursts from 100 (update_after 200 / 2)
    n_updates = int(final_state(whole)["learner"]["extra"]["n_updates"])
    assert n_updates == 480 * 3 // 10 - 96 * 3 // 10  # the last iteration before 100 ends at t = 96
    assert_resumes_exactly(whole, part, 1)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_ratio_that_cannot_work_is_one_line(tmp_path, value):
    res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", "algo=td3", f"algo.utd_ratio={value}")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        f"rlexp: error: algo.utd_ratio={float(value)} is out of range; use a number > 0 (gradient steps per "
        "env step of a rank: 0.25 = one every 4 env steps, 4 = four per env step)"
    ]
    assert not (tmp_path / "run").exists()


def test_every_off_policy_algorithm_defaults_to_spinning_ups_ratio():
    for algo in ("ddpg", "td3", "sac"):
        cfg = composed(f"algo={algo}")
        assert (cfg.algo.update_every, cfg.algo.utd_ratio) == (50, 1.0)


def test_a_run_from_before_the_key_resumes_with_spinning_ups_bursts(tmp_path):
    """A config.yaml written before algo.utd_ratio existed loads with 1.0 (what it trained with)."""
    import yaml

    from rlexp.config import load_run_config

    (tmp_path / "old").mkdir()
    cfg = yaml.safe_load(run_cli("algo=td3", "--cfg", "job").stdout)
    del cfg["algo"]["utd_ratio"]
    (tmp_path / "old" / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert load_run_config(tmp_path / "old").algo.utd_ratio == 1.0
