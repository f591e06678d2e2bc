"""DQN and its extensions (issue 28): each option changes the update the way its paper says (small
hand-computed cases), torch/TF parity per option, the replay's n-step returns, priorities and frames
stored once, the schedules of env steps, and whole runs (learning, exact resume, Atari, MinAtar)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.buffers import FrameObs, ReplayBuffer, SumTree
from rlexp.errors import RLExpError
from rlexp.seeding import RankSeeds
from tests.conftest import composed, run_cli, train
from tests.test_parity import ATOL, RTOL, assert_same_params, assert_same_stats
from tests.test_resume import assert_resumes_exactly, final_state

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
ACTIONS = spaces.Discrete(4)


def learner(backend: str, *overrides: str, obs_space: spaces.Space = OBS, act_space: spaces.Space = ACTIONS):
    cfg = composed("algo=dqn", f"backend={backend}", *overrides)
    return ALGOS["dqn"].learner_class(backend)(obs_space, act_space, cfg, RankSeeds(0))


def pair(*overrides: str):
    """(torch learner, tf learner), the tf weights copied from torch."""
    t = learner("torch", "network.hidden_sizes=[32,32]", *overrides)
    f = learner("tf", "network.hidden_sizes=[32,32]", *overrides)
    f.set_weights({k: [p.detach().numpy() for p in m.parameters()] for k, m in t.modules().items()})
    return t, f


def batch_of(n: int = 64, seed: int = 4, weights: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    out = {
        "obs": rng.uniform(-1, 1, (n, 5)).astype(f32),
        "obs2": rng.uniform(-1, 1, (n, 5)).astype(f32),
        "act": rng.integers(0, 4, n),
        "rew": rng.normal(size=n).astype(f32),
        "done": (rng.uniform(size=n) < 0.3).astype(f32),
        "discount": (0.99 ** rng.integers(1, 4, n)).astype(f32),  # n-step transitions of 1 to 3 rewards
    }
    if weights:
        out["weights"] = rng.uniform(0.2, 1.0, n).astype(f32)
    return out


# --- what each option does to the update -------------------------------------------------------------
def linear_q(backend: str, bias: list[float], targ_bias: list[float], *overrides: str):
    """A DQN learner on 1-d observations whose Q ignores them: Q(s, .) = ``bias``, Q_targ(s, .) = ``targ_bias``."""
    lrn = learner(
        backend, "network.hidden_sizes=[]", *overrides, obs_space=spaces.Box(-1, 1, (1,), np.float32),
        act_space=spaces.Discrete(3),
    )  # fmt: skip
    weights = {
        "q": [np.zeros((3, 1), np.float32), np.array(bias, np.float32)],
        "q_targ": [np.zeros((3, 1), np.float32), np.array(targ_bias, np.float32)],
    }
    if backend == "tf":
        lrn.set_weights(weights)
    else:
        for name, values in weights.items():
            for p, v in zip(lrn.modules()[name].parameters(), values, strict=True):
                with torch.no_grad():
                    p.copy_(torch.as_tensor(v))
        lrn.refresh()
    return lrn


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_double_q_lets_the_online_network_choose_and_the_target_network_evaluate(backend):
    """Q(s', .) = [1, 5, 3], Q_targ(s', .) = [4, 2, 6]: DQN bootstraps with max Q_targ = 6; double DQN
    with Q_targ at argmax Q = action 1, i.e. 2. y = r + discount (1 - done) q'."""
    batch = {
        "obs": np.zeros((2, 1), np.float32), "obs2": np.zeros((2, 1), np.float32), "act": np.array([0, 1]),
        "rew": np.array([1.0, 1.0], np.float32), "done": np.array([0.0, 1.0], np.float32),
        "discount": np.array([0.5, 0.5], np.float32),
    }  # fmt: skip
    for double, q2 in ((False, 6.0), (True, 2.0)):
        lrn = linear_q(backend, [1, 5, 3], [4, 2, 6], f"algo.double_q={str(double).lower()}")
        y = np.asarray(lrn.targets(lrn.tensors(batch)))
        np.testing.assert_allclose(y, [1 + 0.5 * q2, 1.0])  # the terminal one does not bootstrap


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_huber_and_squared_errors_and_importance_weights(backend):
    """Q(s, .) = [0, 0, 0], targets 0.5 and 3 (done, r = y): Huber errors 0.125 and 2.5, squared 0.25
    and 9; prioritized replay weighs them (here 1 and 0.5) and sets priorities |TD| + per_eps."""
    batch = {
        "obs": np.zeros((2, 1), np.float32), "obs2": np.zeros((2, 1), np.float32), "act": np.array([0, 2]),
        "rew": np.array([0.5, 3.0], np.float32), "done": np.array([1.0, 1.0], np.float32),
        "discount": np.array([0.99, 0.99], np.float32),
    }  # fmt: skip
    for loss, errors in (("huber", [0.125, 2.5]), ("mse", [0.25, 9.0])):
        lrn = linear_q(backend, [0, 0, 0], [0, 0, 0], f"algo.loss={loss}")
        assert lrn.update(dict(batch))["LossQ"] == pytest.approx(np.mean(errors))
        lrn = linear_q(backend, [0, 0, 0], [0, 0, 0], f"algo.loss={loss}", "algo.per_eps=0.01")
        stats = lrn.update({**batch, "weights": np.array([1.0, 0.5], np.float32)})
        assert stats["LossQ"] == pytest.approx((errors[0] + 0.5 * errors[1]) / 2)
        np.testing.assert_allclose(stats["Priority"], [0.51, 3.01], rtol=1e-6)


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_dueling_heads_are_value_plus_centred_advantages(backend):
    lrn = learner(backend, "algo.dueling=true", "network.hidden_sizes=[8,6]")
    obs = np.random.default_rng(0).uniform(-1, 1, (3, 5)).astype(np.float32)
    q = lrn.q
    if backend == "torch":
        with torch.no_grad():
            t = torch.as_tensor(obs)
            h = q.trunk(t)
            v, a, out = q.v_net(h).numpy(), q.a_net(h).numpy(), q(t).numpy()
        widths = [m.out_features for m in q.v_net if isinstance(m, torch.nn.Linear)]
    else:
        h = q.trunk(obs)
        v, a, out = q.v_net(h).numpy(), q.a_net(h).numpy(), q(obs).numpy()
        widths = [layer.weight.shape[0] for layer in q.v_net.layers]
    assert widths == [6, 1]  # the last hidden layer (6) is each stream's own; the trunk has 8
    np.testing.assert_allclose(out, v + a - a.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lrn.q_values(obs[0]), out[0], rtol=1e-5, atol=1e-6)  # numpy acting


