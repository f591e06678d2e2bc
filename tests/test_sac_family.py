"""TQC and CrossQ, SAC's relatives: the quantile Huber loss and the truncated target on hand-worked cases,
batch renormalisation against its equations, CrossQ's joint batch and its running statistics (frozen when
acting, in every checkpoint, agreed across ranks), on both backends."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.checkpoint import latest_checkpoint, list_checkpoints, load_npz, rank_path
from rlexp.nn import Renorm
from rlexp.nn import tf as nn_tf
from rlexp.nn import torch as nn_torch
from rlexp.seeding import RankSeeds

from .conftest import composed, train

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = spaces.Box(-1.0, 1.0, (3,), np.float32)


def learner(algo: str, backend: str, *overrides: str):
    cfg = composed(f"algo={algo}", f"backend={backend}", "network.hidden_sizes=[16,16]", *overrides)
    return ALGOS[algo].learner_class(backend)(OBS, BOX, cfg, RankSeeds(0))


def naive_quantile_huber(current: np.ndarray, target: np.ndarray, sum_over_quantiles: bool) -> float:
    """The loss pair by pair, in float64: |tau_i - 1{delta < 0}| * huber(delta), delta = target_j - current_i."""
    n = current.shape[-1]
    tau = (np.arange(n) + 0.5) / n
    delta = target[..., None, :] - current[..., :, None]
    huber = np.where(np.abs(delta) > 1, np.abs(delta) - 0.5, 0.5 * delta**2)
    loss = np.abs(tau[:, None] - (delta < 0)) * huber
    return float(loss.sum(-2).mean() if sum_over_quantiles else loss.mean())


# torch's loss goes over the pairs when they are few and over the sorted target samples when many:
# each case runs through both ways
LOSS_BACKENDS = ["torch-pairs", "torch-sorted", "tf"]


def loss_path(backend: str, monkeypatch) -> None:
    """Make torch's quantile Huber loss take the way ``backend`` names (torch-pairs or torch-sorted)."""
    if backend.startswith("torch"):
        monkeypatch.setattr(nn_torch, "PAIRWISE_MAX_PAIRS", 1 << 40 if backend == "torch-pairs" else 0)


def loss_and_grad(backend: str, current: np.ndarray, target: np.ndarray, sum_over: bool):
    if backend.startswith("torch"):
        c = torch.tensor(current, requires_grad=True)
        loss = nn_torch.quantile_huber_loss(c, torch.tensor(target), sum_over)
        loss.backward()
        return float(loss.detach()), c.grad.numpy()
    c = tf.Variable(current)
    with tf.GradientTape() as tape:
        loss = nn_tf.quantile_huber_loss(c, tf.constant(target), sum_over)
    return float(loss), tape.gradient(loss, c).numpy()


@pytest.mark.parametrize("backend", LOSS_BACKENDS)
def test_the_quantile_huber_loss_of_a_hand_worked_case(backend, monkeypatch):
    loss_path(backend, monkeypatch)
    # quantiles at the levels 0.25 and 0.75: 0 and 2; target samples 1 and 3.5
    # (i=0, tau .25): delta 1 -> huber .5, weight .25; delta 3.5 -> huber 3, weight .25  => .125 + .75
    # (i=1, tau .75): delta -1 -> huber .5, weight .25;  delta 1.5 -> huber 1, weight .75 => .125 + .75
    current, target = np.array([[0.0, 2.0]], np.float32), np.array([[1.0, 3.5]], np.float32)
    loss, grad = loss_and_grad(backend, current, target, False)
    assert loss == pytest.approx(1.75 / 4)
    # d/dcurrent_i = -sum_j w clip(delta, -1, 1) / 4: i=0 -(.25 + .25)/4, i=1 -(-.25 + .75)/4
    np.testing.assert_allclose(grad, [[-0.125, -0.125]], atol=1e-7)
    loss, grad = loss_and_grad(backend, current, target, True)  # QR-DQN's: summed over the quantiles
    assert loss == pytest.approx(1.75 / 2)
    np.testing.assert_allclose(grad, [[-0.25, -0.25]], atol=1e-7)


