"""The whole Rainbow (issue 75): C51's projection of the target distribution onto its atoms and its
cross-entropy, QR-DQN's target quantiles and quantile Huber loss, noisy networks (the noise statistics
of the factorised layer, fresh draws for acting and for each gradient step from checkpointed generators),
on both backends; presets, tuned settings, one-line errors, resume with 2 ranks, loading."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import torch
from gymnasium import spaces

from rlexp.nn import tf as nn_tf
from rlexp.nn import torch as nn_torch
from rlexp.nn.acting import NoisyMLPCopy
from tests.conftest import composed, run_cli, train
from tests.test_dqn import CARTPOLE, batch_of, learner
from tests.test_resume import assert_same_run, final_state
from tests.test_sac_family import LOSS_BACKENDS, loss_path

BACKENDS = ["torch", "tf"]
ONE = spaces.Box(-1.0, 1.0, (1,), np.float32)


def fixed(backend: str, outputs: np.ndarray, targ_outputs: np.ndarray, *overrides: str):
    """A learner on 1-d observations whose networks ignore them: the online network outputs ``outputs``
    and the target network ``targ_outputs`` (each (n_actions, atoms): logits or quantiles) everywhere."""
    n_actions = outputs.shape[0]
    lrn = learner(
        backend, "network.hidden_sizes=[]", *overrides, obs_space=ONE, act_space=spaces.Discrete(n_actions)
    )
    weights = {
        name: [np.zeros((out.size, 1), np.float32), out.astype(np.float32).ravel()]
        for name, out in (("q", outputs), ("q_targ", targ_outputs))
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


def transitions(rew, done, discount, act=None) -> dict:
    n = len(rew)
    return {
        "obs": np.zeros((n, 1), np.float32),
        "obs2": np.zeros((n, 1), np.float32),
        "act": np.zeros(n, np.int64) if act is None else np.asarray(act),
        "rew": np.asarray(rew, np.float32),
        "done": np.asarray(done, np.float32),
        "discount": np.asarray(discount, np.float32),
    }


C51_SMALL = ("algo=c51", "algo.num_atoms=5", "algo.v_min=-2", "algo.v_max=2")  # atoms -2, -1, 0, 1, 2


# --- C51 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_c51_projects_the_target_distribution_onto_its_atoms(backend):
    """Atoms -2..2 (dz 1). Worked by hand: Tz = r + discount (1 - done) z, clipped to [-2, 2], each moved
    atom's probability split between its two neighbours in proportion to its nearness:
    - r .5, discount .5, p = (.1, .2, .3, .2, .2): Tz = (-.5, 0, .5, 1, 1.5) -> (0, .05, .4, .45, .1);
    - r 3, done (Tz = 3 everywhere, clipped to 2): all of it on atom 2;
    - r -.25, done: .25 to -1 and .75 to 0;
    - r -1, discount .9, p = (.5, 0, 0, 0, .5): Tz_0 = -2.8 clipped to -2, Tz_4 = .8 -> .1 to 0, .4 to 1."""
    lrn = learner(backend, *C51_SMALL)
    batch = lrn.tensors(transitions([0.5, 3.0, -0.25, -1.0], [0, 1, 1, 0], [0.5, 0.5, 0.5, 0.9]))
    probs2 = np.array(
        [[0.1, 0.2, 0.3, 0.2, 0.2], [0.1, 0.2, 0.3, 0.2, 0.2], [0.2] * 5, [0.5, 0, 0, 0, 0.5]], np.float32
    )
    probs2 = torch.as_tensor(probs2) if backend == "torch" else tf.constant(probs2)
    projected = np.asarray(lrn.projected(batch, probs2))
    expected = [[0, 0.05, 0.4, 0.45, 0.1], [0, 0, 0, 0, 1], [0, 0.25, 0.75, 0, 0], [0.5, 0, 0.1, 0.4, 0]]
    np.testing.assert_allclose(projected, expected, atol=1e-6)
    np.testing.assert_allclose(projected.sum(-1), 1.0, rtol=1e-6)  # no probability is lost


ONE_HOT = 20.0  # a logit this far above the others: its atom holds all but ~1e-8 of the probability


def peaked(atoms_of: list[int], n_atoms: int = 5) -> np.ndarray:
    """Logits of one (almost) one-hot distribution per action, on the atom ``atoms_of[action]``."""
    out = np.zeros((len(atoms_of), n_atoms), np.float32)
    out[np.arange(len(atoms_of)), atoms_of] = ONE_HOT
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_c51_bootstraps_from_the_target_network_at_the_action_its_or_the_online_networks_mean_picks(backend):
    """Online network: action 0 on atom 2 (mean 2), 1 on -2, 2 on 0; target network: 0 on -2, 1 on 2,
    2 on 1. C51 bootstraps from the target's distribution at its own greedy action (1: atom 2); with
    double Q at the online network's (0), i.e. the target's atom -2."""
    online, target = peaked([4, 0, 2]), peaked([0, 4, 3])
    batch = transitions([0.0], [0], [1.0])
    for double, atom in ((False, 4), (True, 0)):
        lrn = fixed(backend, online, target, *C51_SMALL, f"algo.double_q={str(double).lower()}")
        out2 = np.asarray(lrn.next_outputs(lrn.tensors(batch)))
        assert int(np.argmax(out2[0])) == atom
        np.testing.assert_allclose(lrn.q_values(np.zeros(1)), [2, -2, 0], atol=1e-6)  # acting: the means


def projection(z: np.ndarray, tz: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The projection the hand-worked test above fixes, in numpy (float64)."""
    dz = z[1] - z[0]
    return np.clip(1 - np.abs(np.clip(tz, z[0], z[-1])[None, :] - z[:, None]) / dz, 0, None) @ p