# --- parity ------------------------------------------------------------------------------------------
OPTIONS = {
    "dqn": [],
    "double": ["algo.double_q=true"],
    "dueling": ["algo.dueling=true"],
    "mse": ["algo.loss=mse"],
    "rmsprop": ["algo.optimizer=rmsprop", "algo.optim_eps=0.01", "algo.lr=2.5e-4"],
    "clipped": ["algo.max_grad_norm=0.01"],  # every step clipped
    "polyak": ["algo.polyak=0.9"],
    "c51": ["algo=c51", "algo.v_min=-3", "algo.v_max=3", "algo.num_atoms=11"],
    "c51-double-dueling": [
        "algo=c51",
        "algo.double_q=true",
        "algo.dueling=true",
        "algo.v_max=3",
        "algo.v_min=-3",
    ],
    "qrdqn": ["algo=qrdqn", "algo.num_quantiles=13"],
    "qrdqn-double-dueling-per": [
        "algo=qrdqn",
        "algo.double_q=true",
        "algo.dueling=true",
        "algo.prioritized=true",
    ],
    "noisy": ["algo.noisy=true"],
    "noisy-double-dueling": ["algo.noisy=true", "algo.double_q=true", "algo.dueling=true"],
    "anneal_lr": ["algo.anneal_lr=true", "algo.epochs=1", "algo.steps_per_epoch=40000"],
    "rainbow": ["algo=rainbow"],
}


@pytest.mark.parametrize("option", list(OPTIONS))
def test_update_parity_per_option(option):
    """Identical weights and batches (and a noisy network's identical pre-drawn noise, for acting and
    for each gradient step's online and target networks) give the same Q-values, statistics and
    parameters on both backends, through target updates (and an annealed learning rate)."""
    t, f = pair(*OPTIONS[option])
    weights = t.algo.prioritized
    obs = np.random.default_rng(5).uniform(-1, 1, 5).astype(np.float32)
    rng = np.random.default_rng(6)
    for step in range(3):
        batch = batch_of(seed=step, weights=weights)
        np.testing.assert_allclose(f.q_values(obs), t.q_values(obs), rtol=RTOL, atol=ATOL)
        if t.algo.noisy:
            draws = rng.standard_normal(t.q.noise_size)
            np.testing.assert_allclose(f.q_values(obs, draws), t.q_values(obs, draws), rtol=RTOL, atol=ATOL)
            for key in ("noise", "noise_targ"):
                batch[key] = rng.standard_normal(t.q.noise_size).astype(np.float32)
        st, sf = t.update(dict(batch)), f.update(dict(batch))
        assert_same_stats(st, sf)
        assert_same_params(t, f)
        t.advance(10_000 * (step + 1))  # a target update each time
        f.advance(10_000 * (step + 1))
        assert_same_params(t, f)


# --- schedules of env steps --------------------------------------------------------------------------
def test_epsilon_falls_linearly_and_the_target_follows_every_target_update_every_steps():
    settings = ("algo.exploration_steps=1000", "algo.eps_end=0.1", "algo.target_update_every=300")
    lrn = learner("torch", *settings)
    cfg = lrn.algo
    assert [cfg.epsilon(s) for s in (0, 500, 1000, 5000)] == [1.0, pytest.approx(0.55), 0.1, 0.1]

    def distance() -> float:
        return float((lrn.q_flat - lrn.q_targ_flat).abs().max())

    lrn.advance(0)
    lrn.update(batch_of())  # Q moves away from its target
    assert distance() > 0
    lrn.advance(299)
    assert distance() > 0 and lrn.epsilon == pytest.approx(1 - 0.9 * 0.299)
    lrn.advance(300)  # passes 300: the target becomes Q (polyak 0)
    assert distance() == 0
    fresh = learner("torch", *settings)
    fresh.load_state_dict(lrn.state_dict())  # a resumed run: the count comes back, no extra update
    assert fresh.steps == 300 and fresh.epsilon == lrn.epsilon


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_a_target_copy_is_skipped_when_no_gradient_step_was_taken_since_the_last(backend, monkeypatch):
    """The zoo's CartPole preset copies every 10 env steps and learns every 256: 25 of 26 copies would
    copy what the target holds already. They are skipped; a soft (polyak) update never is, and the
    first crossing after a load copies (the loaded target is not known to be the online network)."""
    lrn = learner(backend, "algo.target_update_every=10")
    copies = []
    real = lrn.update_target
    monkeypatch.setattr(lrn, "update_target", lambda: copies.append(lrn.n_updates) or real())
    lrn.advance(0)
    lrn.advance(10)  # no gradient step yet: the target started as a copy
    lrn.update(batch_of())
    lrn.advance(20)
    lrn.advance(30)
    lrn.update(batch_of())
    lrn.advance(40)
    assert copies == [1, 2]
    state = lrn.state_dict()
    resumed = learner(backend, "algo.target_update_every=10")
    resumed.load_state_dict(state)
    calls = []
    monkeypatch.setattr(resumed, "update_target", lambda: calls.append(1))
    resumed.advance(50)
    resumed.advance(60)  # a copy made: none again until a gradient step
    assert calls == [1]
    soft = learner(backend, "algo.target_update_every=10", "algo.polyak=0.9")
    calls = []
    monkeypatch.setattr(soft, "update_target", lambda: calls.append(1))
    for steps in (0, 10, 20):
        soft.advance(steps)
    assert calls == [1, 1]


