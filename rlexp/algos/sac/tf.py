"""SAC in TensorFlow 2: the same update as rlexp/algos/sac/torch.py, one compiled call per gradient step."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.nn.acting import MLPCopy, SquashedGaussianActing
from rlexp.nn.tf import Adam, Module, QFunction, SquashedGaussianActor, TFForward, linear_layers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class SACLearner(OffPolicyTFLearner):
    """SAC update; see ``conf/algo/sac.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, dims = self.net_kwargs(), (self.obs_dim, self.act_dim)
        self.pi = SquashedGaussianActor(*dims, **kw)
        self.q1, self.q2 = QFunction(*dims, **kw), QFunction(*dims, **kw)
        self.sync(self.pi, self.q1, self.q2)
        self.q1_targ = self.target(self.q1, QFunction(*dims, **kw))
        self.q2_targ = self.target(self.q2, QFunction(*dims, **kw))
        lr = self.algo.lr
        self.pi_optimizer = Adam(self.pi.parameters(), lr=lr)
        self.q_optimizer = Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.log_alpha = tf.Variable(float(np.log(max(self.algo.alpha, 1e-30))), dtype=tf.float32)
        te = self.algo.target_entropy
        self.target_entropy = -float(self.act_dim) if te is None else te
        self.alpha_optimizer = Adam([self.log_alpha], lr=lr) if self.algo.autotune_alpha else None
        activation = cfg.network.activation
        self.actor: SquashedGaussianActing | TFForward = (
            SquashedGaussianActing(
                MLPCopy(lambda: linear_layers(self.pi.net), activation, activation), self.pi.heads
            )
            if self.image is None
            else TFForward(self.function(lambda o, noise: self.pi(o, noise)[0]))  # a CNN acts through TF
        )

    def modules(self) -> dict[str, Module]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2, "q1_targ": self.q1_targ, "q2_targ": self.q2_targ}

    def optimizers(self) -> dict[str, Adam]:
        opts = {"pi": self.pi_optimizer, "q": self.q_optimizer}
        return opts if self.alpha_optimizer is None else {**opts, "alpha": self.alpha_optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "log_alpha": self.log_alpha.numpy()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.log_alpha.assign(state["log_alpha"])

    def refresh(self) -> None:
        self.actor.refresh()

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """tanh(mu(obs)) when deterministic, else a sample; in numpy on a copy of the weights (through
        TF for a CNN)."""
        noise = None if deterministic else self.rng.standard_normal(self.act_dim)
        return np.asarray(self.actor(obs, noise), np.float32)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """A sample of the policy."""
        return self.act(obs, deterministic=False)

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        alpha = tf.exp(self.log_alpha) if self.alpha_optimizer is not None else tf.constant(self.algo.alpha)
        shape = (tf.shape(batch["obs"])[0], self.act_dim)
        with tf.GradientTape() as tape:
            q1, q2 = self.q1(batch["obs"], batch["act"]), self.q2(batch["obs"], batch["act"])
            # the standard normal draws ``noise2`` and ``noise``: pre-drawn in the parity tests
            a2, logp_a2 = self.pi(
                batch["obs2"], batch["noise2"] if "noise2" in batch else self.gen.normal(shape)
            )
            q_targ = tf.minimum(self.q1_targ(batch["obs2"], a2), self.q2_targ(batch["obs2"], a2))
            backup = tf.stop_gradient(
                batch["rew"] + self.algo.gamma * (1 - batch["done"]) * (q_targ - alpha * logp_a2)
            )
            loss_q = tf.reduce_mean(tf.square(q1 - backup)) + tf.reduce_mean(tf.square(q2 - backup))
        self.optimize(self.q_optimizer, tape, loss_q)
        stats: Stats = {"LossQ": loss_q, "Q1Vals": q1, "Q2Vals": q2}
        if policy_step:  # always: SAC has no policy delay
            with tf.GradientTape() as tape:  # gradients of the policy only: the critics stay as they are
                a, logp = self.pi(
                    batch["obs"], batch["noise"] if "noise" in batch else self.gen.normal(shape)
                )
                loss_pi = tf.reduce_mean(
                    alpha * logp - tf.minimum(self.q1(batch["obs"], a), self.q2(batch["obs"], a))
                )
            self.optimize(self.pi_optimizer, tape, loss_pi)
            stats.update(LogPi=logp, LossPi=loss_pi)
            if self.alpha_optimizer is not None:
                with tf.GradientTape() as tape:
                    loss_alpha = -tf.reduce_mean(
                        self.log_alpha * (tf.stop_gradient(logp) + self.target_entropy)
                    )
                self.optimize(self.alpha_optimizer, tape, loss_alpha)
                stats.update(Alpha=alpha, LossAlpha=loss_alpha)
            self.polyak_update([(self.q1, self.q1_targ), (self.q2, self.q2_targ)])
        return stats
