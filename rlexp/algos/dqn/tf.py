"""DQN in TensorFlow 2: the same update as rlexp/algos/dqn/torch.py, one compiled call per gradient step."""

from __future__ import annotations

import tensorflow as tf
from gymnasium import spaces

from rlexp.algos.dqn.base import DQNLearnerBase
from rlexp.algos.learner import Batch, Stats
from rlexp.algos.tf_common import OffPolicyTFLearner, clip_by_global_norm
from rlexp.comm.tf import avg_grads
from rlexp.nn.acting import MLPCopy, QActing
from rlexp.nn.tf import Adam, DiscreteQNetwork, Module, RMSprop, TFForward, linear_layers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DQNLearner(DQNLearnerBase, OffPolicyTFLearner):
    """DQN update; see ``conf/algo/dqn.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Discrete, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        algo, net = self.algo, cfg.network
        kw = {"hidden_sizes": net.hidden_sizes, "activation": net.activation, "image": self.image}
        dims = (self.obs_dim, self.n_actions)
        self.q = DiscreteQNetwork(*dims, rng=self.init_rng, dueling=algo.dueling, **kw)
        self.sync(self.q)
        self.q_targ = self.target(
            self.q, DiscreteQNetwork(*dims, rng=self.init_rng, dueling=algo.dueling, **kw)
        )
        params = self.q.parameters()
        if algo.optimizer == "rmsprop":
            self.optimizer: Adam | RMSprop = RMSprop(
                params, lr=algo.lr, alpha=algo.rms_alpha, eps=algo.optim_eps
            )
        else:
            self.optimizer = Adam(params, lr=algo.lr, eps=algo.optim_eps)
        q = self.q
        if self.image is not None:
            self.acting = QActing(TFForward(self.function(q)))
        elif not algo.dueling:
            self.acting = QActing(MLPCopy(lambda: linear_layers(q.q_net), net.activation))
        else:
            act = net.activation
            self.acting = QActing(
                trunk=MLPCopy(lambda: linear_layers(q.trunk), act, act),
                v=MLPCopy(lambda: linear_layers(q.v_net), act),
                a=MLPCopy(lambda: linear_layers(q.a_net), act),
            )

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

    def targets(self, batch: Batch) -> tf.Tensor:
        """``R + discount (1 - done) Q_targ(s', a')``: ``a'`` the target network's greedy action, or with
        ``double_q`` the online network's."""
        q2_targ = self.q_targ(batch["obs2"])
        if self.algo.double_q:  # the online network chooses, the target network evaluates
            a2 = tf.argmax(self.q(batch["obs2"]), axis=-1)
            q2 = tf.gather(q2_targ, a2, batch_dims=1)
        else:
            q2 = tf.reduce_max(q2_targ, axis=-1)
        return tf.stop_gradient(batch["rew"] + batch["discount"] * (1 - batch["done"]) * q2)

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        algo = self.algo
        with tf.GradientTape() as tape:
            q = tf.gather(self.q(batch["obs"]), batch["act"], batch_dims=1)
            backup = self.targets(batch)
            td = q - backup
            if algo.loss == "huber":
                abs_td = tf.abs(td)
                errors = tf.where(abs_td < 1.0, 0.5 * tf.square(td), abs_td - 0.5)
            else:
                errors = tf.square(td)
            loss = tf.reduce_mean(errors * batch["weights"] if "weights" in batch else errors)
        grads = avg_grads(tape.gradient(loss, self.optimizer.params))
        if algo.max_grad_norm is not None:
            grads = clip_by_global_norm(grads, algo.max_grad_norm)
        self.optimizer.apply(grads)
        stats: Stats = {"LossQ": loss, "QVals": q}
        if "weights" in batch:  # prioritized replay: the sampled transitions' new priorities
            stats["Priority"] = tf.abs(td) + algo.per_eps
        return stats