def test_beta_reaches_1_at_the_end_of_the_run_or_after_per_beta_steps():
    """By default beta is annealed over the whole run (epochs x steps_per_epoch env steps), so a short
    tuned budget ends at 1 as the PER paper's; per_beta_steps sets another span."""
    run = learner("torch", "algo.prioritized=true", "algo.epochs=5", "algo.steps_per_epoch=200").algo
    assert run.per_beta_steps is None and run.per_beta0 == 0.4
    assert [run.beta(s) for s in (0, 500, 1000, 2000)] == [0.4, pytest.approx(0.7), 1.0, 1.0]
    fixed = learner("torch", "algo.prioritized=true", "algo.epochs=5", "algo.per_beta_steps=100").algo
    assert [fixed.beta(s) for s in (0, 50, 100)] == [0.4, pytest.approx(0.7), 1.0]
    assert learner("torch").algo.beta(0) is None  # uniform replay: no weights


def test_exploration_is_epsilon_greedy_from_the_acting_generator():
    lrn = learner("torch", "algo.exploration_steps=0", "algo.eps_end=0.25")
    lrn.advance(0)
    obs = np.zeros(5, np.float32)
    greedy = int(lrn.act(obs))
    actions = [int(lrn.explore(obs)) for _ in range(4000)]
    random_share = np.mean([a != greedy for a in actions])
    assert random_share == pytest.approx(0.25 * 3 / 4, abs=0.03)  # random picks that differ from greedy


# --- the replay: n-step, priorities, frames ----------------------------------------------------------
def steps_into(replay: ReplayBuffer, rewards, ends=(), truncations=(), env_obs=None) -> None:
    """One env's steps: observation t is [t], reward t is rewards[t]; ``ends``/``truncations``: steps
    after which the episode terminated / was truncated."""
    for t, r in enumerate(rewards):
        replay.add(
            np.array([[t]], np.float32), np.array([t % 2]), np.array([r], np.float32),
            np.array([[t + 1]], np.float32), np.array([t in ends]), np.array([t in truncations]),
        )  # fmt: skip


def transitions(replay: ReplayBuffer) -> list[tuple]:
    n = replay.size
    return [
        (float(replay.obs[i, 0]), float(replay.rew[i]), float(replay.obs2[i, 0]), bool(replay.done[i]),
         float(replay.discount[i]))
        for i in range(n)
    ]  # fmt: skip


def test_n_step_returns_are_cut_by_a_termination_and_bootstrap_after_a_truncation():
    replay = ReplayBuffer(1, (), 100, act_dtype=np.int64, n_step=3, gamma=0.5, discounts=True)
    # steps 0-3 then termination after step 3; steps 4-5 then truncation after step 5
    steps_into(replay, [1, 2, 4, 8, 16, 32], ends=(3,), truncations=(5,))
    assert transitions(replay) == [
        (0.0, 1 + 0.5 * 2 + 0.25 * 4, 3.0, False, 0.125),  # a full window of 3: bootstraps from s3
        (1.0, 2 + 0.5 * 4 + 0.25 * 8, 4.0, True, 0.125),  # ends at the termination: no bootstrap
        (2.0, 4 + 0.5 * 8, 4.0, True, 0.25),
        (3.0, 8.0, 4.0, True, 0.5),
        (4.0, 16 + 0.5 * 32, 6.0, False, 0.25),  # truncated after 2 rewards: bootstraps with gamma^2
        (5.0, 32.0, 6.0, False, 0.5),
    ]
    one = ReplayBuffer(1, (), 100, act_dtype=np.int64, gamma=0.5, discounts=True)
    steps_into(one, [1, 2], ends=(1,))
    assert transitions(one) == [(0.0, 1.0, 1.0, False, 0.5), (1.0, 2.0, 2.0, True, 0.5)]


def test_n_step_queues_resume_exactly():
    whole = ReplayBuffer(1, (), 100, act_dtype=np.int64, n_step=3, gamma=0.9, discounts=True)
    steps_into(whole, [1, 2, 3, 4, 5, 6, 7], ends=(6,))
    part = ReplayBuffer(1, (), 100, act_dtype=np.int64, n_step=3, gamma=0.9, discounts=True)
    for t, r in enumerate([1, 2, 3, 4, 5, 6, 7]):
        if t == 4:  # a checkpoint with two steps waiting in the queue
            state = part.state_dict()
            assert list(state["queue_len"]) == [2]
            part = ReplayBuffer(1, (), 100, act_dtype=np.int64, n_step=3, gamma=0.9, discounts=True)
            part.load_state_dict(state)
        part.add(np.array([[t]], np.float32), np.array([0]), np.array([r], np.float32),
                 np.array([[t + 1]], np.float32), np.array([t == 6]), np.array([False]))  # fmt: skip
    assert transitions(part) == transitions(whole)