@pytest.mark.parametrize("backend", BACKENDS)
def test_c51_loss_is_the_cross_entropy_to_the_projection_and_each_transitions_priority(backend):
    """LossQ is the importance-weighted mean of -sum_j m_j log p_j(s, a) (m: the projected target), QVals
    the mean of p(s, a), and each sampled transition's new priority its own cross-entropy + per_eps."""
    rng = np.random.default_rng(0)
    online, target = rng.normal(size=(3, 5)).astype(np.float32), rng.normal(size=(3, 5)).astype(np.float32)
    batch = transitions([0.3, -1.2], [0, 1], [0.9, 0.9], act=[1, 2])
    weights = np.array([1.0, 0.5], np.float32)
    lrn = fixed(backend, online, target, *C51_SMALL, "algo.prioritized=true", "algo.per_eps=0.01")
    stats = lrn.update({**batch, "weights": weights})
    z = np.linspace(-2, 2, 5)

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max())
        return e / e.sum()

    a2 = int(np.argmax([softmax(t) @ z for t in target.astype(np.float64)]))  # the target's greedy action
    ce, q = [], []
    for i, a in enumerate(batch["act"]):
        tz = batch["rew"][i] + batch["discount"][i] * (1 - batch["done"][i]) * z
        m = projection(z, tz, softmax(target[a2].astype(np.float64)))
        p = softmax(online[a].astype(np.float64))
        ce.append(-(m * np.log(p)).sum())
        q.append(p @ z)
    assert stats["LossQ"] == pytest.approx(np.mean(weights * ce), rel=1e-5)
    np.testing.assert_allclose(stats["QVals"], q, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats["Priority"], np.array(ce) + 0.01, rtol=1e-5)


