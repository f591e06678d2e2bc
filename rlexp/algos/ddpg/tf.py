"""DDPG in TensorFlow 2: the same update as rlexp/algos/ddpg/torch.py, one compiled call per gradient step."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.nn.acting import Forward, MLPCopy
from rlexp.nn.tf import Adam, DeterministicActor, Module, QFunction, TFForward, linear_layers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DDPGLearner(OffPolicyTFLearner):
    """DDPG update; see ``conf/algo/ddpg.yaml`` for the hyperparameters. TD3 extends it with a
    second critic (``N_CRITICS``)."""

    N_CRITICS = 1

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, dims = self.net_kwargs(), (self.obs_dim, self.act_dim)
        self.pi = DeterministicActor(*dims, **kw)
        self.qs = [QFunction(*dims, **kw) for _ in range(self.N_CRITICS)]
        self.sync(self.pi, *self.qs)
        self.pi_targ = self.target(self.pi, DeterministicActor(*dims, **kw))
        self.q_targs = [self.target(q, QFunction(*dims, **kw)) for q in self.qs]
        self.pi_optimizer = Adam(self.pi.parameters(), lr=self.algo.pi_lr)
        self.q_optimizer = Adam([v for q in self.qs for v in q.parameters()], lr=self.algo.q_lr)
        self.actor: Forward = (
            MLPCopy(lambda: linear_layers(self.pi.pi), cfg.network.activation, "tanh")
            if self.image is None
            else TFForward(self.function(self.pi))  # a CNN acts through TF
        )

    def modules(self) -> dict[str, Module]:
        names = ["q"] if self.N_CRITICS == 1 else [f"q{i + 1}" for i in range(self.N_CRITICS)]
        return {
            "pi": self.pi,
            **dict(zip(names, self.qs, strict=True)),
            "pi_targ": self.pi_targ,
            **{f"{n}_targ": q for n, q in zip(names, self.q_targs, strict=True)},
        }

    def optimizers(self) -> dict[str, Adam]:
        return {"pi": self.pi_optimizer, "q": self.q_optimizer}

    def refresh(self) -> None:
        self.actor.refresh()

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """mu(obs) in [-1, 1] (the policy is deterministic either way), in numpy on a copy of the weights
        (through TF for a CNN)."""
        return self.actor(np.asarray(obs, dtype=np.float64)).astype(np.float32)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """mu(obs) plus Gaussian noise of std act_noise, clipped to [-1, 1]."""
        return np.clip(
            self.act(obs) + self.algo.act_noise * self.rng.standard_normal(self.act_dim), -1.0, 1.0
        )

    def update_pi(self, obs: tf.Tensor) -> tf.Tensor:
        """One policy step on -mean(Q1(s, mu(s))) (gradients of the policy only), then the polyak update."""
        with tf.GradientTape() as tape:
            loss_pi = -tf.reduce_mean(self.qs[0](obs, self.pi(obs)))
        self.optimize(self.pi_optimizer, tape, loss_pi)
        self.polyak_update([(self.pi, self.pi_targ), *zip(self.qs, self.q_targs, strict=True)])
        return loss_pi

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        with tf.GradientTape() as tape:
            q = self.qs[0](batch["obs"], batch["act"])
            q_pi_targ = self.q_targs[0](batch["obs2"], self.pi_targ(batch["obs2"]))
            backup = tf.stop_gradient(batch["rew"] + self.algo.gamma * (1 - batch["done"]) * q_pi_targ)
            loss_q = tf.reduce_mean(tf.square(q - backup))
        self.optimize(self.q_optimizer, tape, loss_q)
        stats = {"LossQ": loss_q, "QVals": q}
        if policy_step:  # always: DDPG has no policy delay
            stats["LossPi"] = self.update_pi(batch["obs"])
        return stats