def test_prioritized_sampling_and_importance_weights():
    """Priorities 1, 2, 3, 4 with alpha 1: P = 0.1, 0.2, 0.3, 0.4; with beta 1 the weights (N P)^-1
    over their largest, (N P_min)^-1, are 1, 1/2, 1/3, 1/4. Stratified draws follow P closely."""
    replay = ReplayBuffer(1, (), 8, act_dtype=np.int64, alpha=1.0)
    steps_into(replay, [0, 0, 0, 0])
    replay.update_priorities(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    rng = np.random.default_rng(0)
    batch = replay.sample_batch(100, rng, beta=1.0)
    np.testing.assert_allclose(batch["weights"], 0.1 / (np.array([1, 2, 3, 4])[batch["indices"]] / 10))
    counts = np.bincount(
        np.concatenate([replay.sample_batch(100, rng, beta=0.5)["indices"] for _ in range(50)]), minlength=4
    )
    np.testing.assert_allclose(counts / counts.sum(), [0.1, 0.2, 0.3, 0.4], atol=0.01)
    half = replay.sample_batch(4, rng, beta=0.5)  # beta 0.5: the square roots
    probs = np.array([0.1, 0.2, 0.3, 0.4])[half["indices"]]
    np.testing.assert_allclose(half["weights"], np.sqrt(0.1 / probs), rtol=1e-6)
    # alpha 0.5: priorities enter as their square roots; new transitions take the largest so far
    soft = ReplayBuffer(1, (), 8, act_dtype=np.int64, alpha=0.5)
    steps_into(soft, [0, 0])
    soft.update_priorities(np.array([0, 1]), np.array([4.0, 9.0]))
    steps_into(soft, [0])
    np.testing.assert_allclose(soft.tree.leaves()[:3], [2.0, 3.0, 3.0])


def test_importance_weights_over_the_minibatch():
    """per_weights=batch: the weights (N P)^-beta over the largest of the minibatch (Dopamine's), not over
    the largest of the buffer. Priorities 1, 2, 3, 4 (alpha 1), beta 1: a minibatch of the transitions
    with priorities 2 and 4 weighs them 1 and 1/2 (over the buffer: 1/2 and 1/4); one tiny priority in
    the buffer leaves them as they are (over the buffer it shrinks them 1000-fold)."""
    rng = np.random.default_rng(0)
    for priorities in ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0, 1e-3]):
        replay = ReplayBuffer(1, (), 8, act_dtype=np.int64, alpha=1.0, weights_over="batch")
        steps_into(replay, [0] * len(priorities))
        replay.update_priorities(np.arange(len(priorities)), np.array(priorities))
        for _ in range(20):
            batch = replay.sample_batch(2, rng, beta=1.0)
            p = np.array(priorities)[batch["indices"]]
            np.testing.assert_allclose(batch["weights"], p.min() / p, rtol=1e-6)
            assert batch["weights"].max() == 1.0
    replay.weights_over = "buffer"  # the same buffer, the weights over its largest: the tiny priority's
    batch = replay.sample_batch(2, rng, beta=1.0)
    np.testing.assert_allclose(batch["weights"], 1e-3 / np.array(priorities)[batch["indices"]], rtol=1e-6)
    assert composed("algo=dqn").algo.per_weights == "buffer"  # the default: OpenAI baselines'


def test_the_sum_tree_is_a_function_of_its_leaves():
    """Sets of one slot (each stored transition: its own path) and of several (sampled priorities), zeros
    (slots never to be drawn) among them, leave the tree that its leaves alone rebuild."""
    tree = SumTree(5)
    rng = np.random.default_rng(1)
    for i in range(50):
        tree.set(rng.integers(0, 5, 3), rng.uniform(0, 2, 3))
        tree.set(rng.integers(0, 5, 1), rng.uniform(0, 2, 1) * (i % 4 > 0))
    rebuilt = SumTree(5)
    rebuilt.load(tree.leaves().copy())
    np.testing.assert_array_equal(rebuilt.sums, tree.sums)
    np.testing.assert_array_equal(rebuilt.mins, tree.mins)
    assert tree.total == pytest.approx(tree.leaves().sum())
    masses = np.cumsum(tree.leaves()) - 1e-9
    np.testing.assert_array_equal(tree.find(masses), np.arange(5))


def stacked_episode(length: int, start: int, k: int = 4) -> list[np.ndarray]:
    """Observations of a frame-stacked episode: frame t is filled with t; the first stack repeats frame 0."""
    frames = [np.full((3, 3), start + t, np.uint8) for t in range(length + 1)]
    return [np.stack([frames[max(0, t - k + 1 + i)] for i in range(k)]) for t in range(length + 1)]


def test_frame_stacks_are_stored_a_frame_at_a_time_and_read_back_exactly():
    plain = ReplayBuffer((4, 3, 3), (), 100, np.uint8, act_dtype=np.int64)
    frames = ReplayBuffer((4, 3, 3), (), 100, np.uint8, act_dtype=np.int64, frames=True)
    episodes = [stacked_episode(10, 0), stacked_episode(7, 100)]  # the second ends by termination
    for obs in episodes:
        for t in range(len(obs) - 1):
            args = (obs[t][None], np.array([0]), np.array([1.0]), obs[t + 1][None])
            for replay in (plain, frames):
                replay.add(*args, np.array([t == len(obs) - 2]), np.array([False]))
    store = frames.store_obs
    assert isinstance(store, FrameObs)
    assert store.written == (4 + 10) + (4 + 7)  # each episode: its first stack, then one frame a step
    idx = np.arange(17)
    for a, b in zip(plain.store_obs.get(idx), store.get(idx), strict=True):
        np.testing.assert_array_equal(a, b)
    back = ReplayBuffer((4, 3, 3), (), 100, np.uint8, act_dtype=np.int64, frames=True)
    back.load_state_dict(frames.state_dict())
    for a, b in zip(back.store_obs.get(idx), store.get(idx), strict=True):
        np.testing.assert_array_equal(a, b)
    assert back.store_obs.written == store.written


