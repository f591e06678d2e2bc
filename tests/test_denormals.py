"""Subnormal floats in torch's updates (``backend.flush_denormal``): counted as zero inside a learner's
updates on the CPU, as TensorFlow and XLA count them in every op, and IEEE arithmetic outside them."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.algos.torch_common import denormals_flushed, flushes_denormals
from rlexp.seeding import RankSeeds

from .conftest import composed

OBS = spaces.Box(-1.0, 1.0, (4,), np.float32)
SUBNORMAL = 1e-39  # below float32's smallest normal number, 1.18e-38


def batch(n: int = 8) -> dict:
    rng = np.random.default_rng(0)
    return {
        "obs": rng.normal(size=(n, 4)).astype(np.float32),
        "obs2": rng.normal(size=(n, 4)).astype(np.float32),
        "act": rng.integers(0, 2, n),
        "rew": rng.normal(size=n).astype(np.float32),
        "done": np.zeros(n, np.float32),
        "discount": np.full(n, 0.99, np.float32),
    }


def dqn(flush: bool):
    cfg = composed("algo=dqn", "network.hidden_sizes=[8]", f"backend.flush_denormal={str(flush).lower()}")
    return ALGOS["dqn"].learner_class("torch")(OBS, spaces.Discrete(2), cfg, RankSeeds(0))


def test_tensorflow_counts_subnormals_as_zero_and_numpy_does_not():
    """What the key mirrors: TF's ops flush (eager and compiled); the thread's own arithmetic does not."""
    tiny = tf.constant([SUBNORMAL], tf.float32)
    assert tiny.numpy()[0] > 0  # stored as it is
    one = tf.constant([1.0], tf.float32)
    assert (tiny * one).numpy()[0] == 0
    assert tf.function(lambda x, y: x * y)(tiny, one).numpy()[0] == 0
    assert not flushes_denormals() and np.float32(SUBNORMAL) * np.float32(1.0) > 0


def test_the_block_flushes_and_then_puts_the_thread_back():
    with denormals_flushed(True):
        assert flushes_denormals()
        assert float(torch.tensor([SUBNORMAL]) * 1.0) == 0
        with denormals_flushed(True):  # nested: the outer block still flushes after the inner one
            pass
        assert flushes_denormals()
    assert not flushes_denormals() and float(torch.tensor([SUBNORMAL]) * 1.0) > 0
    with denormals_flushed(False):
        assert not flushes_denormals()
    torch.set_flush_denormal(True)  # a program that flushes on its own keeps flushing
    try:
        with denormals_flushed(True):
            pass
        assert flushes_denormals()
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("flush", [True, False])
def test_adams_moments_of_a_dead_unit_go_to_zero_in_an_update_that_flushes(flush):
    """A ReLU unit that never turns on: its weights' gradients are zero, so Adam's first moment of them
    decays by 0.9 a step. From a subnormal it stays one (slow arithmetic, ~15x slower Adam steps) unless
    the update flushes it to zero; the other moments are the same either way."""
    lrn = dqn(flush)
    lrn.update(batch())  # Adam's state exists from here
    first = next(m for m in lrn.q.modules() if isinstance(m, torch.nn.Linear))
    with torch.no_grad():
        first.weight[0].zero_()
        first.bias[0] = -1e3  # unit 0 is off for every observation
    exp_avg = lrn.optimizer.state[lrn.q_flat]["exp_avg"]
    dead = slice(0, 4)  # the flat parameter starts with the first layer's weights: unit 0's row
    exp_avg[dead] = SUBNORMAL
    lrn.update(batch())
    assert lrn.q_flat.grad[dead].abs().max() == 0  # the unit is dead
    moments = exp_avg[dead].numpy()
    if flush:
        assert (moments == 0).all()
    else:
        np.testing.assert_allclose(moments, 0.9 * SUBNORMAL, rtol=1e-3)
    assert not flushes_denormals()  # the thread is as it was after the update


def test_updates_and_bursts_of_both_families_run_flushed(monkeypatch):
    seen: list[bool] = []
    lrn = dqn(True)
    update = type(lrn).update_networks
    monkeypatch.setattr(
        type(lrn),
        "update_networks",
        lambda self, b, p: (seen.append(flushes_denormals()), update(self, b, p))[1],
    )
    lrn.update(batch())
    lrn.update_burst(batch, 3)
    assert seen == [True] * 4 and not flushes_denormals()
    cfg = composed("algo=ppo", "network.hidden_sizes=[8]", "algo.train_pi_iters=1", "algo.train_v_iters=1")
    ppo = ALGOS["ppo"].learner_class("torch")(OBS, spaces.Discrete(2), cfg, RankSeeds(0))
    inside: list[bool] = []
    ppo_update = type(ppo).update_networks
    monkeypatch.setattr(
        type(ppo),
        "update_networks",
        lambda self, b: (inside.append(flushes_denormals()), ppo_update(self, b))[1],
    )
    n = 8
    rng = np.random.default_rng(0)
    ppo.update(
        {
            "obs": rng.normal(size=(n, 4)).astype(np.float32),
            "act": rng.integers(0, 2, n),
            "adv": rng.normal(size=n).astype(np.float32),
            "ret": rng.normal(size=n).astype(np.float32),
            "logp": np.full(n, -0.7, np.float32),
            "val": np.zeros(n, np.float32),
        }
    )
    assert inside == [True] and not flushes_denormals()


def test_a_torch_run_from_before_flush_denormal_keeps_ieee_arithmetic(tmp_path):
    """The key changes numbers: a run recorded before it existed continues without it."""
    import yaml

    from rlexp.config import load_run_config, to_container

    run = tmp_path / "old"
    run.mkdir()
    saved = to_container(composed("algo=sac"))
    assert saved["backend"]["flush_denormal"] is True  # the default of a new run
    del saved["backend"]["flush_denormal"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_run_config(run).backend.flush_denormal is False
