"""TD3 in TensorFlow 2: the same update as rlexp/algos/td3/torch.py, one compiled call per gradient step."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.ddpg.tf import DDPGLearner
from rlexp.algos.learner import Batch, Stats
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class TD3Learner(DDPGLearner):
    """TD3 update; see ``conf/algo/td3.yaml`` for the hyperparameters."""

    N_CRITICS = 2

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.policy_delay = self.algo.policy_delay

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        algo = self.algo
        (q1, q2), (q1_targ, q2_targ) = self.qs, self.q_targs
        with tf.GradientTape() as tape:
            q1v, q2v = q1(batch["obs"], batch["act"]), q2(batch["obs"], batch["act"])
            a_targ = self.pi_targ(batch["obs2"])
            # the standard normal draw: pre-drawn in the parity tests
            noise = batch["target_noise"] if "target_noise" in batch else self.gen.normal(tf.shape(a_targ))
            eps = tf.clip_by_value(noise * algo.target_noise, -algo.noise_clip, algo.noise_clip)
            a2 = tf.clip_by_value(a_targ + eps, -1.0, 1.0)
            q_targ = tf.minimum(q1_targ(batch["obs2"], a2), q2_targ(batch["obs2"], a2))
            backup = tf.stop_gradient(batch["rew"] + algo.gamma * (1 - batch["done"]) * q_targ)
            loss_q = tf.reduce_mean(tf.square(q1v - backup)) + tf.reduce_mean(tf.square(q2v - backup))
        self.optimize(self.q_optimizer, tape, loss_q)
        stats = {"LossQ": loss_q, "Q1Vals": q1v, "Q2Vals": q2v}
        if policy_step:
            stats["LossPi"] = self.update_pi(batch["obs"])
        return stats
