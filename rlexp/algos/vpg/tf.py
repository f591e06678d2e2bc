"""Vanilla policy gradient in TensorFlow 2: the same update as rlexp/algos/vpg/torch.py."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.tf_common import OnPolicyTFLearner
from rlexp.nn.tf import Adam
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class VPGLearner(OnPolicyTFLearner):
    """VPG update; see ``conf/algo/vpg.yaml`` for the hyperparameters. PPO extends it."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.pi_optimizer = Adam(self.ac.pi.parameters(), lr=self.algo.pi_lr, eps=self.algo.adam_eps)
        self._pi_info = self.function(self.loss_pi)
        self._pi_step = self.function(self._pi_step_graph)

    def optimizers(self) -> dict[str, Adam]:
        return {**super().optimizers(), "pi": self.pi_optimizer}

    def loss_pi(self, batch: Batch) -> tuple[tf.Tensor, ...]:
        """Policy-gradient loss, approx KL to the batch's policy, entropy."""
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        return (
            -tf.reduce_mean(logp * batch["adv"]),
            tf.reduce_mean(batch["logp"] - logp),
            tf.reduce_mean(self.ac.pi.entropy(pi)),
        )

    def _pi_step_graph(self, batch: Batch) -> None:
        with tf.GradientTape() as tape:
            loss = self.loss_pi(batch)[0]
        self.optimize(self.pi_optimizer, tape, loss)

    def update_networks(self, batch: Batch) -> Stats:
        loss_old, _, ent_old = self._pi_info(batch)
        self._pi_step(batch)
        return self.epoch_stats(batch, loss_old, ent_old)

    def epoch_stats(self, batch: Batch, loss_old: tf.Tensor, ent_old: tf.Tensor, **more: float) -> Stats:
        """The statistics of an epoch whose policy steps are taken, after its value update (run here).

        ``loss_old`` and ``ent_old``: the policy loss and entropy before the steps. Logged: those, the
        change of the loss, the KL (and PPO's clip fraction) of the policy reached; ``more``: further
        statistics.
        """
        loss_new, kl_new, _, *clip_fraction = self._pi_info(batch)
        if clip_fraction:
            more = {"ClipFrac": float(clip_fraction[0]), **more}
        return on_policy_stats(
            (float(loss_old), float(loss_new)),
            self.update_v(batch),
            Entropy=float(ent_old),
            KL=float(kl_new),
            **more,
        )
