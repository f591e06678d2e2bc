"""PPO-clip in TensorFlow 2: the same update as rlexp/algos/ppo/torch.py, step for step."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp import comm
from rlexp.algos.tf_common import OnPolicyTFLearner
from rlexp.config import RLExpConfig
from rlexp.nn.tf import Adam


class PPOLearner(OnPolicyTFLearner):
    """PPO update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.pi_optimizer = Adam(self.ac.pi_params, lr=self.algo.pi_lr)
        self._pi_info = self.function(self.loss_pi)
        self._pi_grads = self.function(self._pi_grads_graph)
        self._pi_apply = self.function(lambda grads: self.apply(self.pi_optimizer, grads))

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

    def _pi_grads_graph(self, d: dict[str, tf.Tensor]) -> tuple[tf.Tensor, list[tf.Tensor]]:
        with tf.GradientTape() as tape:
            loss, kl, _, _ = self.loss_pi(d)
        return kl, tape.gradient(loss, self.ac.pi_params)

    def update_networks(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        d = self.tensors(batch)
        loss_old, _, ent_old, _ = self._pi_info(d)
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            kl, grads = self._pi_grads(d)
            if comm.mpi_avg(float(kl)) > 1.5 * self.algo.target_kl:
                stop_iter = i
                break
            self._pi_apply(grads)
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