# --- QR-DQN ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_qr_dqn_quantile_huber_loss_targets_and_priorities(backend):
    """Two quantiles (levels .25, .75). Online: action 0 (0, 1), 1 (2, 2), 2 (0, 0); target: 0 (0, 5)
    (mean 2.5, its greedy action), 1 (1, 1), 2 (-1, 0). r .5, discount .5: the target quantiles are
    .5 + .5 (0, 5) = (.5, 3), or with double Q (the online network picks action 1) .5 + .5 (1, 1) = (1, 1).
    Action 0's quantiles (0, 1) against (.5, 3), worked by hand, summed over quantiles and averaged over
    the target samples: i=0 (tau .25): (.25 x .125 + .25 x 2.5) / 2 = .328125; i=1 (tau .75): the pair
    (1, .5) is an overestimate, weight .25, huber .125; (1, 3): .75 x 1.5: (.03125 + 1.125) / 2 = .578125;
    the loss .90625. Against (1, 1): i=0 .25 x .5 = .125, i=1 0: .125."""
    online = np.array([[0, 1], [2, 2], [0, 0]], np.float32)
    target = np.array([[0, 5], [1, 1], [-1, 0]], np.float32)
    batch = transitions([0.5], [0], [0.5])
    settings = ("algo=qrdqn", "algo.num_quantiles=2", "algo.prioritized=true", "algo.per_eps=0.01")
    for double, loss in ((False, 0.90625), (True, 0.125)):
        lrn = fixed(backend, online, target, *settings, f"algo.double_q={str(double).lower()}")
        np.testing.assert_allclose(lrn.q_values(np.zeros(1)), [0.5, 2, 0])  # greedy by the mean quantile
        stats = lrn.update({**batch, "weights": np.ones(1, np.float32)})
        assert stats["LossQ"] == pytest.approx(loss, rel=1e-6)
        np.testing.assert_allclose(stats["Priority"], [loss + 0.01], rtol=1e-6)
        np.testing.assert_allclose(stats["QVals"], [0.5])


@pytest.mark.parametrize("backend", LOSS_BACKENDS)
def test_the_quantile_huber_loss_per_row_averages_to_the_loss_and_has_its_gradient(backend, monkeypatch):
    """QR-DQN weighs each transition's loss (importance weights): the per-row losses average to the
    loss sb3-contrib sums over quantiles, and the gradient of their weighted mean is the weighted one
    (torch's loss over the pairs and over the sorted target samples)."""
    loss_path(backend, monkeypatch)
    backend = "torch" if backend.startswith("torch") else backend
    rng = np.random.default_rng(1)
    current, target = rng.normal(size=(6, 9)).astype(np.float32), rng.normal(size=(6, 11)).astype(np.float32)
    w = rng.uniform(0.2, 1, 6).astype(np.float32)
    if backend == "torch":
        c = torch.tensor(current, requires_grad=True)
        rows = nn_torch.quantile_huber_loss(c, torch.tensor(target), True, per_row=True)
        (rows * torch.tensor(w)).mean().backward()
        rows, grad = rows.detach().numpy(), c.grad.numpy()
        whole = float(nn_torch.quantile_huber_loss(torch.tensor(current), torch.tensor(target), True))
    else:
        c = tf.Variable(current)
        with tf.GradientTape() as tape:
            out = nn_tf.quantile_huber_loss(c, tf.constant(target), True, per_row=True)
            weighted = tf.reduce_mean(out * w)
        rows, grad = out.numpy(), tape.gradient(weighted, c).numpy()
        whole = float(nn_tf.quantile_huber_loss(tf.constant(current), tf.constant(target), True))
    assert rows.shape == (6,) and rows.mean() == pytest.approx(whole, rel=1e-6)
    for i in range(6):  # each row's gradient: its own loss's, weighted
        if backend == "torch":
            ci = torch.tensor(current[i : i + 1], requires_grad=True)
            nn_torch.quantile_huber_loss(ci, torch.tensor(target[i : i + 1]), True).backward()
            own = ci.grad.numpy()[0]
        else:
            ci = tf.Variable(current[i : i + 1])
            with tf.GradientTape() as tape:
                li = nn_tf.quantile_huber_loss(ci, tf.constant(target[i : i + 1]), True)
            own = tape.gradient(li, ci).numpy()[0]
        np.testing.assert_allclose(grad[i], own * w[i] / 6, rtol=1e-5, atol=1e-8)


# --- noisy networks --------------------------------------------------------------------------------------
def test_factorised_noise_scales_its_draws_by_the_signed_square_root():
    x = np.array([-4.0, -0.25, 0.0, 2.25, 9.0], np.float32)
    expected = [-2.0, -0.5, 0.0, 1.5, 3.0]
    np.testing.assert_allclose(nn_torch.scaled_noise(torch.as_tensor(x)).numpy(), expected)
    np.testing.assert_allclose(nn_tf.scaled_noise(tf.constant(x)).numpy(), expected)


