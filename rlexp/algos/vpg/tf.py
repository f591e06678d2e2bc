"""Vanilla policy gradient in TensorFlow 2: the same update as rlexp/algos/vpg/torch.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.tf_common import OnPolicyTFLearner
from rlexp.config import RLExpConfig
from rlexp.nn.tf import Adam


class VPGLearner(OnPolicyTFLearner):
    """VPG update; see ``conf/algo/vpg.yaml`` for the hyperparameters."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.pi_optimizer = Adam(self.ac.pi_params, lr=self.algo.pi_lr)
        self._pi_info = self.function(self.loss_pi)
        self._pi_step = self.function(self._pi_step_graph)

    def optimizers(self) -> dict[str, Adam]:
        return {**super().optimizers(), "pi": self.pi_optimizer}

    def loss_pi(self, d: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Policy-gradient loss, approx KL to the data's policy, entropy."""
        dist = self.ac.dist(d["obs"])
        logp = self.ac.logp(dist, d["act"])
        return (
            -tf.reduce_mean(logp * d["adv"]),
            tf.reduce_mean(d["logp"] - logp),
            tf.reduce_mean(self.ac.entropy(dist)),
        )

    def _pi_step_graph(self, d: dict[str, tf.Tensor]) -> None:
        with tf.GradientTape() as tape:
            loss, _, _ = self.loss_pi(d)
        self.apply(self.pi_optimizer, tape.gradient(loss, self.ac.pi_params))

    def update_networks(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        d = self.tensors(batch)
        loss_old, _, ent_old = self._pi_info(d)
        self._pi_step(d)
        loss_new, kl_new, _ = self._pi_info(d)
        v_old, v_new = self.update_v(d)
        return {
            "LossPi": float(loss_old),
            "LossV": v_old,
            "DeltaLossPi": float(loss_new - loss_old),
            "DeltaLossV": v_new - v_old,
            "Entropy": float(ent_old),
            "KL": float(kl_new),
        }