def test_transitions_whose_frames_are_overwritten_are_never_sampled():
    """A replay of 8 transitions holds 8 + 2 + 16 frames; one-step episodes write 5 frames each, so the
    oldest transitions lose their frames before they leave the buffer, and sampling skips them."""
    replay = ReplayBuffer((4, 3, 3), (), 8, np.uint8, act_dtype=np.int64, frames=True)
    for e in range(8):
        obs = stacked_episode(1, 10 * e)
        replay.add(
            obs[0][None], np.array([0]), np.array([1.0]), obs[1][None], np.array([True]), np.array([False])
        )
    valid = replay.store_obs.valid(np.arange(8))
    assert not valid.all() and valid[7]
    batch = replay.sample_batch(64, np.random.default_rng(0))
    kept = {int(o[0, 0, 0]) // 10 for o in batch["obs"]}
    assert kept <= {e for e in range(8) if valid[e]}
    for o, o2 in zip(batch["obs"], batch["obs2"], strict=True):  # each the episode's own frames
        assert o[-1, 0, 0] + 1 == o2[-1, 0, 0]


def test_the_memory_check_counts_frames_once(tmp_path):
    res = run_cli(
        f"hydra.run.dir={tmp_path / 'r'}", "algo=dqn", "env=atari", "network=nature_cnn",
        "algo.replay_size=100000000",
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert (
        line.startswith("rlexp: error: algo.replay_size=100000000 needs ")
        and "use a smaller algo.replay_size" in line
    )
    per = int(line.split("(")[1].split(" bytes")[0])
    assert 84 * 84 < per < 2 * 84 * 84  # about 1.25 frames of 84 x 84, not 2 stacks of 4 (56,448 bytes)
    assert not (tmp_path / "r").exists()


# --- whole runs ------------------------------------------------------------------------------------
CARTPOLE = (
    "env=CartPole-v1", "algo.steps_per_epoch=500", "algo.start_steps=200", "algo.update_after=200",
    "algo.batch_size=32", "algo.num_test_episodes=2", "algo.target_update_every=100",
    "algo.exploration_steps=1000", "algo.keep_checkpoints=null", "network.hidden_sizes=[32,32]",
)  # fmt: skip


def test_epsilon_is_its_value_at_each_epochs_end_also_before_the_first_update(tmp_path):
    """Epsilon is logged once per epoch, as it stands after the epoch's last step (acting goes on with
    it), not as a mean over gradient steps: an epoch without any (before update_after) has it too."""
    args = (*CARTPOLE, "algo.steps_per_epoch=250", "algo.start_steps=500", "algo.update_after=500")
    progress = train(tmp_path / "run", "algo=dqn", *args, "algo.epochs=2", "algo.num_test_episodes=1")
    algo = composed("algo=dqn", *args).algo
    assert progress["Epsilon"].tolist() == pytest.approx([algo.epsilon(250), algo.epsilon(500)])
    assert progress["Epsilon"].tolist() == pytest.approx([0.7625, 0.525])  # 1 - 0.95 t / 1000
    assert np.isnan(progress["LossQ"].iloc[0])  # no gradient step in the first epoch


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_prioritized_n_step_runs_resume_exactly_with_2_ranks(tmp_path, backend):
    """N then M epochs equal N + M with prioritized replay, 3-step returns, double and dueling (the
    rainbow preset), 2 envs per rank and 2 ranks: replay with priorities, n-step queues, epsilon and
    beta (functions of the step count), every generator."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        *CARTPOLE, "algo=rainbow", f"backend={backend}", "env.num_envs=2", "comm.procs=2",
        "comm.oversubscribe=true", "algo.epochs=3", "algo.save_freq=1", "algo.per_beta_steps=1500",
    )  # fmt: skip
    progress = train(whole, *args)
    assert list(progress["TotalEnvInteracts"]) == [500, 1000, 1500]
    replay = final_state(whole)["loop"]["replay"]
    assert "priorities" in replay and len(replay["queue_len"]) == 2
    assert_resumes_exactly(whole, part, 1)


def test_a_box_action_space_is_refused_naming_the_algorithms_that_take_it(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "algo=dqn", "env=Pendulum-v1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "rlexp: error: dqn cannot handle the action space Box(-2.0, 2.0, (1,), float32) of Pendulum-v1; "
        "supported: Discrete (for this space: crossq, ddpg, ppo, sac, td3, tqc, trpo, vpg); or an env with "
        "Discrete actions, e.g. env=CartPole-v1"
    ]
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("algo.optimizer=sgd", "algo.optimizer='sgd' is unknown; choose one of: adam, rmsprop"),
        ("algo.loss=l1", "algo.loss='l1' is unknown; choose one of: huber, mse"),
        ("algo.n_step=0", "algo.n_step=0 is out of range"),
        ("algo.eps_end=1.5", "algo.eps_end=1.5 is out of range; use 0 <= eps_end <= 1"),
        ("algo.per_alpha=-1", "algo.per_alpha=-1.0 is out of range"),
        ("algo.target_update_every=0", "algo.target_update_every=0 is out of range"),
        ("algo.per_beta_steps=-1", "algo.per_beta_steps=-1 is out of range; use >= 0"),
        ("algo.per_weights=max", "algo.per_weights='max' is unknown; choose one of: buffer, batch"),
    ],
)
def test_bad_dqn_settings_are_one_line(tmp_path, override, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "algo=dqn", override)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr, res.stderr


SHORT = (
    "env=CartPole-v1", "algo.steps_per_epoch=200", "algo.start_steps=100", "algo.update_after=100",
    "algo.num_test_episodes=1", "network.hidden_sizes=[16]", "logger.console=quiet",
)  # fmt: skip


def test_a_run_whose_beta_spans_its_epochs_is_not_extended(tmp_path):
    """Issue 71: with per_beta_steps null (every rainbow run) beta rises to 1 over the run's own
    epochs, so resume= with other epochs is refused in one line and changes nothing (it continued and
    differed from an uninterrupted run: beta fell back from 1.0 to 0.7); a fixed per_beta_steps, or
    uniform replay, extends as every run does."""
    run_dir = tmp_path / "run"
    train(run_dir, "algo=rainbow", *SHORT, "algo.epochs=2")
    before = {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    res = run_cli(f"resume={run_dir}", "algo.epochs=4")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"rlexp: error: resume={run_dir} algo.epochs=4: that run's schedule spans its own algo.epochs=2 "
        "(algo.per_beta_steps=null), so its epochs so far differ from those of a run of 4; continue it "
        "with its 2 epochs, or start a new run"
    ]
    assert {p.name: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    for name, extra in (("fixed", ("algo=rainbow", "algo.per_beta_steps=400")), ("uniform", ("algo=dqn",))):
        train(tmp_path / name, *extra, *SHORT, "algo.epochs=1")
        res = run_cli(f"resume={tmp_path / name}", "algo.epochs=2")
        assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_n_step_updates_wait_until_the_replay_holds_a_transition(tmp_path, backend):
    """Issue 71: n-step returns hold back n_step - 1 steps of each env, so a burst at update_after=0
    sampled an empty replay (ValueError: high <= 0; with priorities ZeroDivisionError). The first
    burst now waits for the steps held back, a function of t alone: 3-step returns, 2 envs, one
    gradient step per env step from t = 0 take their first steps at t = 6 (the replay holds 2 of the
    6 steps), 196 in 200 steps; the Rainbow preset tuned for LunarLander with update_every=1 runs."""
    run = tmp_path / "nstep"
    train(run, "algo=dqn", f"backend={backend}", *SHORT, "algo.epochs=1", "algo.n_step=3",
          "algo.update_after=0", "algo.start_steps=0", "algo.update_every=1", "algo.utd_ratio=1",
          "env.num_envs=2")  # fmt: skip
    assert final_state(run)["learner"]["extra"]["n_updates"] == 196
    train(tmp_path / "rainbow", "algo=rainbow", "tuned=dqn", "env=LunarLander-v3", f"backend={backend}",
          "algo.update_every=1", "algo.epochs=1", "algo.steps_per_epoch=100", "algo.num_test_episodes=1",
          "network.hidden_sizes=[16]", "logger.console=quiet")  # fmt: skip


def test_the_replay_tells_how_many_steps_its_n_step_queues_hold_back():
    """The guarantee the loop's first burst rests on: after k steps of each env the replay holds at least
    num_envs * (k - n_step + 1) transitions, however the episodes end."""
    rng = np.random.default_rng(0)
    for n_step, envs in ((1, 1), (3, 1), (3, 2), (5, 3)):
        buf = ReplayBuffer(2, 1, 1000, num_envs=envs, n_step=n_step, gamma=0.9)
        assert buf.held_back == envs * (n_step - 1)
        for k in range(1, 30):
            ended = rng.random(envs) < 0.2
            buf.add(
                np.zeros((envs, 2)), np.zeros((envs, 1)), np.ones(envs), np.zeros((envs, 2)), ended, ended
            )
            assert buf.size >= envs * k - buf.held_back
        fresh = ReplayBuffer(2, 1, 1000, num_envs=envs, n_step=n_step, gamma=0.9)
        for _ in range(n_step - 1):  # no episode ends: every step is held back
            no = np.zeros(envs, bool)
            fresh.add(np.zeros((envs, 2)), np.zeros((envs, 1)), np.ones(envs), np.zeros((envs, 2)), no, no)
        assert fresh.size == 0 and envs * (n_step - 1) == fresh.held_back


def test_every_schedule_over_the_run_is_declared():
    """The run-length schedules are declared (AlgoConfig.RUN_SCHEDULES): PPO's annealing and DQN's beta
    name the keys that make them span the run, and only when they do."""
    assert composed("algo=rainbow").algo.epochs_schedule() == "algo.per_beta_steps=null"
    assert composed("algo=rainbow", "algo.per_beta_steps=1000").algo.epochs_schedule() is None
    assert composed("algo=dqn").algo.epochs_schedule() is None  # uniform replay: no beta
    assert composed("algo=ppo", "algo.anneal_lr=true").algo.epochs_schedule() == "algo.anneal_lr=true"
    both = composed("algo=ppo", "algo.anneal_lr=true", "algo.anneal_clip=true").algo.epochs_schedule()
    assert both == "algo.anneal_lr=true, algo.anneal_clip=true"


def test_a_dqn_run_is_tested_loaded_and_played(tmp_path):
    run_dir = tmp_path / "run"
    progress = train(run_dir, "algo=dqn", *CARTPOLE, "algo.epochs=3", "logger.tensorboard=true")
    assert {"AverageQVals", "LossQ", "Epsilon", "AverageTestEpRet"} <= set(progress.columns)
    # epsilon at each epoch's end: 1 - 0.95 x 500/1000, then 0.05 from 1000 steps on
    assert progress["Epsilon"].tolist() == pytest.approx([0.525, 0.05, 0.05])
    res = run_cli(str(run_dir), "-n", "2", module="rlexp.test_policy")
    assert res.returncode == 0 and "EpRet" in res.stdout, res.stderr[-2000:]
    res = run_cli(str(run_dir), "-n", "1", "--best", module="rlexp.test_policy")
    assert res.returncode == 0, res.stderr[-2000:]
    import rlexp

    policy = rlexp.load(run_dir).policy()
    obs, _ = policy.env.reset(seed=1)
    assert policy(obs) in (0, 1)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_dqn_learns_cartpole(tmp_path, backend):
    """SB3-zoo's CartPole settings (lr 2.3e-3, batch 64, bursts of 128 steps every 256, target every 10
    steps, epsilon to 0.04 over 8,000 steps, 256x256) reach a greedy test return of 200+ within 30,000
    steps at seed 0 (random play: about 22)."""
    progress = train(
        tmp_path / "run", "algo=dqn", "+tuned=dqn", "env=CartPole-v1", f"backend={backend}",
        "algo.epochs=30", "algo.num_test_episodes=5", timeout=600,
    )  # fmt: skip
    assert progress["AverageTestEpRet"].iloc[-5:].max() >= 200, progress["AverageTestEpRet"].round(0).tolist()


# --- Atari and MinAtar -----------------------------------------------------------------------------
def test_the_atari_preset_on_a_real_rom(tmp_path):
    """Breakout: 4 x 84 x 84 uint8 stacks, a lost life ends the agent's episode but the logged return
    and length are the whole game's, rewards are learned as their sign, FIRE after each reset."""
    from rlexp.envs import CONTINUES, make_vector_env

    cfg = composed("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5", "network=nature_cnn")
    envs = make_vector_env(cfg.env, [0], True)
    obs = envs.reset([3])
    assert obs.shape == (1, 4, 84, 84) and obs.dtype == np.uint8
    assert envs.observation_space.shape == (4, 84, 84)
    rng = np.random.default_rng(0)
    lives_lost, games, steps, score = 0, [], 0, 0.0
    while not games and steps < 20_000:
        obs2, r, terminated, truncated = envs.step(rng.integers(0, 4, 1))
        steps, score = steps + 1, score + float(r[0])
        if terminated[0] or truncated[0]:
            done = envs.episodes()[0]
            if done is None:
                lives_lost += 1
            else:
                games.append(done)
            obs2 = envs.reset_ended(terminated | truncated, obs2)
    assert lives_lost == 4 and len(games) == 1  # Breakout: 5 lives, one game
    assert games[0] == (score, steps)  # the whole game's score (rewards of 1, 4 or 7 per brick)
    envs.close()
    # a whole run: episodes.csv holds games, the learner sees sign(r)
    run_dir = tmp_path / "run"
    train(
        run_dir, "algo=dqn", "env=atari", "env.id=ALE/Breakout-v5", "network=nature_cnn", "algo.epochs=1",
        "algo.steps_per_epoch=400", "algo.start_steps=400", "algo.update_after=400", "algo.replay_size=1000",
        "algo.num_test_episodes=1", "logger.episodes=true", timeout=600,
    )  # fmt: skip
    rewards = final_state(run_dir)["loop"]["replay"]["rew"]
    assert set(np.unique(rewards)) <= {0.0, 1.0}
    games = pd.read_csv(run_dir / "episodes.csv")
    assert len(games) >= 2 and games["EpLen"].mean() > 60  # whole games (~120 steps), not lives (~25)
    assert json.loads((run_dir / "checkpoints" / "best.json").read_text())["score"] >= 0
    assert CONTINUES == "episode_continues"


def test_an_atari_game_continued_after_lost_lives_replays_exactly():
    """Exact resume of a game in progress: the recorded game (its reset, the actions and the resets that
    continued it after lost lives) replays to the same observation and score."""
    from rlexp.envs import make_vector_env

    cfg = composed("algo=dqn", "env=atari", "env.id=ALE/Breakout-v5", "network=nature_cnn")
    envs = make_vector_env(cfg.env, [0], True)
    obs = envs.reset([5])
    rng = np.random.default_rng(1)
    lost = 0
    while lost < 2:
        obs, _, terminated, truncated = envs.step(rng.integers(0, 4, 1))
        if terminated[0] or truncated[0]:
            assert envs.episodes()[0] is None
            lost += 1
            obs = envs.reset_ended(terminated | truncated, obs)
    for _ in range(5):
        obs, *_ = envs.step(rng.integers(0, 4, 1))
    state = envs.state_dict(obs)
    assert len(state["episodes"][0]["soft_resets"]) == 2
    again = make_vector_env(cfg.env, [0], True)
    np.testing.assert_array_equal(again.load_state_dict(state), obs)
    assert again.episodes() == envs.episodes()
    envs.close()
    again.close()


def test_every_minatar_episode_replays_exactly_not_only_the_first():
    """A MinAtar game repeats its last action at random (a sticky action, p=0.1), and its reset keeps
    that action from the episode before: a later episode's recording holds it (``carried``), so it
    replays to the same observation and goes on the same. Without it some of these episodes do not."""
    from rlexp.envs import make_vector_env

    cfg = composed("algo=dqn", "env=minatar", "env.id=MinAtar/Breakout-v1", "network=minatar_cnn")
    envs = make_vector_env(cfg.env, [0], True)
    obs = envs.reset([0])
    rng = np.random.default_rng(0)
    replayed = without_carried = 0
    while replayed < 60:
        obs, _, terminated, truncated = envs.step(rng.integers(0, 3, 1))
        ended = terminated | truncated
        if ended[0]:
            obs = envs.reset_ended(ended, obs)
            continue
        state = envs.state_dict(obs)
        if "seed" in state["episodes"][0]["start"]:  # the first episode: a fresh game, seeded
            continue
        again = make_vector_env(cfg.env, [0], True)
        np.testing.assert_array_equal(again.load_state_dict(state), obs)
        for a in rng.integers(0, 3, (5, 1)):  # the same actions go on the same (the game's state too)
            o1, r1, t1, _ = envs.step(a)
            o2, r2, t2, _ = again.step(a)
            np.testing.assert_array_equal(o1, o2)
            assert (r1, t1) == (r2, t2)
            obs = envs.reset_ended(t1, o1)
            again.reset_ended(t2, o2)
        again.close()
        replayed += 1
        start = state["episodes"][0]["start"]  # the recorder's own dict: changed in a copy
        state["episodes"][0]["start"] = {k: v for k, v in start.items() if k != "carried"}  # as before it
        old = make_vector_env(cfg.env, [0], True)
        try:
            old.load_state_dict(state)
        except RLExpError:
            without_carried += 1
        old.close()
    envs.close()
    assert without_carried >= 1  # this seed meets the case the carried action is there for


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_minatar_runs_with_its_cnn_and_resumes_exactly(tmp_path, backend):
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        "algo=dqn", "env=minatar", "env.id=MinAtar/Breakout-v1", "network=minatar_cnn", f"backend={backend}",
        "algo.epochs=3", "algo.steps_per_epoch=200", "algo.start_steps=100", "algo.update_after=100",
        "algo.num_test_episodes=1", "algo.keep_checkpoints=null", "algo.save_freq=1",
    )  # fmt: skip
    progress = train(whole, *args)
    assert list(progress["TotalEnvInteracts"]) == [200, 400, 600]
    assert_resumes_exactly(whole, part, 1)


