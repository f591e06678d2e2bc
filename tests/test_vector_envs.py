"""Vector envs per rank (issue 19, part 3): env.num_envs envs stepped together, sync or async, with
gymnasium's next-step autoreset replaced by a reset right after the step that ended an episode, every
env step counted, normalisation folding every env's observation, and exact resume (2 ranks too)."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.envs import make_env, make_vector_env
from rlexp.seeding import STREAMS, RankSeeds
from tests.conftest import composed, run_cli, train
from tests.test_pipeline import MODERN_PPO, NORMALIZE
from tests.test_resume import OFF_POLICY, TIMING, assert_resumes_exactly, final_state

CARTPOLE = ("algo=ppo", "env=CartPole-v1", "algo.steps_per_epoch=400", "algo.train_pi_iters=5")


def test_env_seeds_of_copy_zero_are_the_single_env_seeds_and_the_others_are_new():
    seeds = RankSeeds(7, rank=1)
    assert seeds.indexed("env", 0) == seeds["env"]  # one env draws what it always did
    drawn = {seeds.indexed(s, i) for s in ("env", "action_space") for i in range(4)}
    others = {RankSeeds(7, r)[s] for r in range(3) for s in STREAMS}
    assert len(drawn) == 8 and drawn.isdisjoint(others - {seeds["env"], seeds["action_space"]})


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_vector_envs_step_like_single_envs_and_reset_right_after_an_end(vector):
    """Every env of the vector env sees exactly the actions, observations and rewards of a single env
    with the same seed; an env that ended is reset before the next step (no step of the next-step
    autoreset, whose action is ignored); a replayed state continues identically."""
    cfg = composed("env=CartPole-v1", "env.num_envs=3", f"env.vector={vector}").env
    seeds, rng = [11, 12, 13], np.random.default_rng(0)
    vec = make_vector_env(cfg, [0, 1, 2], allow_env_import=True)
    singles = [make_env(cfg) for _ in seeds]
    obs = vec.reset(seeds)
    expected = np.stack([env.reset(seed=s)[0] for env, s in zip(singles, seeds, strict=True)])
    returns, episodes, saved = np.zeros(3), 0, None
    try:
        for t in range(400):
            np.testing.assert_array_equal(obs, expected)
            if t == 250:
                saved = vec.state_dict(obs), rng.bit_generator.state, obs
            actions = rng.integers(0, 2, 3)
            obs, rew, terminated, truncated = vec.step(actions)
            ended = terminated | truncated
            assert vec.any_ended == ended.any()
            running = vec.episodes()
            for i, env in enumerate(singles):
                o, r, term, trunc, _ = env.step(int(actions[i]))
                returns[i] += r
                assert (rew[i], terminated[i], truncated[i]) == (r, term, trunc)
                np.testing.assert_array_equal(obs[i], o)  # an ended env's row is its final observation
                assert running[i] == (returns[i], returns[i])  # (return, length); CartPole: 1 per step
                if term or trunc:
                    o, returns[i], episodes = env.reset()[0], 0.0, episodes + 1
                expected[i] = o
            obs = vec.reset_ended(ended, obs)
        assert episodes > 20
        # a fresh vector env loaded from step 250's state goes on exactly as the first one did
        state, rng_state, obs_250 = saved
        again = make_vector_env(cfg, [5, 6, 7], allow_env_import=True)
        rng.bit_generator.state = rng_state
        obs_a = again.load_state_dict(state)
        np.testing.assert_array_equal(obs_a, obs_250)
        first = make_vector_env(cfg, [0, 1, 2], allow_env_import=True)
        obs_b = first.load_state_dict(state)
        for _ in range(100):
            actions = rng.integers(0, 2, 3)
            step_a, step_b = again.step(actions), first.step(actions)
            for x, y in zip(step_a, step_b, strict=True):
                np.testing.assert_array_equal(x, y)
            assert again.episodes() == first.episodes()
            ended = step_a[2] | step_a[3]
            obs_a, obs_b = again.reset_ended(ended, step_a[0]), first.reset_ended(ended, step_b[0])
            np.testing.assert_array_equal(obs_a, obs_b)
        again.close(), first.close()
    finally:
        vec.close()


def test_every_env_step_counts_and_sync_equals_async(tmp_path):
    """4 envs x 100 steps make a 400-step epoch; the logged returns are whole CartPole episodes (reward
    1 per step, so no phantom autoreset step); normalisation folds every env's observations; async
    envs give the same numbers as sync ones."""
    args = (*CARTPOLE, "algo.epochs=2", "env.num_envs=4", "env.normalize_obs=true")
    sync = train(tmp_path / "sync", *args)
    asyn = train(tmp_path / "async", *args, "env.vector=async")
    assert list(sync["TotalEnvInteracts"]) == [400, 800]
    np.testing.assert_array_equal(sync["AverageEpRet"], sync["EpLen"])
    assert (sync["MaxEpRet"] < 101).all()  # an env steps 100 times per epoch; episodes go on across epochs
    stats = final_state(tmp_path / "sync")["learner"]["extra"]["normalizer"]["obs"]
    assert stats["count"] == pytest.approx(1e-4 + 4 * (1 + 2 * 100))  # each env's first + every step
    drop = [c for c in TIMING if c in sync]
    assert sync.drop(columns=drop).equals(asyn.drop(columns=drop))


def test_envs_differ_from_each_other_and_their_seeds_are_recorded(tmp_path):
    """Each env has its own seed, listed in provenance.json: 4 envs are not 4 copies of one."""
    import json

    progress = train(tmp_path / "run", *CARTPOLE, "algo.epochs=1", "env.num_envs=4")
    assert progress["StdEpRet"][0] > 0
    rank0 = json.loads((tmp_path / "run" / "provenance.json").read_text())["seeds"][0]
    seeds = RankSeeds(0, 0)
    assert rank0["envs"] == [
        {"env": seeds.indexed("env", i), "action_space": seeds.indexed("action_space", i)} for i in range(4)
    ]


RESUME_CASES = {
    "ppo-async": ("algo=ppo", "env=Pendulum-v1", "algo.steps_per_epoch=300", *MODERN_PPO, *NORMALIZE,
                  "env.num_envs=3", "env.vector=async"),
    "sac": ("algo=sac", *OFF_POLICY, *NORMALIZE, "env.num_envs=2"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(RESUME_CASES))
def test_resume_with_vector_envs_is_exact(tmp_path, case):
    """Each env's episode in progress is replayed in its own env (its own process with async)."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *RESUME_CASES[case], "algo.epochs=4", "algo.save_freq=1")
    assert_resumes_exactly(whole, part, 2)
    episodes = final_state(whole)["loop"]["episode"]["episodes"]
    assert len(episodes) == (3 if case == "ppo-async" else 2)


