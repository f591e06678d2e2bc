"""DQN in TensorFlow 2: the same update as rlexp/algos/dqn/torch.py (distributional heads and noisy
networks included), one compiled call per gradient step."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.dqn.base import DQNLearnerBase
from rlexp.algos.learner import Batch, Stats
from rlexp.algos.tf_common import OffPolicyTFLearner, clip_by_global_norm
from rlexp.comm.tf import avg_grads
from rlexp.nn.tf import (
    Adam,
    DiscreteQNetwork,
    Module,
    RMSprop,
    TFForward,
    linear_layers,
    quantile_huber_loss,
    sigma_layers,
)
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DQNLearner(DQNLearnerBase, OffPolicyTFLearner):
    """DQN update; see ``conf/algo/dqn.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Discrete, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        algo, net = self.algo, cfg.network
        kw = {
            "hidden_sizes": net.hidden_sizes,
            "activation": net.activation,
            "image": self.image,
            "dueling": algo.dueling,
            "atoms": algo.atoms,
            "noisy_sigma0": algo.noisy_sigma0 if algo.noisy else None,
        }
        dims = (self.obs_dim, self.n_actions)
        self.q = DiscreteQNetwork(*dims, rng=self.init_rng, **kw)
        self.sync(self.q)
        self.q_targ = self.target(self.q, DiscreteQNetwork(*dims, rng=self.init_rng, **kw))
        params = self.q.parameters()
        if algo.optimizer == "rmsprop":
            self.optimizer: Adam | RMSprop = RMSprop(
                params, lr=algo.lr, alpha=algo.rms_alpha, eps=algo.optim_eps
            )
        else:
            self.optimizer = Adam(params, lr=algo.lr, eps=algo.optim_eps)
        #: C51's atoms as a tensor (None for the other heads)
        self.support = None if self.support_values is None else tf.constant(self.support_values, tf.float32)
        forward = None
        if self.image is not None:  # a noisy network's pass takes its draws (each a batch of one)
            fn = (lambda o, n=None: self.q(o, None if n is None else n[0])) if algo.noisy else self.q
            forward = TFForward(self.function(fn))
        self.acting = self.numpy_acting(self.q, linear_layers, sigma_layers, forward)

    def modules(self) -> dict[str, Module]:
        return {"q": self.q, "q_targ": self.q_targ}

    def optimizers(self) -> dict[str, Adam | RMSprop]:  # type: ignore[override]
        return {"q": self.optimizer}

    def tensors(self, batch: Batch) -> Batch:
        out = super().tensors(batch)
        out["act"] = tf.cast(out["act"], tf.int64)
        return out

    def update_target(self) -> None:
        if self.algo.polyak == 0.0:
            for t, v in zip(self.q_targ.parameters(), self.q.parameters(), strict=True):
                t.assign(v)
        else:
            self.polyak_update([(self.q, self.q_targ)])

    def set_lr(self, lr: float) -> None:
        self.optimizer.lr.assign(lr)

    def draws(self, batch: Batch, key: str) -> tf.Tensor | None:
        """A noisy network's standard normal draws for one gradient step (``noise``: online, ``noise_targ``:
        target): ``batch[key]`` when given (the parity tests pre-draw them), else fresh ones from the
        ``learner`` stream; None without noisy networks."""
        if not self.algo.noisy:
            return None
        return batch[key] if key in batch else self.gen.normal((self.q.noise_size,))

    def values(self, out: tf.Tensor) -> tf.Tensor:
        """Q-values from the network's output: itself, C51's mean over its atoms, QR-DQN's mean quantile."""
        if self.algo.distributional == "c51":
            return tf.reduce_sum(tf.nn.softmax(out) * self.support, axis=-1)
        return tf.reduce_mean(out, axis=-1) if self.algo.distributional == "qr" else out

    def next_outputs(
        self, batch: Batch, noise: tf.Tensor | None = None, noise_targ: tf.Tensor | None = None
    ) -> tf.Tensor:
        """The target network's output at s' and the next action ``a'``: its own greedy action, or with
        ``double_q`` the online network's (by their Q-values)."""
        out2_targ = self.q_targ(batch["obs2"], noise_targ)
        if self.algo.double_q:  # the online network chooses, the target network evaluates
            a2 = tf.argmax(self.values(self.q(batch["obs2"], noise)), axis=-1)
        else:
            a2 = tf.argmax(self.values(out2_targ), axis=-1)
        return tf.stop_gradient(tf.gather(out2_targ, a2, batch_dims=1))

    def targets(
        self, batch: Batch, noise: tf.Tensor | None = None, noise_targ: tf.Tensor | None = None
    ) -> tf.Tensor:
        """``R + discount (1 - done) Q_targ(s', a')``: ``a'`` the target network's greedy action, or with
        ``double_q`` the online network's."""
        if self.algo.distributional is None and noise is None and noise_targ is None:
            q2_targ = self.q_targ(batch["obs2"])
            if self.algo.double_q:  # the online network chooses, the target network evaluates
                a2 = tf.argmax(self.q(batch["obs2"]), axis=-1)
                q2 = tf.gather(q2_targ, a2, batch_dims=1)
            else:
                q2 = tf.reduce_max(q2_targ, axis=-1)
        else:
            q2 = self.next_outputs(batch, noise, noise_targ)
            if q2.shape.rank == 2:  # QR-DQN's target quantiles: (batch, quantiles)
                shift = batch["discount"] * (1 - batch["done"])
                return tf.stop_gradient(batch["rew"][:, None] + shift[:, None] * q2)
        return tf.stop_gradient(batch["rew"] + batch["discount"] * (1 - batch["done"]) * q2)

    def projected(self, batch: Batch, probs2: tf.Tensor) -> tf.Tensor:
        """C51's target distribution: ``probs2`` (batch, atoms) moved to ``R + discount (1 - done) z``,
        clipped and projected onto the atoms, as rlexp/algos/dqn/torch.py's."""
        algo = self.algo
        shift = batch["discount"] * (1 - batch["done"])
        tz = tf.clip_by_value(batch["rew"][:, None] + shift[:, None] * self.support, algo.v_min, algo.v_max)
        dz = (algo.v_max - algo.v_min) / (algo.num_atoms - 1)
        weight = tf.maximum(1 - tf.abs(tz[:, None, :] - self.support[None, :, None]) / dz, 0.0)
        return tf.stop_gradient(tf.reduce_sum(weight * probs2[:, None, :], axis=-1))

    def c51_losses(
        self, batch: Batch, noise: tf.Tensor | None, noise_targ: tf.Tensor | None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(C51's cross-entropy per transition, the Q-value of each taken action)."""
        log_p = tf.nn.log_softmax(tf.gather(self.q(batch["obs"], noise), batch["act"], batch_dims=1))
        target = self.projected(batch, tf.nn.softmax(self.next_outputs(batch, noise, noise_targ)))
        q = tf.reduce_sum(tf.exp(tf.stop_gradient(log_p)) * self.support, axis=-1)
        return -tf.reduce_sum(target * log_p, axis=-1), q

    def qr_losses(
        self, batch: Batch, noise: tf.Tensor | None, noise_targ: tf.Tensor | None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(QR-DQN's quantile Huber loss per transition, the Q-value of each taken action)."""
        quantiles = tf.gather(self.q(batch["obs"], noise), batch["act"], batch_dims=1)
        target = self.targets(batch, noise, noise_targ)
        losses = quantile_huber_loss(quantiles, target, sum_over_quantiles=True, per_row=True)
        return losses, tf.reduce_mean(quantiles, axis=-1)

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        algo = self.algo
        noise, noise_targ = self.draws(batch, "noise"), self.draws(batch, "noise_targ")
        with tf.GradientTape() as tape:
            if algo.distributional is not None:
                losses = self.c51_losses if algo.distributional == "c51" else self.qr_losses
                errors, q = losses(batch, noise, noise_targ)
                priority = tf.stop_gradient(errors)
            else:
                q = tf.gather(self.q(batch["obs"], noise), batch["act"], batch_dims=1)
                backup = self.targets(batch, noise, noise_targ)
                td = q - backup
                if algo.loss == "huber":
                    abs_td = tf.abs(td)
                    errors = tf.where(abs_td < 1.0, 0.5 * tf.square(td), abs_td - 0.5)
                else:
                    errors = tf.square(td)
                priority = tf.abs(td)
            loss = tf.reduce_mean(errors * batch["weights"] if "weights" in batch else errors)
        grads = avg_grads(tape.gradient(loss, self.optimizer.params))
        if algo.max_grad_norm is not None:
            grads = clip_by_global_norm(grads, algo.max_grad_norm)
        self.optimizer.apply(grads)
        stats: Stats = {"LossQ": loss, "QVals": q}
        if "weights" in batch:  # prioritized replay: the sampled transitions' new priorities
            stats["Priority"] = priority + algo.per_eps
        return stats
