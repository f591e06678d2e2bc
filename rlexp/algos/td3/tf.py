"""TD3 in TensorFlow 2: the same update as rlexp/algos/td3/torch.py, one compiled step per update."""

from __future__ import annotations

import tensorflow as tf

from rlexp.algos.ddpg.tf import DDPGLearner


class TD3Learner(DDPGLearner):
    """TD3 update; see ``conf/algo/td3.yaml`` for the hyperparameters."""

    N_CRITICS = 2

    def policy_step(self) -> bool:
        return self.n_updates % self.algo.policy_delay == 0

    def q_loss(self, d: dict[str, tf.Tensor]) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        algo = self.algo
        (q1, q2), (q1_targ, q2_targ) = self.qs, self.q_targs
        q1v, q2v = q1(d["obs"], d["act"]), q2(d["obs"], d["act"])
        a_targ = self.pi_targ(d["obs2"])
        noise = d["target_noise"] if "target_noise" in d else self.gen.normal(tf.shape(a_targ))
        eps = tf.clip_by_value(noise * algo.target_noise, -algo.noise_clip, algo.noise_clip)
        a2 = tf.clip_by_value(a_targ + eps, -1.0, 1.0)
        q_targ = tf.minimum(q1_targ(d["obs2"], a2), q2_targ(d["obs2"], a2))
        backup = tf.stop_gradient(d["rew"] + algo.gamma * (1 - d["done"]) * q_targ)
        loss = tf.reduce_mean(tf.square(q1v - backup)) + tf.reduce_mean(tf.square(q2v - backup))
        return loss, {"Q1Vals": q1v, "Q2Vals": q2v}