@pytest.mark.parametrize("backend", LOSS_BACKENDS)
@pytest.mark.parametrize(
    "shapes", [((8, 2, 5), (8, 1, 7), False), ((6, 11), (6, 11), True)], ids=["tqc", "qr"]
)
def test_the_quantile_huber_loss_and_its_gradient_equal_the_pairwise_formula(backend, shapes, monkeypatch):
    loss_path(backend, monkeypatch)
    cur_shape, tgt_shape, sum_over = shapes
    rng = np.random.default_rng(0)
    current = (rng.normal(size=cur_shape) * 2).astype(np.float32)
    target = (rng.normal(size=tgt_shape) * 2).astype(np.float32)
    loss, grad = loss_and_grad(backend, current, target, sum_over)
    assert loss == pytest.approx(naive_quantile_huber(current, target, sum_over), rel=1e-5)
    eps, numeric = 1e-3, np.zeros_like(current, dtype=np.float64)  # central differences, float64
    flat = current.astype(np.float64).reshape(-1)
    for k in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[k] += eps
        down[k] -= eps
        numeric.reshape(-1)[k] = (
            naive_quantile_huber(up.reshape(cur_shape), target, sum_over)
            - naive_quantile_huber(down.reshape(cur_shape), target, sum_over)
        ) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, atol=2e-5)


