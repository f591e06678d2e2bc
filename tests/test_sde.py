"""gSDE, generalized state-dependent exploration (``algo.use_sde``, issue 29): the noise is the policy's
latent features times a matrix held per env, its log-probability the frameworks' on both backends, the
loop's schedule of new matrices, parity, exact resume and the one-line errors."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import tensorflow as tf
import torch

from rlexp.algos.learner import OnPolicyLearner
from rlexp.nn import SDE_EPS
from tests.conftest import run_cli, train
from tests.test_parity import BOX, assert_same_params, assert_same_stats, on_policy_batch, pair
from tests.test_resume import assert_resumes_exactly

SDE = ("algo.use_sde=true", "env.num_envs=2")


def latent_and_mean(lrn, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The policy's latent features (its last hidden layer) and mean, from the backend's own network."""
    pi = lrn.ac.pi
    if isinstance(pi, torch.nn.Module):
        with torch.no_grad():
            latent = pi.latent(pi.encoder(torch.as_tensor(obs)))
            return latent.numpy(), pi.mu_net[-2](latent).numpy()
    latent = pi.latent(pi.encode(tf.constant(obs)))
    return latent.numpy(), pi.mu_net.layers[-1](latent).numpy()


def log_prob(lrn, obs: np.ndarray, act: np.ndarray) -> np.ndarray:
    if isinstance(lrn.ac.pi, torch.nn.Module):
        with torch.no_grad():
            return lrn.ac.pi(torch.as_tensor(obs), torch.as_tensor(act))[1].numpy()
    return lrn.ac.pi(tf.constant(obs), tf.constant(act))[1].numpy()


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_gsde_acts_with_the_mean_plus_the_latent_times_each_envs_held_matrix(backend):
    t, f = pair("ppo", BOX, *SDE, "algo.log_std_init=-0.7")
    lrn = t if backend == "torch" else f
    log_std = lrn.acting.sde.read_log_std()
    assert log_std.shape == (32, 3)  # (the last hidden layer, the action) and its initial value
    np.testing.assert_allclose(log_std, -0.7, rtol=1e-6)
    rng_before = copy.deepcopy(lrn.rng.bit_generator.state)
    lrn.resample_noise()
    # one matrix per env, drawn from N(0, exp(log_std)^2) with the acting generator
    replay = np.random.default_rng()
    replay.bit_generator.state = rng_before
    matrices = lrn.acting.sde.matrices
    np.testing.assert_allclose(matrices, np.exp(log_std) * replay.standard_normal((2, 32, 3)), rtol=1e-6)

    obs = np.random.default_rng(4).uniform(-1, 1, (12, 5)).astype(np.float32)
    latent, mean = latent_and_mean(lrn, obs)
    for env in (0, 1):
        steps = [lrn.step(o, env) for o in obs]
        acts = np.stack([s[0] for s in steps])
        # the noise is a function of the state: the latent features times this env's matrix
        np.testing.assert_allclose(acts, mean + latent @ matrices[env], rtol=1e-4, atol=1e-5)
        # given the state, the action is Gaussian with variance latent^2 @ exp(log_std)^2 + eps: the
        # framework's log-probability of it is the one acting recorded
        np.testing.assert_allclose([s[2] for s in steps], log_prob(lrn, obs, acts), rtol=1e-5, atol=1e-4)
        variance = latent.astype(np.float64) ** 2 @ np.exp(2 * log_std.astype(np.float64)) + SDE_EPS
        mine = -0.5 * (acts - mean) ** 2 / variance - 0.5 * np.log(2 * np.pi * variance)
        np.testing.assert_allclose(mine.sum(-1), [s[2] for s in steps], rtol=1e-4, atol=1e-4)
    # held until the next draw: the same state gives the same action; the next draw changes it
    assert np.array_equal(lrn.step(obs[0], 0)[0], lrn.step(obs[0], 0)[0])
    before = lrn.step(obs[0], 0)[0]
    lrn.resample_noise()
    assert not np.allclose(lrn.step(obs[0], 0)[0], before)
    # deterministic: the mean; a stochastic act() outside the envs draws a fresh matrix each call
    np.testing.assert_allclose(lrn.act(obs[0], deterministic=True), mean[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(lrn.act(obs[0]), lrn.act(obs[0]))


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_gsde_with_a_cnn_encoder_acts_through_the_framework_with_its_log_probabilities(backend):
    from tests.test_images import BOX as IMAGE_BOX
    from tests.test_images import image_learner, images

    lrn = image_learner("ppo", backend, IMAGE_BOX, "algo.use_sde=true")
    assert lrn.acting.sde.read_log_std().shape == (16, 2)  # hidden_sizes [16] after the CNN
    lrn.resample_noise()
    obs = images(6)
    latent, mean = latent_and_mean(lrn, obs)
    steps = [lrn.step(o, 0) for o in obs]
    acts = np.stack([s[0] for s in steps])
    np.testing.assert_allclose(acts, mean + latent @ lrn.acting.sde.matrices[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose([s[2] for s in steps], log_prob(lrn, obs, acts), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(lrn.act(obs[0], deterministic=True), mean[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "algo,overrides",
    [
        ("vpg", []),
        ("ppo", ["algo.target_kl=0.002", "algo.pi_lr=1e-3"]),
        ("ppo", ["algo.num_minibatches=4", "algo.update_epochs=2", "algo.ent_coef=0.01"]),
        # TRPO's conjugate gradient amplifies float32 rounding more as the stds shrink (measured: the
        # statistics agree to 2e-6 at log_std_init 0, 3e-3 at -0.5, 2e-2 at -1)
        ("trpo", ["algo.log_std_init=0.0"]),
    ],
    ids=["vpg", "ppo", "ppo-minibatch-entropy", "trpo"],
)
def test_gsde_update_parity(algo, overrides):
    t, f = pair(algo, BOX, *SDE, "algo.train_v_iters=5", "algo.log_std_init=-1.0", *overrides)
    t.resample_noise()
    batch = on_policy_batch(t, BOX)
    before = t.ac.pi.log_std.detach().clone()
    st, sf = t.update(batch), f.update(batch)
    assert_same_stats(st, sf)
    assert_same_params(t, f)
    assert not torch.equal(t.ac.pi.log_std, before)  # the matrix of log stds learns


@pytest.mark.parametrize("freq,draws", [(4, 2 * 5), (-1, 2 * 1)], ids=["every-4-steps", "once-per-epoch"])
def test_the_loop_draws_new_matrices_at_each_epoch_start_and_every_sde_sample_freq_steps(
    tmp_path, monkeypatch, freq, draws
):
    """2 epochs of 20 steps per env (2 envs): at steps 0, 4, 8, 12, 16 of each env, or at step 0 only."""
    import rlexp

    calls = []
    original = OnPolicyLearner.resample_noise

    def counted(self) -> None:
        calls.append(1)
        original(self)

    monkeypatch.setattr(OnPolicyLearner, "resample_noise", counted)
    run = rlexp.train(
        ["algo=ppo", "env=Pendulum-v1", *SDE, f"algo.sde_sample_freq={freq}", "algo.steps_per_epoch=40",
         "algo.epochs=2", "algo.train_pi_iters=2", "algo.train_v_iters=2"],
        tmp_path / "run",
    )  # fmt: skip
    assert run.finished and len(calls) == draws


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_gsde_runs_resume_exactly(tmp_path, backend):
    """The matrices are drawn at each epoch's start from the checkpointed acting generator: N then M
    epochs equal N + M (recurrent, several envs, matrices drawn mid-epoch too)."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        "algo=ppo", "env=PendulumNoVel-v1", f"backend={backend}", *SDE, "algo.sde_sample_freq=8",
        "network.recurrent=lstm", "network.recurrent_size=8", "network.hidden_sizes=[16]", "network.seq_len=16",
        "algo.num_minibatches=2", "algo.update_epochs=2", "algo.steps_per_epoch=200", "algo.epochs=3",
        "algo.save_freq=1",
    )  # fmt: skip
    train(whole, *args)
    assert_resumes_exactly(whole, part, 1)


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (
            ["env=CartPole-v1", "algo.use_sde=true"],
            "algo.use_sde=true needs a Box action space, but CartPole-v1",
        ),
        (
            ["env=Pendulum-v1", "algo.use_sde=true", "algo.sde_sample_freq=0"],
            "algo.sde_sample_freq=0 is out of range",
        ),
    ],
    ids=["discrete", "freq"],
)
def test_bad_gsde_settings_are_one_line(tmp_path, overrides, fragment):
    res = run_cli("algo=ppo", *overrides, f"hydra.run.dir={tmp_path / 'run'}")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert fragment in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "run").exists()