def test_the_noisy_layers_noise_has_the_factorised_statistics():
    """A factorised noisy layer's weight noise is W_sigma * f(eps_out) f(eps_in)^T and its bias noise
    b_sigma * f(eps_out), f(x) = sign(x) sqrt(|x|): per draw a rank-one matrix; over draws each entry has
    mean 0 and variance sigma^2 E|eps|^2... = sigma^2 (E|eps|)^2 = sigma^2 2 / pi (the bias sigma^2 E|eps| =
    sigma^2 sqrt(2 / pi)), and the entries of one row (column) are uncorrelated. Initial scales are
    sigma0 / sqrt(in), the means uniform in +-1/sqrt(in) (Fortunato et al.'s factorised initialisation)."""
    torch.manual_seed(0)
    layer = nn_torch.NoisyLinear(4, 3, sigma0=0.5)
    sigma = 0.5 / np.sqrt(4)
    np.testing.assert_allclose(layer.weight_sigma.detach().numpy(), sigma)
    np.testing.assert_allclose(layer.bias_sigma.detach().numpy(), sigma)
    assert np.abs(layer.weight.detach().numpy()).max() <= 0.5  # 1 / sqrt(4)
    probe = torch.cat([torch.zeros(1, 4), torch.eye(4)])  # outputs: b, then b + W[:, k]
    draws = torch.as_tensor(
        np.random.default_rng(0).standard_normal((40_000, layer.noise_size)), dtype=torch.float32
    )
    with torch.no_grad():
        mean_out = layer(probe)
        out = torch.stack([layer(probe, d) for d in draws[:3]]).numpy()
        b_noise, w_noise = out[:, 0] - mean_out[0].numpy(), out[:, 1:] - out[:, :1]
        w_noise = np.swapaxes(w_noise, 1, 2) - layer.weight.numpy()  # (draws, out, in)
    for k in range(3):  # one draw: a rank-one matrix, the bias noise its out factor
        f_in, f_out = nn_torch.scaled_noise(draws[k]).split([4, 3])
        np.testing.assert_allclose(w_noise[k], sigma * np.outer(f_out, f_in), atol=1e-6)
        np.testing.assert_allclose(b_noise[k], sigma * f_out.numpy(), atol=1e-6)
        assert np.linalg.matrix_rank(w_noise[k], tol=1e-5) == 1
    # the statistics, from the factorised form over all 40,000 draws
    f = nn_torch.scaled_noise(draws).numpy()
    w_all = sigma * f[:, 4:, None] * f[:, None, :4]
    b_all = sigma * f[:, 4:]
    assert np.abs(w_all.mean(0)).max() < 0.01 and np.abs(b_all.mean(0)).max() < 0.01
    np.testing.assert_allclose(w_all.var(0), sigma**2 * 2 / np.pi, rtol=0.05)
    np.testing.assert_allclose(b_all.var(0), sigma**2 * np.sqrt(2 / np.pi), rtol=0.05)
    corr = np.corrcoef(w_all[:, 0, 0], w_all[:, 0, 1])[0, 1]  # one row: a shared out factor
    assert abs(corr) < 0.03


