"""DDPG in TensorFlow 2: the same update as rlexp/algos/ddpg/torch.py, one compiled step per update."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.config import RLExpConfig
from rlexp.nn.tf import Adam, DeterministicActor, Net, QFunction


class DDPGLearner(OffPolicyTFLearner):
    """DDPG update; see ``conf/algo/ddpg.yaml``. TD3 extends it with a twin critic."""

    N_CRITICS = 1

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        kw, dims = self.net_kwargs(), (self.obs_dim, self.act_dim)
        self.pi = DeterministicActor(*dims, **kw)
        self.qs = [QFunction(*dims, **kw) for _ in range(self.N_CRITICS)]
        self.sync(self.pi, *self.qs)
        self.pi_targ = self.target(self.pi, DeterministicActor(*dims, **kw))
        self.q_targs = [self.target(q, QFunction(*dims, **kw)) for q in self.qs]
        self.q_params = [v for q in self.qs for v in q.params]
        self.pi_optimizer = Adam(self.pi.params, lr=self.algo.pi_lr)
        self.q_optimizer = Adam(self.q_params, lr=self.algo.q_lr)
        self._update = self.function(self._update_graph)
        self.refresh()

    def refresh(self) -> None:
        self.pi.net.snapshot()

    def modules(self) -> dict[str, Net]:
        names = ["q"] if self.N_CRITICS == 1 else [f"q{i + 1}" for i in range(self.N_CRITICS)]
        return {
            "pi": self.pi,
            **dict(zip(names, self.qs, strict=True)),
            "pi_targ": self.pi_targ,
            **{f"{n}_targ": q for n, q in zip(names, self.q_targs, strict=True)},
        }

    def optimizers(self) -> dict[str, Adam]:
        return {"pi": self.pi_optimizer, "q": self.q_optimizer}

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """mu(obs) in [-1, 1], computed in numpy on the current weights."""
        return self.pi.net.np_forward(np.asarray(obs, dtype=np.float64)).astype(np.float32)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        a = self.act(obs) + self.algo.act_noise * self.rng.standard_normal(self.act_dim)
        return np.clip(a, -1.0, 1.0)

    def q_loss(self, d: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Mean squared Bellman error against the target networks, and the Q values."""
        q = self.qs[0](d["obs"], d["act"])
        q_pi_targ = self.q_targs[0](d["obs2"], self.pi_targ(d["obs2"]))
        backup = tf.stop_gradient(d["rew"] + self.algo.gamma * (1 - d["done"]) * q_pi_targ)
        return tf.reduce_mean(tf.square(q - backup)), {"QVals": q}

    def _update_graph(self, d: dict[str, tf.Tensor], policy_step: bool) -> tuple[tf.Tensor, tf.Tensor, dict]:
        with tf.GradientTape() as tape:
            loss_q, info = self.q_loss(d)
        self.apply(self.q_optimizer, tape.gradient(loss_q, self.q_params))
        loss_pi = tf.constant(0.0)
        if policy_step:
            with tf.GradientTape() as tape:
                loss_pi = -tf.reduce_mean(self.qs[0](d["obs"], self.pi(d["obs"])))
            self.apply(self.pi_optimizer, tape.gradient(loss_pi, self.pi.params))
            self.polyak_update([(self.pi, self.pi_targ), *zip(self.qs, self.q_targs, strict=True)])
        return loss_q, loss_pi, info

    def policy_step(self) -> bool:
        return True

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        policy_step = self.policy_step()
        loss_q, loss_pi, info = self._update(self.tensors(batch), policy_step)
        self.n_updates += 1
        if policy_step:
            self.refresh()
        stats = {"LossQ": float(loss_q), **{k: v.numpy() for k, v in info.items()}}
        return {**stats, "LossPi": float(loss_pi)} if policy_step else stats
