"""PPO-clip in TensorFlow 2: the same update as rlexp/algos/ppo/torch.py, step for step.

Each policy step is one compiled call: gradients and approximate KL averaged in one allreduce, the
Adam step applied only when that KL is within ``1.5 * target_kl``.
"""

from __future__ import annotations

import tensorflow as tf

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.vpg.tf import VPGLearner
from rlexp.comm.tf import avg_grads


class PPOLearner(VPGLearner):
    """PPO-clip update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def loss_pi(self, batch: Batch) -> tuple[tf.Tensor, ...]:
        """Clipped surrogate loss, approx KL, entropy, fraction clipped."""
        eps = self.algo.clip_ratio
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        ratio = tf.exp(logp - batch["logp"])
        adv = batch["adv"]
        loss = -tf.reduce_mean(tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1 - eps, 1 + eps) * adv))
        clipped = tf.logical_or(ratio > 1 + eps, ratio < 1 - eps)
        return (
            loss,
            tf.reduce_mean(batch["logp"] - logp),
            tf.reduce_mean(self.ac.pi.entropy(pi)),
            tf.reduce_mean(tf.cast(clipped, tf.float32)),
        )

    def _pi_step_graph(self, batch: Batch) -> tf.Tensor:  # type: ignore[override]
        """One policy step unless the rank-averaged KL before it exceeds the bound; return that KL."""
        with tf.GradientTape() as tape:
            loss, kl, _, _ = self.loss_pi(batch)
        *grads, kl = avg_grads(tape.gradient(loss, self.pi_optimizer.params), [kl])
        # Compared in float64, as torch compares the KL (a float32 value) with the Python bound.
        if tf.cast(kl, tf.float64) <= 1.5 * self.algo.target_kl:
            self.pi_optimizer.apply(grads)
        return kl

    def update_networks(self, batch: Batch) -> Stats:
        loss_old, _, ent_old, _ = self._pi_info(batch)
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            if float(self._pi_step(batch)) > 1.5 * self.algo.target_kl:  # no step was taken
                stop_iter = i
                break
        return self.epoch_stats(batch, loss_old, ent_old, StopIter=stop_iter)