def set_constant_atoms(critic, atoms: list[float], backend: str) -> None:
    """Make a QFunction output ``atoms`` whatever its input: its last layer's weights 0, its bias the atoms."""
    if backend == "torch":
        last = [m for m in critic.q if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.weight.zero_()
            last.bias.copy_(torch.tensor(atoms))
    else:
        last = critic.q.layers[-1]
        last.weight.assign(tf.zeros_like(last.weight))
        last.bias.assign(np.asarray(atoms, np.float32))


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_tqc_pools_the_target_atoms_and_drops_the_largest(backend):
    lrn = learner(
        "tqc",
        backend,
        "algo.n_critics=2",
        "algo.n_quantiles=3",
        "algo.drop_per_critic=1",
        "algo.autotune_alpha=false",
        "algo.alpha=0.0",
        "algo.gamma=0.5",
    )
    for critic, atoms in zip(lrn.critics_targ.nets, ([1, 5, 9], [2, 6, 10]), strict=True):
        set_constant_atoms(critic, atoms, backend)
    for critic in lrn.critics.nets:
        set_constant_atoms(critic, [0.0, 0.0, 0.0], backend)
    n, rng = 4, np.random.default_rng(1)
    batch = {
        "obs": rng.uniform(-1, 1, (n, 5)).astype(np.float32),
        "obs2": rng.uniform(-1, 1, (n, 5)).astype(np.float32),
        "act": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "rew": np.ones(n, np.float32),
        "done": np.array([0, 0, 1, 0], np.float32),
    }
    stats = lrn.update(batch)
    # pooled and sorted: 1 2 5 6 9 10; the 2 x 1 largest dropped: 1 2 5 6; target 1 + 0.5 z (done: 1)
    target = np.array([[1 + 0.5 * z for z in (1, 2, 5, 6)]] * n)
    target[2] = 1.0
    want = naive_quantile_huber(np.zeros((n, 2, 3)), target[:, None, :], False)
    assert stats["LossQ"] == pytest.approx(want, rel=1e-6)
    assert lrn.algo.kept_atoms() == 4 and stats["QVals"].shape == (n,) and np.allclose(stats["QVals"], 0.0)


SPEC = Renorm(momentum=0.1, eps=1e-3, warmup=1, rmax=1.5, dmax=0.5)


def renorm(backend: str, features: int):
    return nn_torch.BatchRenorm(features, SPEC) if backend == "torch" else nn_tf.BatchRenorm(features, SPEC)


def run(layer, x: np.ndarray, train: bool, backend: str) -> np.ndarray:
    if backend == "torch":
        with torch.no_grad():
            return layer(torch.as_tensor(x), train).numpy()
    return layer(tf.constant(x), train).numpy()


def state(layer, backend: str) -> tuple[np.ndarray, np.ndarray, int]:
    if backend == "torch":
        return layer.running_mean.numpy().copy(), layer.running_var.numpy().copy(), int(layer.steps)
    return layer.running_mean.numpy(), layer.running_var.numpy(), int(layer.steps.numpy())


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_batch_renormalisation_follows_its_equations(backend):
    rng = np.random.default_rng(2)
    layer = renorm(backend, 4)
    x1 = (rng.normal(size=(64, 4)) * [1, 2, 0.1, 5] + [0, 3, -1, 10]).astype(np.float32)
    # warm-up (its first step): plain batch normalisation, then the running statistics follow the batch's
    y = run(layer, x1, True, backend)
    mean, var = x1.mean(0), x1.var(0)  # biased
    np.testing.assert_allclose(y, (x1 - mean) / np.sqrt(var + SPEC.eps), rtol=1e-4, atol=1e-4)
    m1, v1, steps = state(layer, backend)
    np.testing.assert_allclose(m1, 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(v1, 1 + 0.1 * (var - 1), rtol=1e-5)
    assert steps == 1
    # after the warm-up: y = (x - mean_B) / std_B * r + d with r, d clipped (rmax 1.5, dmax 0.5)
    x2 = (rng.normal(size=(64, 4)) * [3, 0.5, 1, 1] + [2, -2, 0, 0.01]).astype(np.float32)
    y = run(layer, x2, True, backend)
    mean, std = x2.mean(0), np.sqrt(x2.var(0) + SPEC.eps)
    run_std = np.sqrt(v1 + SPEC.eps)
    r = np.clip(std / run_std, 1 / 1.5, 1.5)
    d = np.clip((mean - m1) / run_std, -0.5, 0.5)
    assert (r == 1.5).any() and (np.abs(d) == 0.5).any() and (np.abs(d) < 0.5).any()  # both clips in use
    np.testing.assert_allclose(y, (x2 - mean) / std * r + d, rtol=1e-4, atol=1e-4)
    # evaluation: the running statistics, frozen; one observation or a batch alike
    m2, v2, _ = state(layer, backend)
    obs = x2[:3]
    np.testing.assert_allclose(
        run(layer, obs, False, backend), (obs - m2) / np.sqrt(v2 + SPEC.eps), rtol=1e-5
    )
    np.testing.assert_allclose(
        run(layer, obs[0], False, backend), (obs[0] - m2) / np.sqrt(v2 + SPEC.eps), rtol=1e-5
    )
    m3, v3, steps = state(layer, backend)
    assert steps == 2 and np.array_equal(m2, m3) and np.array_equal(v2, v3)


def test_the_written_out_gradient_of_batch_renormalisation_is_autograds():
    """torch's _BatchRenormTrain against autograd through the same equations (r and d without gradient),
    before and after the warm-up, for the input, scale and bias."""
    rng = np.random.default_rng(3)
    x = torch.tensor(rng.normal(size=(32, 5)) * 2 + 1, requires_grad=True)
    scale = torch.tensor(rng.uniform(0.5, 2, 5), requires_grad=True)
    bias = torch.tensor(rng.normal(size=5), requires_grad=True)
    running_mean, running_var = torch.tensor(rng.normal(size=5)), torch.tensor(rng.uniform(0.2, 3, 5))
    g = torch.tensor(rng.normal(size=(32, 5)))
    for warm in (False, True):
        y, _, _ = nn_torch._BatchRenormTrain.apply(
            x, scale, bias, running_mean, running_var, torch.tensor(warm), dataclasses.replace(SPEC, rmax=3.0)
        )
        got = torch.autograd.grad((y * g).sum(), [x, scale, bias])
        mean, var = x.mean(0), x.var(0, unbiased=False)
        std, run_std = torch.sqrt(var + SPEC.eps), torch.sqrt(running_var + SPEC.eps)
        r = (std / run_std).clamp(1 / 3, 3).detach() if warm else 1.0
        d = ((mean - running_mean) / run_std).clamp(-0.5, 0.5).detach() if warm else 0.0
        ref = ((x - mean) / std * r + d) * scale + bias
        want = torch.autograd.grad((ref * g).sum(), [x, scale, bias])
        torch.testing.assert_close(y, ref)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_crossq_normalises_both_halves_of_its_critic_batch_together(backend):
    """The critics read (s, a) and (s', a'), a' the policy's action with its running statistics, as one
    batch: the running mean of each critic's first batch renormalisation (of the concatenated (s, a)) moves
    toward the mean of all 2 x batch_size rows."""
    lrn = learner("crossq", backend, "algo.critic_width=8", "algo.renorm_momentum=0.5")
    n, rng = 16, np.random.default_rng(4)
    noise2 = rng.normal(size=(n, 3)).astype(np.float32)
    batch = {
        "obs": rng.uniform(-1, 1, (n, 5)).astype(np.float32),
        "obs2": rng.uniform(2, 3, (n, 5)).astype(np.float32),  # apart from obs: one mean of both differs
        "act": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "rew": rng.normal(size=n).astype(np.float32),
        "done": np.zeros(n, np.float32),
        "noise2": noise2,
        "noise": rng.normal(size=(n, 3)).astype(np.float32),
    }
    if backend == "torch":
        with torch.no_grad():
            a2 = lrn.pi(torch.as_tensor(batch["obs2"]), noise=torch.as_tensor(noise2))[0].numpy()
    else:
        a2 = lrn.pi(tf.constant(batch["obs2"]), tf.constant(noise2))[0].numpy()
    lrn.update(batch)
    rows = np.concatenate([np.c_[batch["obs"], batch["act"]], np.c_[batch["obs2"], a2]])
    for q in (lrn.q1, lrn.q2):
        first = q.q.layers[0]
        np.testing.assert_allclose(first.running_mean.numpy(), 0.5 * rows.mean(0), rtol=1e-5, atol=1e-6)


CROSSQ_RUN = (
    "algo=crossq",
    "env=Pendulum-v1",
    "algo.epochs=2",
    "algo.steps_per_epoch=300",
    "algo.start_steps=100",
    "algo.update_after=100",
    "algo.num_test_episodes=1",
    "network.hidden_sizes=[16,16]",
    "algo.critic_width=24",
)


def renorm_state(module_state: dict) -> dict[str, np.ndarray]:
    return {
        k: np.asarray(v)
        for k, v in module_state.items()
        if k.endswith(("running_mean", "running_var", "steps"))
    }


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_crossq_running_statistics_are_checkpointed_and_frozen_when_acting(tmp_path, backend):
    import rlexp

    run_dir = tmp_path / "run"
    train(run_dir, *CROSSQ_RUN, f"backend={backend}")
    _, path = latest_checkpoint(run_dir)
    if backend == "torch":
        modules = torch.load(path, weights_only=True)["learner"]["modules"]
        saved = renorm_state(modules["pi"])
        assert len(saved) == 3 * 3 and int(saved["net.layers.0.steps"]) > 0  # 3 layers x (mean, var, steps)
        assert not np.allclose(saved["net.layers.0.running_mean"], 0.0)
    else:
        buffers = load_npz(path)["learner"]["buffers"]
        assert set(buffers) == {"pi", "q1", "q2"} and len(buffers["pi"]) == 9 and int(buffers["pi"][2]) > 0
    policy = rlexp.load(run_dir).policy()
    obs, _ = policy.env.reset(seed=0)
    before = [v.copy() for v in _running(policy, backend)]
    first, again = policy(obs), policy(obs)
    np.testing.assert_array_equal(first, again)
    assert all(np.array_equal(a, b) for a, b in zip(before, _running(policy, backend), strict=True))


def _running(policy, backend: str) -> list[np.ndarray]:
    lrn = policy._learner
    if backend == "torch":
        return [b.detach().numpy() for b in nn_torch.renorm_buffers(lrn.pi, lrn.q1, lrn.q2)]
    return [v.numpy() for v in nn_tf.renorm_buffers(lrn.pi, lrn.q1, lrn.q2)]


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_crossq_ranks_agree_on_the_running_statistics(tmp_path, backend):
    """Each rank normalises its own share of the batch; after every update the running statistics are
    averaged, so both ranks' checkpoints hold the same ones (and parameters)."""
    run_dir = tmp_path / "run"
    train(run_dir, *CROSSQ_RUN, f"backend={backend}", "comm.procs=2", "algo.batch_size=64")
    _, path = latest_checkpoint(run_dir)
    parts = [path, rank_path(path, 1)]
    assert parts[1].is_file() and sorted(list_checkpoints(run_dir)) == [1, 2]
    if backend == "torch":
        states = [torch.load(p, weights_only=True)["learner"]["modules"] for p in parts]
        for name in ("pi", "q1", "q2"):
            ours, theirs = states[0][name], states[1][name]
            first = "net.layers.0.running_mean" if name == "pi" else "q.layers.0.running_mean"
            assert not np.allclose(np.asarray(ours[first]), 0.0)  # trained: not their initial values
            for key in ours:
                np.testing.assert_array_equal(
                    np.asarray(ours[key]), np.asarray(theirs[key]), err_msg=f"{name}.{key}"
                )
    else:
        states = [load_npz(p)["learner"] for p in parts]
        for section in ("buffers", "modules"):
            for name, values in states[0][section].items():
                for i, (a, b) in enumerate(zip(values, states[1][section][name], strict=True)):
                    np.testing.assert_array_equal(a, b, err_msg=f"{section} {name}[{i}]")