def test_a_noisy_mlp_gives_the_same_outputs_in_torch_tf_and_numpy_acting():
    torch.manual_seed(1)
    net = nn_torch.NoisyMLP([5, 8, 3], "relu", sigma0=0.5)
    twin = nn_tf.noisy_mlp([5, 8, 3], "relu", np.random.default_rng(0), sigma0=0.5)
    for t, v in zip(net.parameters(), twin.parameters(), strict=True):
        v.assign(t.detach().numpy())
    rng = np.random.default_rng(2)
    x, noise = (
        rng.normal(size=(4, 5)).astype(np.float32),
        rng.standard_normal(net.noise_size).astype(np.float32),
    )
    copy = NoisyMLPCopy(lambda: nn_torch.linear_layers(net), lambda: nn_torch.sigma_layers(net), "relu")
    with torch.no_grad():
        out = net(torch.as_tensor(x), torch.as_tensor(noise)).numpy()
        mean = net(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(twin(x, tf.constant(noise)).numpy(), out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        copy(x[0].astype(np.float64), noise.astype(np.float64)), out[0], rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(copy(x[0].astype(np.float64)), mean[0], rtol=1e-5, atol=1e-6)
    assert np.abs(out - mean).max() > 1e-3  # the noise does something


def test_a_noisy_layer_gives_one_row_the_value_it_gives_it_in_a_batch():
    """One observation (acting) takes the factorised form ``x W^T + b + f(eps_out) ((x f(eps_in)) W_sigma^T +
    b_sigma)``, a batch the noisy weight matrix: the same values, on both backends."""
    torch.manual_seed(3)
    layer = nn_torch.NoisyLinear(6, 4, sigma0=2.0)
    twin = nn_tf.NoisyLinear(6, 4, np.random.default_rng(0), sigma0=2.0)
    for t, v in zip(layer.parameters(), twin.parameters(), strict=True):
        v.assign(t.detach().numpy())
    rng = np.random.default_rng(4)
    x, noise = rng.normal(size=(3, 6)).astype(np.float32), rng.standard_normal(10).astype(np.float32)
    with torch.no_grad():
        batch = layer(torch.as_tensor(x), torch.as_tensor(noise)).numpy()
        rows = [layer(torch.as_tensor(x[i : i + 1]), torch.as_tensor(noise)).numpy()[0] for i in range(3)]
    np.testing.assert_allclose(rows, batch, rtol=1e-5, atol=1e-6)
    tf_rows = [twin(tf.constant(x[i : i + 1]), tf.constant(noise)).numpy()[0] for i in range(3)]
    np.testing.assert_allclose(tf_rows, batch, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(twin(tf.constant(x), tf.constant(noise)).numpy(), batch, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_noisy_acting_draws_fresh_noise_from_the_acting_generator_without_epsilon(backend):
    """With noisy networks epsilon is 0 throughout; each exploring action is the greedy one under a fresh
    draw of the noise from the learner's numpy generator (what the checkpoint keeps), and test actions
    (deterministic) are the mean network's greedy ones."""
    lrn = learner(backend, "algo.noisy=true", "algo.noisy_sigma0=5", "algo.eps_end=0.3")
    lrn.advance(0)
    lrn.advance(10**6)
    assert lrn.epsilon == 0.0 and lrn.end_of_epoch_stats() == {"Epsilon": 0.0}
    obs = np.random.default_rng(3).uniform(-1, 1, 5).astype(np.float32)
    twin = np.random.default_rng()
    twin.bit_generator.state = lrn.rng.bit_generator.state
    actions = [int(lrn.explore(obs)) for _ in range(200)]
    expected = [
        int(np.argmax(lrn.q_values(obs, twin.standard_normal(lrn.acting.noise_size)))) for _ in range(200)
    ]
    assert actions == expected and len(set(actions)) > 1
    assert int(lrn.act(obs)) == int(np.argmax(lrn.q_values(obs)))  # the mean network, no draw
    assert lrn.rng.bit_generator.state == twin.bit_generator.state


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_gradient_step_draws_online_and_target_noise_from_the_learner_generator(backend):
    """A step's noise is two fresh draws from the learner's generator (checkpointed: torch_rng, tf_rng),
    the online network's first, then the target network's: a twin learner given those draws takes the
    same step."""
    a, b = learner(backend, "algo=rainbow"), learner(backend, "algo=rainbow")
    size = a.q.noise_size
    if backend == "torch":
        gen = torch.Generator().set_state(a.gen.get_state())
        online, targ = (torch.randn((size,), generator=gen).numpy() for _ in range(2))
    else:
        gen = tf.random.Generator.from_state(a.gen.state.numpy(), a.gen.algorithm)  # a copy of its state
        online, targ = (gen.normal((size,)).numpy() for _ in range(2))
    assert np.abs(online - targ).max() > 0  # independent draws
    batch = batch_of(weights=True)
    sa, sb = a.update(dict(batch)), b.update({**batch, "noise": online, "noise_targ": targ})
    assert sa["LossQ"] == pytest.approx(sb["LossQ"], rel=1e-6)
    for x, y in zip(a.state_dict()["modules"]["q"].values() if backend == "torch" else a.get_weights()["q"],
                    b.state_dict()["modules"]["q"].values() if backend == "torch" else b.get_weights()["q"],
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
    swapped = learner(backend, "algo=rainbow")
    s_swapped = swapped.update({**batch, "noise": targ, "noise_targ": online})
    assert s_swapped["LossQ"] != pytest.approx(sa["LossQ"], rel=1e-6)  # each net has its own draw


# --- configuration ---------------------------------------------------------------------------------------
def test_the_presets_are_the_papers_and_sb3_contribs_settings():
    rainbow = composed("algo=rainbow").algo
    assert (rainbow.double_q, rainbow.dueling, rainbow.n_step, rainbow.prioritized) == (True, True, 3, True)
    assert (rainbow.distributional, rainbow.num_atoms, rainbow.v_min, rainbow.v_max) == ("c51", 51, -10, 10)
    assert (rainbow.noisy, rainbow.noisy_sigma0, rainbow.per_alpha, rainbow.per_beta0) == (
        True,
        0.5,
        0.5,
        0.4,
    )
    assert (rainbow.lr, rainbow.optim_eps, rainbow.epsilon(0)) == (6.25e-5, 1.5e-4, 0.0)
    assert rainbow.notes() == []  # its epsilon keys are 0: nothing to say
    qr = composed("algo=qrdqn").algo
    assert (qr.distributional, qr.num_quantiles, qr.lr, qr.optim_eps, qr.max_grad_norm) == (
        "qr",
        200,
        5e-5,
        3.125e-4,
        None,
    )
    c51 = composed("algo=c51").algo
    assert (c51.distributional, c51.num_atoms, c51.noisy, c51.double_q) == ("c51", 51, False, False)
    assert composed("algo=dqn").algo.distributional is None  # DQN stays DQN
    for algo in ("rainbow", "c51", "qrdqn"):
        assert composed(f"algo={algo}").algo.name == "dqn"  # a preset of dqn (its own condition in compare)


def test_tuned_settings_of_qrdqn_rainbow_and_c51():
    cart = composed("tuned=qrdqn", "env=CartPole-v1")
    assert (cart.algo.distributional, cart.algo.num_quantiles, cart.algo.lr, cart.algo.utd_ratio) == (
        "qr",
        10,
        2.3e-3,
        0.5,
    )
    lunar = composed("tuned=qrdqn", "env=LunarLander-v3").algo
    assert (lunar.num_quantiles, lunar.anneal_lr, lunar.gamma, lunar.target_update_every) == (
        170,
        True,
        0.995,
        1,
    )
    assert lunar.learning_rate(0) == 1.5e-3 and lunar.learning_rate(50_000) == pytest.approx(0.75e-3)
    assert lunar.epochs_schedule() == "algo.anneal_lr=true"  # resume= with other epochs is refused
    minatar = composed("tuned=rainbow", "env=minatar")
    assert (minatar.algo.noisy, minatar.algo.v_max, minatar.network.encoder) == (True, 100, "minatar_cnn")
    assert minatar.algo.per_weights == "batch"  # Dopamine's importance weights, over the minibatch
    for env in ("CartPole-v1", "LunarLander-v3"):  # Revisiting Rainbow's too, Dopamine's prioritized replay
        assert composed("tuned=rainbow", f"env={env}").algo.per_weights == "batch"
    # the default (OpenAI baselines'), where a preset's source names none: SB3-zoo's DQN has no PER
    assert composed("tuned=dqn", "env=CartPole-v1").algo.per_weights == "buffer"
    c51 = composed("tuned=c51", "env=minatar").algo
    assert (c51.noisy, c51.optimizer, c51.v_max, c51.update_every) == (
        False,
        "rmsprop",
        100,
        1,
    )  # DQN's MinAtar
    assert composed("algo=rainbow", "tuned=dqn", "env=CartPole-v1").algo.noisy  # DQN's settings apply too


def test_ablations_run_at_a_presets_tuned_settings():
    """Every DQN preset's tuned settings apply to every DQN, the parts staying the algo section's: Rainbow
    without one of its parts at Rainbow's MinAtar settings, C51 at Rainbow's, QR-DQN's settings on DQN."""
    rainbow = composed("tuned=rainbow", "env=minatar").algo
    for part, value in (
        ("noisy", False),
        ("distributional", None),
        ("dueling", False),
        ("prioritized", False),
    ):
        ablation = composed(
            "algo=rainbow", "tuned=rainbow", "env=minatar", f"algo.{part}={value}".replace("None", "null")
        )
        assert getattr(ablation.algo, part) == value
        for key in ("lr", "optim_eps", "update_every", "target_update_every", "v_max", "n_step"):
            assert getattr(ablation.algo, key) == getattr(rainbow, key), (part, key)
        assert ablation.tuned.name == "rainbow" and ablation.tuned.preset == "minatar"
    c51 = composed("algo=c51", "tuned=rainbow", "env=minatar").algo
    assert (c51.noisy, c51.lr, c51.update_every) == (False, 1e-4, 4)
    dqn = composed("algo=dqn", "tuned=qrdqn", "env=LunarLander-v3").algo
    assert (dqn.distributional, dqn.gamma, dqn.anneal_lr) == (None, 0.995, True)
    # Rainbow's epsilon is 0 (its noisy layers explore): without them the run says nothing would explore
    (note,) = composed("algo=rainbow", "algo.noisy=false").algo.notes()
    assert note.startswith("algo.noisy=false with algo.eps_start=0 and eps_end=0: nothing explores")
    assert not composed("algo=rainbow", "algo.noisy=false", "algo.eps_start=1.0").algo.notes()
    assert not composed("algo=rainbow").algo.notes()


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (
            ["algo=c51", "algo.v_min=5", "algo.v_max=5"],
            "algo.v_min=5.0 and algo.v_max=5.0 do not bound C51's atoms",
        ),
        (["algo=c51", "algo.num_atoms=1"], "algo.num_atoms=1 is out of range; use >= 2"),
        (["algo=qrdqn", "algo.num_quantiles=0"], "algo.num_quantiles=0 is out of range; use >= 1"),
        (
            ["algo=dqn", "algo.distributional=iqn"],
            "algo.distributional='iqn' is unknown; choose one of: c51, qr",
        ),
        (["algo=qrdqn", "algo.loss=mse"], "algo.loss=mse is for Q-values (distributional=null)"),
        (["algo=rainbow", "algo.noisy_sigma0=0"], "algo.noisy_sigma0=0.0 is out of range; use a number > 0"),
        (
            ["algo=sac", "tuned=qrdqn"],
            "tuned=qrdqn holds settings of algo=qrdqn (algo.optim_eps is not a key of the chosen algo); use algo=qrdqn",
        ),
        (
            ["tuned=rainbow", "env=Acrobot-v1"],
            "tuned=rainbow has no settings for env.id='Acrobot-v1'; tuned rainbow presets: env=CartPole-v1, "
            "env=LunarLander-v3, env=minatar",
        ),
    ],
)
def test_bad_distributional_and_noisy_settings_are_one_line(tmp_path, overrides, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", *overrides)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_help_shows_the_presets_keys():
    res = run_cli("algo=rainbow", "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "c51, crossq, ddpg, dqn, ppo, qrdqn, *rainbow" in res.stdout
    for line in ("distributional: c51", "noisy: true", "num_atoms: 51", "v_min: -10.0"):
        assert line in res.stdout, line
    res = run_cli("algo=dqn", "--help")
    for line in ("distributional: null", "noisy: false", "num_quantiles: 200", "anneal_lr: false"):
        assert line in res.stdout, line


# --- whole runs ------------------------------------------------------------------------------------------
SHORT = (*CARTPOLE, "algo.epochs=2", "network.hidden_sizes=[16]", "logger.console=line")


def test_a_noisy_run_with_epsilon_keys_says_once_that_it_does_not_use_them(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "algo=dqn", "algo.noisy=true", *SHORT, "algo.epochs=1")
    assert res.returncode == 0, res.stderr[-2000:]
    note = "algo.noisy=true explores by its noisy layers: epsilon-greedy is off (algo.eps_start=1.0, eps_end=0.05"
    assert res.stdout.count(note) == 1, res.stdout
    progress = __import__("pandas").read_table(tmp_path / "r" / "progress.txt")
    assert progress["Epsilon"].tolist() == [0.0]


@pytest.mark.parametrize("algo", ["rainbow", "qrdqn"])
def test_a_run_is_tested_loaded_and_played(tmp_path, algo):
    run_dir = tmp_path / "run"
    progress = train(run_dir, f"algo={algo}", *SHORT)
    assert {"AverageQVals", "LossQ", "Epsilon", "AverageTestEpRet"} <= set(progress.columns)
    res = run_cli(str(run_dir), "-n", "1", module="rlexp.test_policy")
    assert res.returncode == 0 and "EpRet" in res.stdout, res.stderr[-2000:]
    explores = "noisy-network (greedy under fresh noise)" if algo == "rainbow" else "epsilon-greedy"
    assert f"Using {explores} actions (the default)." in res.stdout
    import rlexp

    policy = rlexp.load(run_dir).policy()
    obs, _ = policy.env.reset(seed=1)
    assert policy(obs) in (0, 1)


@pytest.mark.mpi
@pytest.mark.parametrize(
    "algo,backend", [("rainbow", "torch"), ("rainbow", "tf"), ("qrdqn", "torch"), ("qrdqn", "tf")]
)
def test_n_epochs_then_m_more_equal_n_plus_m_with_2_ranks(tmp_path, algo, backend):
    """Rainbow (prioritized replay, 3-step queues, C51, noise drawn for acting and for every step) and
    QR-DQN, 2 ranks of 2 envs each: a run of 2 epochs continued to 3 ends exactly as a run of 3 (beta over
    a fixed span, so the run may be extended)."""
    args = (
        *CARTPOLE, f"algo={algo}", f"backend={backend}", "env.num_envs=2", "comm.procs=2",
        "comm.oversubscribe=true", "algo.per_beta_steps=1500", "network.hidden_sizes=[32]",
    )  # fmt: skip
    whole, part = tmp_path / "whole", tmp_path / "part"
    progress = train(whole, *args, "algo.epochs=3")
    assert list(progress["TotalEnvInteracts"]) == [500, 1000, 1500]
    train(part, *args, "algo.epochs=2")
    res = run_cli(f"resume={part}", "algo.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"Continuing {part} after 2 epochs" in res.stdout
    assert_same_run(whole, part)
    if algo == "rainbow":
        assert "priorities" in final_state(whole)["loop"]["replay"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rainbow_on_minatar_acts_through_its_noisy_cnn_network_and_resumes_exactly(tmp_path, backend):
    from tests.test_resume import assert_resumes_exactly

    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        "algo=rainbow", "tuned=rainbow", "env=minatar", "env.id=MinAtar/Breakout-v1", f"backend={backend}",
        "algo.epochs=2", "algo.steps_per_epoch=200", "algo.start_steps=100", "algo.update_after=100",
        "algo.num_test_episodes=1", "algo.keep_checkpoints=null", "algo.save_freq=1", "algo.per_beta_steps=400",
    )  # fmt: skip
    progress = train(whole, *args)
    assert list(progress["TotalEnvInteracts"]) == [200, 400]
    assert_resumes_exactly(whole, part, 1)


def test_the_outputs_per_action_of_each_head():
    rainbow = composed("algo=rainbow").algo
    assert rainbow.atoms == 51 and rainbow.support().tolist() == np.linspace(-10, 10, 51).tolist()
    qr = composed("algo=qrdqn").algo
    assert qr.atoms == 200 and qr.support() is None
    assert composed("algo=dqn").algo.atoms == 1


@pytest.mark.slow
def test_rainbow_learns_cartpole(tmp_path):
    """tuned=rainbow (Revisiting Rainbow's CartPole settings: all six parts, atoms on [-200, 200], 512x512)
    reaches a greedy test return of 200+ within 12,000 steps at seed 0 (random play: about 22)."""
    progress = train(
        tmp_path / "run", "algo=rainbow", "tuned=rainbow", "env=CartPole-v1", "algo.epochs=12",
        "algo.num_test_episodes=5", timeout=1800,
    )  # fmt: skip
    assert progress["AverageTestEpRet"].iloc[-5:].max() >= 200, progress["AverageTestEpRet"].round(0).tolist()