@pytest.mark.mpi
def test_two_ranks_of_two_envs_resume_exactly(tmp_path):
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        *RESUME_CASES["ppo-async"][:-2],
        "env.num_envs=2",
        "comm.procs=2",
        "algo.epochs=3",
        "algo.save_freq=1",
    )
    progress = train(whole, *args)
    assert list(progress["TotalEnvInteracts"]) == [300, 600, 900]
    assert_resumes_exactly(whole, part, 1)
    stats = final_state(whole)["learner"]["extra"]["normalizer"]
    assert stats["obs"]["count"] == pytest.approx(1e-4 + 2 * 2 * (1 + 75 * 3))  # 2 ranks x 2 envs


def test_off_policy_takes_one_gradient_step_per_env_step_whatever_num_envs(tmp_path):
    """update_every counts a rank's env steps over all its envs: 3 envs make the same number of
    gradient steps as one env in as many env steps."""
    args = (*OFF_POLICY, "algo=sac", "algo.epochs=2", "algo.update_every=7")
    train(tmp_path / "one", *args)
    train(tmp_path / "three", *args, "env.num_envs=3")
    updates = [int(final_state(tmp_path / d)["learner"]["extra"]["n_updates"]) for d in ("one", "three")]
    assert updates == [7 * (600 // 7 - 199 // 7)] * 2  # bursts at the multiples of 7 from 200 to 600


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("env.num_envs=0", "env.num_envs=0 is out of range; use an integer >= 1"),
        ("env.vector=threads", "env.vector='threads' is unknown; choose one of: sync, async"),
        ("env.num_envs=500", "algo.steps_per_epoch=400 is smaller than comm.procs x env.num_envs=500"),
    ],
)
def test_bad_vector_settings_are_one_line(tmp_path, override, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", *CARTPOLE, override)
    assert res.returncode != 0
    assert fragment in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


def test_image_observations_stack_per_env(tmp_path):
    """uint8 image observations of 2 async envs are stored per env, in their shape (a CNN run)."""
    from tests.test_images import PIXELS

    progress = train(
        tmp_path / "run", "algo=ppo", *PIXELS, "network=nature_cnn", "algo.epochs=2", "algo.steps_per_epoch=64",
        "algo.train_pi_iters=2", "algo.train_v_iters=2", "env.num_envs=2", "env.vector=async",
    )  # fmt: skip
    assert list(progress["TotalEnvInteracts"]) == [64, 128]
    obs = final_state(tmp_path / "run")["loop"]["episode"]["obs"]
    assert obs.shape == (2, 36, 36, 3) and obs.dtype == np.uint8
