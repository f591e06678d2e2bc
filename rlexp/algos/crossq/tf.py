"""CrossQ in TensorFlow 2: the same update as rlexp/algos/crossq/torch.py, one compiled call per
gradient step; acting in numpy with the batch renormalisation folded into the policy's layers."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.sac.tf import SoftActorCritic
from rlexp.comm.tf import average_variables
from rlexp.nn.tf import Adam, Module, QFunction, SquashedGaussianActor, renorm_buffers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class CrossQLearner(SoftActorCritic):
    """CrossQ update; see ``conf/algo/crossq.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, algo = self.net_kwargs(), self.algo
        dims, renorm = (self.obs_dim, self.act_dim), algo.renorm()
        critic_kw = {**kw, "hidden_sizes": algo.critic_hidden_sizes(kw["hidden_sizes"])}
        self.pi = SquashedGaussianActor(*dims, **kw, renorm=renorm)
        self.q1 = QFunction(*dims, **critic_kw, renorm=renorm)
        self.q2 = QFunction(*dims, **critic_kw, renorm=renorm)
        self.sync(self.pi, self.q1, self.q2)
        betas = (algo.adam_beta1, 0.999)
        self.q_optimizer = Adam([*self.q1.parameters(), *self.q2.parameters()], lr=algo.lr, betas=betas)
        self.setup_policy(algo.lr, betas)
        self.policy_delay = algo.policy_delay
        self.running_stats = renorm_buffers(self.pi, self.q1, self.q2)

    def modules(self) -> dict[str, Module]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2}

    def compute_update(self, batch: Batch, policy_step: bool) -> Stats:
        stats = super().compute_update(batch, policy_step)
        average_variables(self.running_stats)  # the ranks' running statistics agree (nothing with one rank)
        return stats

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        alpha = self.current_alpha()
        obs, n = batch["obs"], tf.shape(batch["obs"])[0]
        # the next actions with the policy's running statistics, frozen
        a2, logp_a2 = self.pi(batch["obs2"], self.draws(batch, "noise2"))
        a2, logp_a2 = tf.stop_gradient(a2), tf.stop_gradient(logp_a2)
        both_obs = tf.concat([obs, batch["obs2"]], axis=0)
        both_act = tf.concat([batch["act"], a2], axis=0)
        with tf.GradientTape() as tape:
            q1_both = self.q1(both_obs, both_act, train=True)  # one batch: the same statistics
            q2_both = self.q2(both_obs, both_act, train=True)
            q1, q2 = q1_both[:n], q2_both[:n]
            q_next = tf.minimum(q1_both[n:], q2_both[n:])
            backup = tf.stop_gradient(
                batch["rew"] + self.algo.gamma * (1 - batch["done"]) * (q_next - alpha * logp_a2)
            )
            loss_q = tf.reduce_mean(tf.square(q1 - backup)) + tf.reduce_mean(tf.square(q2 - backup))
        self.optimize(self.q_optimizer, tape, loss_q)
        stats: Stats = {"LossQ": loss_q, "Q1Vals": q1, "Q2Vals": q2}
        if policy_step:  # every policy_delay-th step
            stats.update(
                self.policy_step(
                    obs,
                    self.draws(batch, "noise"),
                    alpha,
                    lambda o, a: tf.minimum(self.q1(o, a), self.q2(o, a)),  # running statistics
                )
            )
        return stats
