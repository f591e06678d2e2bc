"""TRPO and natural policy gradient in TensorFlow 2: the same update as rlexp/algos/trpo/torch.py.

Gradients and Fisher-vector products are computed by compiled functions (the Hessian-vector
product with nested gradient tapes), averaged over ranks, and the conjugate gradient and line
search run on flat numpy vectors.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from gymnasium import spaces

import rlexp.comm as comm
from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.tf_common import OnPolicyTFLearner
from rlexp.algos.trpo.natural_gradient import EPS, conjugate_gradient, line_search
from rlexp.nn.tf import Dist
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


def _flat(tensors: list[tf.Tensor]) -> tf.Tensor:
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)


class TRPOLearner(OnPolicyTFLearner):
    """TRPO / NPG update; see ``conf/algo/trpo.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.params = self.ac.pi.parameters()
        self._dist = self.function(self.ac.pi.distribution)
        self._surrogate = self.function(self.surrogate)
        self._grad = self.function(self._grad_graph)
        self._hvp = self.function(self._hvp_graph)
        self._kl = self.function(self.kl)

    def surrogate(self, batch: Batch) -> tf.Tensor:
        _, logp = self.ac.pi(batch["obs"], batch["act"])
        return -tf.reduce_mean(tf.exp(logp - batch["logp"]) * batch["adv"])

    def kl(self, obs: tf.Tensor, old: Dist) -> tf.Tensor:
        return tf.reduce_mean(self.ac.pi.kl(old, self.ac.pi.distribution(obs)))

    def _grad_graph(self, batch: Batch) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            loss = self.surrogate(batch)
        return loss, _flat(tape.gradient(loss, self.params))

    def _hvp_graph(self, obs: tf.Tensor, old: Dist, v: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as outer:
            with tf.GradientTape() as inner:
                kl = self.kl(obs, old)
            grad_kl_v = tf.reduce_sum(_flat(inner.gradient(kl, self.params)) * v)
        return _flat(outer.gradient(grad_kl_v, self.params))

    def _set_flat(self, flat: np.ndarray) -> None:
        offset = 0
        for p in self.params:
            n = int(np.prod(p.shape))
            p.assign(flat[offset : offset + n].reshape(p.shape))
            offset += n

    def update_networks(self, batch: Batch) -> Stats:
        obs, algo = batch["obs"], self.algo
        old = self._dist(obs)
        loss_old, g = self._grad(batch)
        loss_old, g = comm.mpi_avg(float(loss_old)), np.asarray(comm.mpi_avg(g.numpy()), dtype=np.float32)

        def hvp(v: np.ndarray) -> np.ndarray:
            hv = np.asarray(comm.mpi_avg(self._hvp(obs, old, tf.constant(v, tf.float32)).numpy()), np.float32)
            return hv + np.float32(algo.damping_coeff) * v

        x = conjugate_gradient(hvp, g, algo.cg_iters)
        alpha = np.sqrt(2 * algo.delta / (x @ hvp(x) + EPS)).astype(np.float32)
        old_params = _flat(self.params).numpy()

        def set_and_eval(step: float) -> tuple[float, float]:
            self._set_flat(old_params - np.float32(step) * alpha * x)
            return comm.mpi_avg(float(self._kl(obs, old))), comm.mpi_avg(float(self._surrogate(batch)))

        kl, loss_new, backtrack = line_search(
            set_and_eval, lambda: self._set_flat(old_params), loss_old, algo
        )
        stats = on_policy_stats((loss_old, loss_new), self.update_v(batch), KL=kl)
        return stats if algo.variant == "npg" else {**stats, "BacktrackIters": backtrack}
