"""Backend parity: the torch and the TensorFlow learner of each algorithm, started from identical
weights and fed the same batch (and the same pre-drawn noise), report the same statistics and reach
the same parameters after an update, to float32 tolerance. TRPO's line search outcome and PPO's
early-stop iteration must match exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.seeding import RankSeeds

from .conftest import composed

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = spaces.Box(np.array([-2.0, 0.0, -1.0], np.float32), np.array([2.0, 1.0, 1.0], np.float32))
DISCRETE = spaces.Discrete(4)
RTOL, ATOL = 2e-4, 2e-5


def pair(algo: str, act_space: spaces.Space, *overrides: str):
    """(torch learner, tf learner) with the tf weights copied from torch."""
    cfg = composed(f"algo={algo}", "network.hidden_sizes=[32,32]", "backend=tf", *overrides)
    tf_learner = ALGOS[algo].learner_class("tf")(OBS, act_space, cfg, RankSeeds(0))
    torch_cfg = dataclasses.replace(cfg, backend=composed("backend=torch").backend)  # each its own config
    torch_learner = ALGOS[algo].learner_class("torch")(OBS, act_space, torch_cfg, RankSeeds(0))
    tf_learner.set_weights(
        {k: [p.detach().numpy() for p in m.parameters()] for k, m in torch_learner.modules().items()}
    )
    return torch_learner, tf_learner


def assert_same_params(torch_learner, tf_learner, rtol: float = RTOL, atol: float = ATOL) -> None:
    tf_weights = tf_learner.get_weights()
    for name, module in torch_learner.modules().items():
        for i, (p, q) in enumerate(zip(module.parameters(), tf_weights[name], strict=True)):
            np.testing.assert_allclose(p.detach().numpy(), q, rtol=rtol, atol=atol, err_msg=f"{name}[{i}]")


def assert_same_buffers(torch_learner, tf_learner, rtol: float = RTOL, atol: float = ATOL) -> None:
    """The modules' saved state that is not trained (CrossQ's running statistics and step counts)."""
    tf_buffers = tf_learner.get_buffers()
    for name, module in torch_learner.modules().items():
        ours = [b.numpy() for b in module.buffers()]
        assert len(ours) == len(tf_buffers.get(name, [])), name
        for i, (a, b) in enumerate(zip(ours, tf_buffers.get(name, []), strict=True)):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"{name} buffer {i}")


def assert_same_stats(a: dict, b: dict, rtol: float = RTOL) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_allclose(
            np.asarray(a[k], dtype=np.float64),
            np.asarray(b[k], dtype=np.float64),
            rtol=rtol,
            atol=ATOL,
            err_msg=k,
        )


def on_policy_batch(torch_learner, act_space: spaces.Space, n: int = 200, adv_scale: float = 1.0) -> dict:
    rng = np.random.default_rng(3)
    obs = rng.uniform(-1, 1, (n, 5)).astype(np.float32)
    if isinstance(act_space, spaces.Discrete):
        act = rng.integers(0, act_space.n, n)
    else:
        act = rng.normal(size=(n, 3)).astype(np.float32)
    with torch.no_grad():
        _, logp = torch_learner.ac.pi(torch.as_tensor(obs), torch.as_tensor(act))
    adv = (rng.normal(size=n) * adv_scale).astype(np.float32)
    return {
        "obs": obs,
        "act": act,
        "adv": adv,
        "ret": rng.normal(size=n).astype(np.float32),
        "logp": logp.numpy().astype(np.float32),
    }


@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize(
    "algo,overrides",
    [
        ("vpg", []),
        ("ppo", ["algo.target_kl=0.002", "algo.pi_lr=1e-3"]),  # early stop well before 80 iterations
        ("trpo", []),
        ("trpo", ["algo.variant=npg"]),
    ],
    ids=["vpg", "ppo", "trpo", "npg"],
)
def test_on_policy_update_parity(algo, overrides, space):
    t, f = pair(algo, space, "algo.train_v_iters=20", *overrides)
    batch = on_policy_batch(t, space)
    st, sf = t.update(batch), f.update(batch)
    # TRPO's conjugate gradient amplifies the float32 rounding of the Fisher-vector products by a
    # factor that depends on the initial weights. Measured over 10 initialisations (with the code
    # before and after the random streams of issue 13 alike): parameters needed an atol of 2.5e-7 to
    # 1.2e-4 beside rtol 2e-4, statistics a rtol of 5e-6 to 7.8e-4 (Gaussian policies; categorical
    # ones stay within the default). These tolerances hold for any initialisation, with ~1.7x margin.
    rtol, atol = (1e-3, 2e-4) if algo == "trpo" and space is BOX else (RTOL, ATOL)
    assert_same_stats(st, sf, rtol=rtol)
    assert_same_params(t, f, atol=atol)
    if algo == "ppo":
        assert st["StopIter"] == sf["StopIter"] < 79
    if "BacktrackIters" in st:
        assert st["BacktrackIters"] == sf["BacktrackIters"]


def test_trpo_backtracking_line_search_parity():
    """A trust region 100x the default: the full step overshoots and both backends backtrack once."""
    t, f = pair("trpo", BOX, "algo.train_v_iters=20", "algo.delta=1.0")
    batch = on_policy_batch(t, BOX)
    st, sf = t.update(batch), f.update(batch)
    assert st["BacktrackIters"] == sf["BacktrackIters"] == 1
    # such a large step amplifies float32 rounding of the Fisher-vector products in conjugate gradient
    # further: over 10 initialisations parameters needed an atol of 1.2e-6 to 9.6e-4 beside rtol 2e-3,
    # statistics a rtol of 1.2e-4 to 8.2e-3 (see test_on_policy_update_parity)
    assert_same_stats(st, sf, rtol=1.5e-2)
    assert_same_params(t, f, rtol=2e-3, atol=1.5e-3)


def off_policy_batch(n: int = 64) -> dict:
    rng = np.random.default_rng(4)
    f32 = np.float32
    return {
        "obs": rng.uniform(-1, 1, (n, 5)).astype(f32),
        "obs2": rng.uniform(-1, 1, (n, 5)).astype(f32),
        "act": rng.uniform(-1, 1, (n, 3)).astype(f32),
        "rew": rng.normal(size=n).astype(f32),
        "done": (rng.uniform(size=n) < 0.3).astype(f32),
        "target_noise": rng.normal(size=(n, 3)).astype(f32),  # TD3's target policy smoothing
        "noise": rng.normal(size=(n, 3)).astype(f32),
        "noise2": rng.normal(size=(n, 3)).astype(f32),
    }  # SAC


@pytest.mark.parametrize(
    "algo,overrides",
    [
        ("ddpg", []),
        ("td3", []),
        ("sac", []),
        ("sac", ["algo.autotune_alpha=true"]),
        ("tqc", []),
        ("tqc", ["algo.autotune_alpha=false", "algo.n_critics=3", "algo.drop_per_critic=0"]),
        # CrossQ with tanh: with ReLU, a unit active on the whole batch passes its bias on unchanged, the
        # next batch renormalisation subtracts it again, and its gradient is rounding noise (~1e-8), which
        # Adam's first steps turn into steps of +-lr whose sign differs between the backends. The critics
        # wider than the policy; r and d in use from each layer's second training step.
        ("crossq", ["network.activation=tanh", "algo.critic_width=48", "algo.renorm_warmup=1"]),
        (
            "crossq",
            [
                "network.activation=tanh",
                "algo.critic_width=40",
                "algo.autotune_alpha=false",
                "algo.policy_delay=1",
            ],
        ),
    ],
    ids=[
        "ddpg",
        "td3",
        "sac",
        "sac-autotune",
        "tqc",
        "tqc-3-critics-fixed-alpha",
        "crossq",
        "crossq-no-delay",
    ],
)
def test_off_policy_update_parity(algo, overrides):
    t, f = pair(algo, BOX, *overrides)
    obs = np.random.default_rng(5).uniform(-1, 1, 5).astype(np.float32)
    for step in range(4):  # TD3: policy and targets move on updates 0 and 2 only; CrossQ on 0 and 3
        batch = off_policy_batch()
        batch = {
            k: v
            for k, v in batch.items()
            if k in ("obs", "obs2", "act", "rew", "done")
            or (algo == "td3" and k == "target_noise")
            or (algo in ("sac", "tqc", "crossq") and k in ("noise", "noise2"))
        }
        # TF acts in numpy on a weight snapshot taken lazily: acting first caches it, and an update
        # that moves the policy must make the next act see the new weights
        np.testing.assert_allclose(f.act(obs), t.act(obs), rtol=RTOL, atol=ATOL)
        st, sf = t.update(dict(batch)), f.update(dict(batch))
        assert_same_stats(st, sf)
        assert_same_params(t, f)
        assert_same_buffers(t, f)
        assert ("LossPi" in st) == ("LossPi" in sf), step
        np.testing.assert_allclose(f.act(obs), t.act(obs), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_tf_checkpoint_round_trip_without_pickle(tmp_path, algo):
    _, f = pair(algo, BOX)
    if algo == "ppo":
        f.update(on_policy_batch(pair(algo, BOX)[0], BOX))
    else:
        f.update(off_policy_batch())
    f.save(tmp_path / "c.npz", {"epoch": 2, "replay": {"obs": np.ones((3, 5), np.float32), "ptr": 3}})
    with np.load(tmp_path / "c.npz", allow_pickle=False) as data:  # plain arrays: no pickle anywhere
        assert "__meta__" in data.files
    cfg = composed(f"algo={algo}", "network.hidden_sizes=[32,32]", "backend=tf", "seed=9")
    fresh = ALGOS[algo].learner_class("tf")(OBS, BOX, cfg, RankSeeds(9))
    obs = np.linspace(-1, 1, 5).astype(np.float32)
    before = fresh.act(obs, deterministic=True)  # acting on the fresh weights caches their snapshot
    loop = fresh.load(tmp_path / "c.npz")
    after = fresh.act(obs, deterministic=True)
    np.testing.assert_array_equal(after, f.act(obs, deterministic=True))
    assert not np.array_equal(before, after)
    assert loop["epoch"] == 2 and loop["replay"]["ptr"] == 3 and loop["replay"]["obs"].shape == (3, 5)
    for name, values in f.get_weights().items():
        for a, b in zip(values, fresh.get_weights()[name], strict=True):
            np.testing.assert_array_equal(a, b)
    for name, opt in f.optimizers().items():
        for a, b in zip(opt.slots, fresh.optimizers()[name].slots, strict=True):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