@pytest.mark.parametrize("algo", ["dqn", "rainbow", "ppo", "trpo", "vpg"])
def test_atari_and_minatar_bring_their_cnn_unless_a_network_is_given(algo):
    """env=atari and env=minatar choose their CNN for every algorithm of Discrete actions (a user who
    names no network trains at once); network=... on the command line still wins."""
    from rlexp.launch import validate_experiment

    minatar = composed(f"algo={algo}", "env=minatar")
    assert (minatar.network.encoder, minatar.network.hidden_sizes) == ("minatar_cnn", [128])
    validate_experiment(minatar)  # the images fit the network: nothing is refused
    atari = composed(f"algo={algo}", "env=atari")
    assert (atari.network.encoder, atari.network.hidden_sizes) == ("nature_cnn", [])
    chosen = composed(f"algo={algo}", "env=minatar", "network=mlp64x32_tanh")
    assert (chosen.network.encoder, chosen.network.hidden_sizes) == ("mlp", [64, 32])
    assert composed(f"algo={algo}").network.encoder == "mlp"  # other envs keep the algorithm's default


def test_every_refusal_of_small_images_names_a_network_that_takes_them():
    """MinAtar's 10x10 images with an MLP or with the Nature CNN (which needs 36x36): the line names
    network=minatar_cnn, and that network takes them."""
    import re

    from rlexp.launch import validate_experiment

    for network in ("mlp64x64_relu", "nature_cnn"):
        cfg = composed("algo=dqn", "env=minatar", f"network={network}")
        with pytest.raises(RLExpError, match="network=minatar_cnn") as refused:
            validate_experiment(cfg)
        fix = re.search(r"use (network=\S+)", str(refused.value))
        assert fix is not None and fix[1] == "network=minatar_cnn", str(refused.value)
        validate_experiment(composed("algo=dqn", "env=minatar", fix[1]))


