"""SAC in TensorFlow 2: the same update as rlexp/algos/sac/torch.py, one compiled step per update."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.config import RLExpConfig
from rlexp.nn.tf import Adam, Net, QFunction, SquashedGaussianActor


class SACLearner(OffPolicyTFLearner):
    """SAC update; see ``conf/algo/sac.yaml`` for the hyperparameters."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        kw, dims = self.net_kwargs(), (self.obs_dim, self.act_dim)
        self.pi = SquashedGaussianActor(*dims, **kw)
        self.q1, self.q2 = QFunction(*dims, **kw), QFunction(*dims, **kw)
        self.sync(self.pi, self.q1, self.q2)
        self.q1_targ = self.target(self.q1, QFunction(*dims, **kw))
        self.q2_targ = self.target(self.q2, QFunction(*dims, **kw))
        self.q_params = [*self.q1.params, *self.q2.params]
        lr = self.algo.lr
        self.pi_optimizer, self.q_optimizer = Adam(self.pi.params, lr=lr), Adam(self.q_params, lr=lr)
        self.log_alpha = tf.Variable(float(np.log(max(self.algo.alpha, 1e-30))), dtype=tf.float32)
        te = self.algo.target_entropy
        self.target_entropy = -float(self.act_dim) if te is None else te
        self.autotune = self.algo.autotune_alpha
        self.alpha_optimizer = Adam([self.log_alpha], lr=lr) if self.autotune else None
        self._update = self.function(self._update_graph)
        self.refresh()

    def refresh(self) -> None:
        self.pi.snapshot()

    def modules(self) -> dict[str, Net]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2, "q1_targ": self.q1_targ, "q2_targ": self.q2_targ}

    def optimizers(self) -> dict[str, Adam]:
        opts = {"pi": self.pi_optimizer, "q": self.q_optimizer}
        return opts if self.alpha_optimizer is None else {**opts, "alpha": self.alpha_optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "log_alpha": self.log_alpha.numpy()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.log_alpha.assign(state["log_alpha"])

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """tanh(mu(obs)) when deterministic, else a sample; in numpy on the current weights."""
        noise = None if deterministic else self.rng.standard_normal(self.act_dim)
        return self.pi.np_forward(np.asarray(obs, dtype=np.float64), noise).astype(np.float32)

    def explore(self, obs: np.ndarray) -> np.ndarray:
        return self.act(obs, deterministic=False)

    def _noise(self, d: dict[str, tf.Tensor], key: str) -> tf.Tensor:
        return d[key] if key in d else self.gen.normal((tf.shape(d["obs"])[0], self.act_dim))

    def _update_graph(self, d: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        alpha = tf.exp(self.log_alpha) if self.autotune else tf.constant(self.algo.alpha, tf.float32)
        with tf.GradientTape() as tape:
            q1, q2 = self.q1(d["obs"], d["act"]), self.q2(d["obs"], d["act"])
            a2, logp_a2 = self.pi(d["obs2"], self._noise(d, "noise2"))
            q_targ = tf.minimum(self.q1_targ(d["obs2"], a2), self.q2_targ(d["obs2"], a2))
            backup = tf.stop_gradient(
                d["rew"] + self.algo.gamma * (1 - d["done"]) * (q_targ - alpha * logp_a2)
            )
            loss_q = tf.reduce_mean(tf.square(q1 - backup)) + tf.reduce_mean(tf.square(q2 - backup))
        self.apply(self.q_optimizer, tape.gradient(loss_q, self.q_params))
        with tf.GradientTape() as tape:
            a, logp = self.pi(d["obs"], self._noise(d, "noise"))
            loss_pi = tf.reduce_mean(alpha * logp - tf.minimum(self.q1(d["obs"], a), self.q2(d["obs"], a)))
        self.apply(self.pi_optimizer, tape.gradient(loss_pi, self.pi.params))
        stats = {"LossQ": loss_q, "Q1Vals": q1, "Q2Vals": q2, "LogPi": logp, "LossPi": loss_pi}
        if self.autotune:
            with tf.GradientTape() as tape:
                loss_alpha = -tf.reduce_mean(self.log_alpha * (tf.stop_gradient(logp) + self.target_entropy))
            self.apply(self.alpha_optimizer, [tape.gradient(loss_alpha, self.log_alpha)])
            stats.update(Alpha=alpha, LossAlpha=loss_alpha)
        self.polyak_update([(self.q1, self.q1_targ), (self.q2, self.q2_targ)])
        return stats

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        stats = self._update(self.tensors(batch))
        self.n_updates += 1
        self.refresh()
        return {k: (v.numpy() if v.shape.rank else float(v)) for k, v in stats.items()}
