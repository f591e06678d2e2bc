"""TQC in TensorFlow 2: the same update as rlexp/algos/tqc/torch.py, one compiled call per gradient step."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.sac.tf import SoftActorCritic
from rlexp.nn.tf import Adam, Module, QuantileCritics, SquashedGaussianActor, quantile_huber_loss
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class TQCLearner(SoftActorCritic):
    """TQC update; see ``conf/algo/tqc.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, algo = self.net_kwargs(), self.algo
        dims = (self.obs_dim, self.act_dim)
        self.pi = SquashedGaussianActor(*dims, **kw)

        def critics() -> QuantileCritics:
            return QuantileCritics(
                *dims,
                kw["hidden_sizes"],
                kw["activation"],
                algo.n_critics,
                algo.n_quantiles,
                kw["rng"],
                kw["image"],
            )

        self.critics = critics()
        self.sync(self.pi, self.critics)
        self.critics_targ = self.target(self.critics, critics())
        self.q_optimizer = Adam(self.critics.parameters(), lr=algo.lr)
        self.setup_policy(algo.lr)
        self.kept = algo.kept_atoms()

    def modules(self) -> dict[str, Module]:
        return {"pi": self.pi, "critics": self.critics, "critics_targ": self.critics_targ}

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        alpha = self.current_alpha()
        with tf.GradientTape() as tape:
            quantiles = self.critics(batch["obs"], batch["act"])  # (batch, n_critics, n_quantiles)
            a2, logp_a2 = self.pi(batch["obs2"], self.draws(batch, "noise2"))
            atoms = self.critics_targ(batch["obs2"], a2)
            atoms = tf.reshape(atoms, [tf.shape(atoms)[0], -1])  # all critics' atoms pooled
            kept = tf.sort(atoms, axis=1)[:, : self.kept]  # the largest dropped
            target = tf.stop_gradient(
                batch["rew"][:, None]
                + self.algo.gamma * (1 - batch["done"][:, None]) * (kept - alpha * logp_a2[:, None])
            )
            loss_q = quantile_huber_loss(quantiles, target[:, None, :])
        self.optimize(self.q_optimizer, tape, loss_q)
        stats: Stats = {"LossQ": loss_q, "QVals": tf.reduce_mean(quantiles, axis=(1, 2))}
        if policy_step:  # always: TQC has no policy delay
            stats.update(
                self.policy_step(
                    batch["obs"],
                    self.draws(batch, "noise"),
                    alpha,
                    lambda o, a: tf.reduce_mean(self.critics(o, a), axis=(1, 2)),
                )
            )
            self.polyak_update([(self.critics, self.critics_targ)])
        return stats