def test_the_minatar_cnn_has_the_same_output_on_both_backends():
    image = spaces.Box(0, 1, (10, 10, 4), np.uint8)
    t = learner("torch", "env=minatar", "network=minatar_cnn", obs_space=image, act_space=spaces.Discrete(3))
    f = learner("tf", "env=minatar", "network=minatar_cnn", obs_space=image, act_space=spaces.Discrete(3))
    f.set_weights({k: [p.detach().numpy() for p in m.parameters()] for k, m in t.modules().items()})
    obs = (np.random.default_rng(0).uniform(size=(10, 10, 4)) < 0.2).astype(np.uint8)
    assert t.q.encoder.features == 16 * 8 * 8
    np.testing.assert_allclose(f.q_values(obs), t.q_values(obs), rtol=RTOL, atol=ATOL)


def test_dataclass_round_trip_of_the_config():
    cfg = composed("algo=rainbow")
    assert cfg.algo.name == "dqn" and cfg.algo.double_q and cfg.algo.dueling and cfg.algo.n_step == 3
    assert cfg.algo.prioritized and cfg.algo.per_alpha == 0.5
    assert dataclasses.asdict(cfg)["algo"]["optim_eps"] == 1.5e-4


def test_a_discrete_action_space_is_refused_naming_every_algo_option_that_takes_it():
    """The list names the presets too (qrdqn, c51 and rainbow run dqn): the options a user can pick."""
    from rlexp.config import algo_options
    from rlexp.envs import check_spaces

    options = algo_options()
    assert options["qrdqn"] == options["c51"] == options["rainbow"] == "dqn"
    assert options["crossq"] == "crossq" and set(options.values()) == set(ALGOS)
    obs = spaces.Box(-1.0, 1.0, (4,))
    with pytest.raises(RLExpError) as err:
        check_spaces(ALGOS["crossq"], "CartPole-v1", obs, spaces.Discrete(2))
    assert str(err.value) == (
        "crossq cannot handle the action space Discrete(2) of CartPole-v1; "
        "supported: Box (for this space: c51, dqn, ppo, qrdqn, rainbow, trpo, vpg); or an env with Box "
        "actions, e.g. env=Pendulum-v1"
    )
