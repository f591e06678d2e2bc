"""PPO-clip in TensorFlow 2: the same update as rlexp/algos/ppo/torch.py, step for step.

Each policy step is one compiled call: gradients and approximate KL averaged in one allreduce, the
Adam step applied only when that KL is within ``1.5 * target_kl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.tf_common import OnPolicyTFLearner
from rlexp.comm.tf import avg_grads
from rlexp.config import RLExpConfig
from rlexp.nn.tf import Adam


class PPOLearner(OnPolicyTFLearner):
    """PPO update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.pi_optimizer = Adam(self.ac.pi_params, lr=self.algo.pi_lr)
        self._pi_info = self.function(self.loss_pi)
        self._pi_step = self.function(self._pi_step_graph)

    def optimizers(self) -> dict[str, Adam]:
        return {**super().optimizers(), "pi": self.pi_optimizer}

    def loss_pi(self, d: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
        """Clipped surrogate loss, approx KL, entropy, fraction clipped."""
        eps = self.algo.clip_ratio
        dist = self.ac.dist(d["obs"])
        logp = self.ac.logp(dist, d["act"])
        ratio = tf.exp(logp - d["logp"])
        adv = d["adv"]
        loss = -tf.reduce_mean(tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1 - eps, 1 + eps) * adv))
        clipped = tf.logical_or(ratio > 1 + eps, ratio < 1 - eps)
        return (
            loss,
            tf.reduce_mean(d["logp"] - logp),
            tf.reduce_mean(self.ac.entropy(dist)),
            tf.reduce_mean(tf.cast(clipped, tf.float32)),
        )

    def _pi_step_graph(self, d: dict[str, tf.Tensor]) -> tf.Tensor:
        """One policy step unless the rank-averaged KL before it exceeds the bound; return that KL."""
        with tf.GradientTape() as tape:
            loss, kl, _, _ = self.loss_pi(d)
        *grads, kl = avg_grads(tape.gradient(loss, self.ac.pi_params), [kl])
        # Compared in float64, as torch compares the KL (a float32 value) with the Python bound.
        if tf.cast(kl, tf.float64) <= 1.5 * self.algo.target_kl:
            self.pi_optimizer.apply(grads)
        return kl

    def update_networks(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        d = self.tensors(batch)
        loss_old, _, ent_old, _ = self._pi_info(d)
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            if float(self._pi_step(d)) > 1.5 * self.algo.target_kl:  # no step was taken
                stop_iter = i
                break
        loss_new, kl_new, _, cf_new = self._pi_info(d)
        v_old, v_new = self.update_v(d)
        return {
            "LossPi": float(loss_old),
            "LossV": v_old,
            "DeltaLossPi": float(loss_new - loss_old),
            "DeltaLossV": v_new - v_old,
            "Entropy": float(ent_old),
            "KL": float(kl_new),
            "ClipFrac": float(cf_new),
            "StopIter": stop_iter,
        }
