"""SAC in TensorFlow 2: the same update as rlexp/algos/sac/torch.py, one compiled call per gradient step,
and what TQC and CrossQ share with it (:class:`SoftActorCritic`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.nn.acting import MLPCopy, SharedRead, SquashedGaussianActing
from rlexp.nn.tf import Adam, Module, QFunction, SquashedGaussianActor, TFForward
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class SoftActorCritic(OffPolicyTFLearner):
    """What SAC, TQC and CrossQ share in TensorFlow (rlexp/algos/sac/torch.py's twin): the squashed
    Gaussian policy ``pi`` with its Adam, the entropy coefficient alpha (fixed, or learned with its own
    Adam), acting in numpy on a copy of the policy's weights (through TF for a CNN), and the policy step
    followed by the alpha step.

    A subclass builds ``pi`` and its critics, sets :attr:`q_optimizer` and calls :meth:`setup_policy`.
    """

    pi: SquashedGaussianActor
    q_optimizer: Adam

    def setup_policy(self, lr: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        """The policy's Adam (``betas``: CrossQ's beta1 is 0.5), alpha (constant, or learned from
        ``algo.alpha`` with Adam at ``lr``) and the numpy acting copy of the policy."""
        self.pi_optimizer = Adam(self.pi.parameters(), lr=lr, betas=betas)
        self.log_alpha = tf.Variable(float(np.log(max(self.algo.alpha, 1e-30))), dtype=tf.float32)
        te = self.algo.target_entropy
        self.target_entropy = -float(self.act_dim) if te is None else te
        self.alpha_optimizer = Adam([self.log_alpha], lr=lr) if self.algo.autotune_alpha else None
        activation = self.cfg.network.activation
        # the trunk's and the heads' weights read together after each update (one call; CrossQ's folded)
        self.pi_read = SharedRead(self.pi.acting_layers, [self.pi.n_hidden, 2])
        trunk, heads = self.pi_read.part(0), self.pi_read.part(1)
        self.actor: SquashedGaussianActing | TFForward = (
            SquashedGaussianActing(MLPCopy(trunk, activation, activation), heads)
            if self.image is None
            else TFForward(self.function(lambda o, noise: self.pi(o, noise)[0]))  # a CNN acts through TF
        )

    def optimizers(self) -> dict[str, Adam]:
        opts = {"pi": self.pi_optimizer, "q": self.q_optimizer}
        return opts if self.alpha_optimizer is None else {**opts, "alpha": self.alpha_optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "log_alpha": self.log_alpha.numpy()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.log_alpha.assign(state["log_alpha"])

    def refresh(self) -> None:
        self.pi_read.refresh()
        self.actor.refresh()

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """tanh(mu(obs)) when deterministic, else a sample; in numpy on a copy of the weights (through
        TF for a CNN)."""
        noise = None if deterministic else self.rng.standard_normal(self.act_dim)
        return np.asarray(self.actor(obs, noise), np.float32)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """A sample of the policy."""
        return self.act(obs, deterministic=False)

    def current_alpha(self) -> tf.Tensor:
        """alpha inside a compiled step: exp(log alpha), or the constant ``algo.alpha``."""
        return tf.exp(self.log_alpha) if self.alpha_optimizer is not None else tf.constant(self.algo.alpha)

    def draws(self, batch: Batch, key: str) -> tf.Tensor:
        """The standard normal draws of the policy's actions: ``batch[key]`` when given (the parity tests
        pre-draw ``noise`` and ``noise2``), else fresh ones from the ``learner`` stream."""
        return batch[key] if key in batch else self.gen.normal((tf.shape(batch["obs"])[0], self.act_dim))

    def policy_step(
        self, obs: tf.Tensor, noise: tf.Tensor, alpha: tf.Tensor, q_pi: Callable[..., tf.Tensor]
    ) -> Stats:
        """One Adam step of the policy on ``mean(alpha log pi(a~|s) - q_pi(s, a~))`` (gradients of the
        policy only; a CrossQ policy normalises with this batch's statistics), then with
        ``autotune_alpha`` one step of alpha."""
        with tf.GradientTape() as tape:
            a, logp = self.pi(obs, noise, train=True)
            loss_pi = tf.reduce_mean(alpha * logp - q_pi(obs, a))
        self.optimize(self.pi_optimizer, tape, loss_pi)
        stats: Stats = {"LogPi": logp, "LossPi": loss_pi}
        if self.alpha_optimizer is not None:
            with tf.GradientTape() as tape:
                loss_alpha = -tf.reduce_mean(self.log_alpha * (tf.stop_gradient(logp) + self.target_entropy))
            self.optimize(self.alpha_optimizer, tape, loss_alpha)
            stats.update(Alpha=alpha, LossAlpha=loss_alpha)
        return stats


class SACLearner(SoftActorCritic):
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
        self.q_optimizer = Adam([*self.q1.parameters(), *self.q2.parameters()], lr=self.algo.lr)
        self.setup_policy(self.algo.lr)

    def modules(self) -> dict[str, Module]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2, "q1_targ": self.q1_targ, "q2_targ": self.q2_targ}

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        alpha = self.current_alpha()
        with tf.GradientTape() as tape:
            q1, q2 = self.q1(batch["obs"], batch["act"]), self.q2(batch["obs"], batch["act"])
            a2, logp_a2 = self.pi(batch["obs2"], self.draws(batch, "noise2"))
            q_targ = tf.minimum(self.q1_targ(batch["obs2"], a2), self.q2_targ(batch["obs2"], a2))
            backup = tf.stop_gradient(
                batch["rew"] + self.algo.gamma * (1 - batch["done"]) * (q_targ - alpha * logp_a2)
            )
            loss_q = tf.reduce_mean(tf.square(q1 - backup)) + tf.reduce_mean(tf.square(q2 - backup))
        self.optimize(self.q_optimizer, tape, loss_q)
        stats: Stats = {"LossQ": loss_q, "Q1Vals": q1, "Q2Vals": q2}
        if policy_step:  # always: SAC has no policy delay
            stats.update(
                self.policy_step(
                    batch["obs"],
                    self.draws(batch, "noise"),
                    alpha,
                    lambda o, a: tf.minimum(self.q1(o, a), self.q2(o, a)),
                )
            )
            self.polyak_update([(self.q1, self.q1_targ), (self.q2, self.q2_targ)])
        return stats
