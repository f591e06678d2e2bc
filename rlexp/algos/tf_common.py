"""What the TensorFlow 2 learners share (the twin of torch_common.py): threads and device set-up,
state and npz checkpoints, and the on-policy and off-policy bases.

Update steps are Python methods compiled by ``tf.function`` (with XLA when ``backend.jit_compile``);
inside them gradients are averaged over ranks in one flat allreduce (rlexp.comm.tf.avg_grads)
before the optimizer applies them. Randomness inside the learner comes from one
``tf.random.Generator`` per learner, whose state is checkpointed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp import comm
from rlexp.checkpoint import check_meta, checkpoint_meta, load_npz, save_npz
from rlexp.comm.tf import avg_grads, sync_variables
from rlexp.config import RLExpConfig, TFBackendConfig
from rlexp.errors import RLExpError
from rlexp.nn.acting import ActorCriticActing
from rlexp.nn.tf import ActorCritic, Adam, Net


def setup_tf(cfg: TFBackendConfig, procs: int) -> None:
    """Threads (intra-op per ``cfg``, inter-op 1) and device visibility, before TensorFlow runs an op."""
    threads = cfg.threads_per_rank(procs)
    if cfg.quiet:
        tf.get_logger().setLevel("ERROR")  # e.g. retracing notes
    try:
        if tf.config.threading.get_intra_op_parallelism_threads() != threads:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
        if tf.config.threading.get_inter_op_parallelism_threads() != 1:
            tf.config.threading.set_inter_op_parallelism_threads(1)
        if cfg.device == "cpu":
            tf.config.set_visible_devices([], "GPU")
    except RuntimeError:
        pass  # TensorFlow already started in this process (a second learner): keep its settings
    if cfg.device.startswith("cuda") and not tf.config.list_physical_devices("GPU"):
        raise RLExpError(f"backend.device={cfg.device} but TensorFlow sees no GPU; use backend.device=cpu")


class TFLearner:
    """Base of every TensorFlow learner: seeding, compiled functions, state dict and checkpoints.

    Subclasses list their networks in :meth:`modules` and optimizers in :meth:`optimizers`.
    """

    CHECKPOINT_SUFFIX = ".npz"

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        self.cfg, self.algo = cfg, cfg.algo
        setup_tf(cfg.backend, comm.num_procs())
        self.init_rng = np.random.default_rng(seed)  # initial weights (then synced from rank 0)
        self.gen = tf.random.Generator.from_seed(seed)
        self.obs_dim = int(np.prod(obs_space.shape))

    def function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` compiled by tf.function (and XLA when backend.jit_compile)."""
        return tf.function(fn, jit_compile=self.cfg.backend.jit_compile, reduce_retracing=True)

    @staticmethod
    def sync(*nets: Net) -> None:
        sync_variables([v for n in nets for v in n.params])

    @staticmethod
    def apply(opt: Adam, grads: list[tf.Tensor]) -> None:
        """Average ``grads`` over ranks and let ``opt`` apply them (inside a compiled step)."""
        opt.apply(avg_grads(grads))

    def modules(self) -> dict[str, Net]:
        raise NotImplementedError

    def optimizers(self) -> dict[str, Adam]:
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    def get_weights(self) -> dict[str, list[np.ndarray]]:
        """Every module's variables as arrays, in torch's parameters() order and layout."""
        return {k: [v.numpy() for v in m.params] for k, m in self.modules().items()}

    def set_weights(self, weights: dict[str, list[np.ndarray]]) -> None:
        for k, m in self.modules().items():
            for v, value in zip(m.params, weights[k], strict=True):
                v.assign(np.asarray(value, dtype=np.float32).reshape(v.shape))

    def state_dict(self) -> dict[str, Any]:
        return {
            "modules": self.get_weights(),
            "optimizers": {k: [s.numpy() for s in o.slots] for k, o in self.optimizers().items()},
            "tf_rng": self.gen.state.numpy(),
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.set_weights(state["modules"])
        for k, o in self.optimizers().items():
            for s, value in zip(o.slots, state["optimizers"][k], strict=True):
                s.assign(value)
        self.gen.reset(state["tf_rng"])
        self.load_extra_state(state["extra"])
        self.refresh()

    def refresh(self) -> None:
        """Re-read the weights that acting uses in numpy (after any change of the variables)."""

    def save(self, path: str | os.PathLike, loop_state: dict[str, Any]) -> None:
        save_npz(
            path,
            {"format": 1, **checkpoint_meta(self.cfg), "learner": self.state_dict(), "loop": loop_state},
        )

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore from ``path``; return the loop's state. A checkpoint of another run is an RLExpError."""
        ckpt = load_npz(path)
        check_meta(ckpt, self.cfg, path)
        try:
            self.load_state_dict(ckpt["learner"])
        except (KeyError, ValueError, TypeError, tf.errors.InvalidArgumentError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RLExpError(f"checkpoint {path} does not fit this run's learner ({msg})") from None
        return ckpt["loop"]


class OnPolicyTFLearner(TFLearner):
    """Actor-critic and value-function training for VPG, TRPO and PPO in TensorFlow."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.discrete = isinstance(act_space, spaces.Discrete)
        act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        net = cfg.network
        self.ac = ActorCritic(
            self.obs_dim, act_dim, self.discrete, net.hidden_sizes, net.activation, self.init_rng
        )
        self.sync(self.ac)
        self.np_rng = np.random.default_rng(seed)  # action sampling (acting runs in numpy)
        self.acting = ActorCriticActing(self.discrete, net.activation, self.np_rng)
        self.vf_optimizer = Adam(self.ac.v_params, lr=self.algo.vf_lr)
        self._v_step = self.function(self._v_step_graph)
        self.refresh()

    def modules(self) -> dict[str, Net]:
        return {"ac": self.ac}

    def optimizers(self) -> dict[str, Adam]:
        return {"vf": self.vf_optimizer}

    def refresh(self) -> None:
        log_std = None if self.discrete else self.ac.log_std.numpy()
        self.acting.load(self.ac.pi_net.weights(), self.ac.v_net.weights(), log_std)

    def extra_state(self) -> dict[str, Any]:
        return {"np_rng": self.np_rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.np_rng.bit_generator.state = state["np_rng"]

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Sample an action for one observation; return (action, V(obs), log-prob of the action)."""
        return self.acting.step(obs)

    def value(self, obs: np.ndarray) -> float:
        return self.acting.value(obs)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        return self.acting.act(obs, deterministic)

    def tensors(self, batch: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
        out = {k: tf.constant(v) for k, v in batch.items()}
        out["act"] = tf.cast(out["act"], tf.int64 if self.discrete else tf.float32)
        return out

    def loss_v(self, data: dict[str, tf.Tensor]) -> tf.Tensor:
        return tf.reduce_mean(tf.square(self.ac.v(data["obs"]) - data["ret"]))

    def _v_step_graph(self, data: dict[str, tf.Tensor]) -> None:
        with tf.GradientTape() as tape:
            loss = self.loss_v(data)
        self.apply(self.vf_optimizer, tape.gradient(loss, self.ac.v_params))

    def update_v(self, data: dict[str, tf.Tensor]) -> tuple[float, float]:
        """``train_v_iters`` full-batch Adam steps on the value loss; return (loss before, loss after)."""
        before = float(self.loss_v(data))
        for _ in range(self.algo.train_v_iters):
            self._v_step(data)
        return before, float(self.loss_v(data))

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        """The algorithm's update (:meth:`update_networks`), then fresh acting weights."""
        stats = self.update_networks(batch)
        self.refresh()
        return stats

    def update_networks(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        raise NotImplementedError


class OffPolicyTFLearner(TFLearner):
    """Shared machinery of DDPG, TD3 and SAC in TensorFlow; actions live in [-1, 1]^n."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.act_dim = int(np.prod(act_space.shape))
        self.rng = np.random.default_rng(seed)  # exploration noise (as the torch learners)
        self.n_updates = 0

    def net_kwargs(self) -> dict[str, Any]:
        net = self.cfg.network
        return {"hidden_sizes": net.hidden_sizes, "activation": net.activation, "rng": self.init_rng}

    @staticmethod
    def target(net: Net, copy: Net) -> Net:
        """``copy`` (a freshly built twin of ``net``) set to ``net``'s values: a target network."""
        for t, v in zip(copy.params, net.params, strict=True):
            t.assign(v)
        return copy

    def polyak_update(self, pairs: list[tuple[Net, Net]]) -> None:
        p = self.algo.polyak
        for main, targ in pairs:
            for t, v in zip(targ.params, main.params, strict=True):
                t.assign(p * t + (1 - p) * v)

    def tensors(self, batch: dict[str, np.ndarray]) -> dict[str, tf.Tensor]:
        return {k: tf.constant(v) for k, v in batch.items()}

    def extra_state(self) -> dict[str, Any]:
        return {"n_updates": self.n_updates, "np_rng": self.rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.n_updates = int(state["n_updates"])
        self.rng.bit_generator.state = state["np_rng"]
