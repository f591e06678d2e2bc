"""PPO-clip in TensorFlow 2: the same update as rlexp/algos/ppo/torch.py, step for step.

Each policy step is one compiled call: gradients and approximate KL averaged in one allreduce, the
Adam step applied only when that KL is within ``1.5 * target_kl``. With ``num_minibatches > 0`` each
minibatch step (both networks, the joint loss) is one compiled call likewise; the minibatches are
the torch learner's (the same numpy shuffles).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.ppo.schedule import annealed, minibatch_indices
from rlexp.algos.vpg.tf import VPGLearner
from rlexp.comm.tf import avg_grads
from rlexp.nn import Sequences
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class PPOLearner(VPGLearner):
    """PPO-clip update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.shuffle_rng = seeds.generator("learner")  # minibatch order (checkpointed)
        self._mb_step = self.function(self._mb_step_graph)
        # This epoch's clip range: a variable the compiled steps read when it is annealed, else a constant.
        clip = self.algo.clip_ratio
        self.clip_eps = (
            tf.Variable(clip, trainable=False, dtype=tf.float32) if self.algo.anneal_clip else clip
        )

    def start_epoch(self, epoch: int) -> None:
        """With ``anneal_lr``: both learning rates at ``1 - epoch / epochs`` of their value; with
        ``anneal_clip``: the clip range likewise."""
        if self.algo.anneal_lr:
            for opt, lr in ((self.pi_optimizer, self.algo.pi_lr), (self.vf_optimizer, self.algo.vf_lr)):
                opt.lr.assign(annealed(lr, epoch, self.algo.epochs))
        if self.algo.anneal_clip:
            self.clip_eps.assign(annealed(self.algo.clip_ratio, epoch, self.algo.epochs))

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "shuffle_rng": self.shuffle_rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        if "shuffle_rng" in state:  # checkpoints from before minibatches had none (and needed none)
            self.shuffle_rng.bit_generator.state = state["shuffle_rng"]

    def loss_pi(self, batch: Batch) -> tuple[tf.Tensor, ...]:
        """Clipped surrogate loss minus the entropy bonus, approx KL, entropy, fraction clipped."""
        eps = self.clip_eps
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        ratio = tf.exp(logp - batch["logp"])
        adv = batch["adv"]
        loss = -tf.reduce_mean(tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1 - eps, 1 + eps) * adv))
        per_dim = self.ac.pi.entropy(pi)
        entropy = tf.reduce_mean(per_dim)
        if (
            self.algo.ent_coef
        ):  # the bonus takes the entropy of the whole action (a Gaussian's dimensions summed)
            whole = tf.reduce_sum(per_dim, -1) if len(per_dim.shape) > 1 else per_dim
            loss = loss - self.algo.ent_coef * tf.reduce_mean(whole)
        clipped = tf.logical_or(ratio > 1 + eps, ratio < 1 - eps)
        return (
            loss,
            tf.reduce_mean(batch["logp"] - logp),
            entropy,
            tf.reduce_mean(tf.cast(clipped, tf.float32)),
        )

    def kl_within(self, kl: tf.Tensor) -> tf.Tensor | bool:
        """Whether a step may be taken at the rank-averaged ``kl`` (always, with target_kl null)."""
        if self.algo.target_kl is None:
            return True
        # Compared in float64, as torch compares the KL (a float32 value) with the Python bound.
        return tf.cast(kl, tf.float64) <= 1.5 * self.algo.target_kl

    def _pi_step_graph(self, batch: Batch) -> tf.Tensor:  # type: ignore[override]
        """One policy step unless the rank-averaged KL before it exceeds the bound; return that KL."""
        with tf.GradientTape() as tape:
            loss, kl, _, _ = self.loss_pi(batch)
        *grads, kl = avg_grads(tape.gradient(loss, self.pi_optimizer.params), [kl])
        if self.kl_within(kl):
            self.pi_optimizer.apply(self.clip_grads(grads))
        return kl

    def _mb_step_graph(self, batch: Batch) -> tf.Tensor:
        """One joint minibatch step of both networks unless the KL exceeds the bound; return that KL."""
        pi_params, v_params = self.pi_optimizer.params, self.vf_optimizer.params
        with tf.GradientTape() as tape:
            loss_pi, kl, _, _ = self.loss_pi(batch)
            loss = loss_pi + self.algo.vf_coef * self.loss_v(batch)
        *grads, kl = avg_grads(tape.gradient(loss, [*pi_params, *v_params]), [kl])
        if self.kl_within(kl):
            grads = self.clip_grads(grads)
            self.pi_optimizer.apply(grads[: len(pi_params)])
            self.vf_optimizer.apply(grads[len(pi_params) :])
        return kl

    def minibatch(self, batch: Batch, idx: np.ndarray) -> Batch:
        """The rows ``idx`` of ``batch`` (recurrent networks: the sequences ``idx``), advantages normalised within them when ``adv_norm=minibatch``
        (by the unbiased std, as the torch learner; a one-row minibatch is left as it is)."""
        seqs = batch["obs"]
        if isinstance(seqs, Sequences):  # recurrent networks: the sequences idx and their rows
            sub, rows = seqs.select(idx, tf.gather)
            mb = {k: sub if k == "obs" else tf.gather(v, rows) for k, v in batch.items()}
        else:
            mb = {k: tf.gather(v, idx) for k, v in batch.items()}
        n = int(mb["adv"].shape[0])
        if self.algo.adv_norm == "minibatch" and n > 1:
            adv = mb["adv"]
            mean = tf.reduce_mean(adv)
            std = tf.sqrt(tf.reduce_sum(tf.square(adv - mean)) / (n - 1))
            mb["adv"] = (adv - mean) / (std + 1e-8)
        return mb

    def update_networks(self, batch: Batch) -> Stats:
        loss_old, _, ent_old, _ = self._pi_info(batch)
        if self.algo.minibatched:
            return self.update_minibatches(batch, loss_old, ent_old)
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            kl = float(self._pi_step(batch))
            if self.algo.target_kl is not None and kl > 1.5 * self.algo.target_kl:  # no step was taken
                stop_iter = i
                break
        return self.epoch_stats(batch, loss_old, ent_old, StopIter=stop_iter)

    def update_minibatches(self, batch: Batch, loss_old: tf.Tensor, ent_old: tf.Tensor) -> Stats:
        """``update_epochs`` shuffled passes of ``num_minibatches`` joint steps (the torch learner's)."""
        algo = self.algo
        v_old = float(self.loss_v(batch))
        step, stop = 0, False
        seqs = batch["obs"]  # recurrent networks: minibatches of whole sequences
        n = seqs.num_sequences() if isinstance(seqs, Sequences) else int(batch["adv"].shape[0])
        for idx in minibatch_indices(n, algo, self.shuffle_rng):
            kl = float(self._mb_step(self.minibatch(batch, idx)))
            if algo.target_kl is not None and kl > 1.5 * algo.target_kl:
                stop = True
                break
            step += 1
        loss_new, kl_new, _, clip_fraction = self._pi_info(batch)
        return on_policy_stats(
            (float(loss_old), float(loss_new)),
            (v_old, float(self.loss_v(batch))),
            Entropy=float(ent_old),
            KL=float(kl_new),
            ClipFrac=float(clip_fraction),
            StopIter=step if stop else step - 1,
        )
