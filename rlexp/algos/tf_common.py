"""What the TensorFlow 2 learners share (the twin of torch_common.py): threads and device set-up,
compiled functions, the library state and ``.npz`` checkpoints, and the on-policy and off-policy
bases. What does not depend on the backend is in learner.py.

Update steps are Python methods compiled by ``tf.function`` (with XLA when ``backend.jit_compile``);
inside them gradients are averaged over ranks in one flat allreduce (rlexp.comm.tf.avg_grads)
before the optimizer applies them. Randomness inside updates comes from one ``tf.random.Generator``
per learner (the ``learner`` stream), whose state is checkpointed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from gymnasium import spaces

import rlexp.comm as comm
from rlexp.algos.learner import Batch, Learner, OffPolicyLearner, OnPolicyLearner, Stats
from rlexp.checkpoint import load_npz, save_npz
from rlexp.cluster import rank_gpu
from rlexp.comm.tf import avg_grads, sync_variables
from rlexp.errors import RLExpError
from rlexp.nn import Sequences
from rlexp.nn.acting import (
    ActorCriticActing,
    Forward,
    MLPCopy,
    RecurrentActing,
    RecurrentCell,
    StateDependentNoise,
    policy_head,
)
from rlexp.nn.tf import ActorCritic, Adam, GaussianActor, Module, Recurrent, TFForward, linear_layers
from rlexp.schema import RLExpConfig, TFBackendConfig
from rlexp.seeding import RankSeeds


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
        gpus = tf.config.list_physical_devices("GPU")
        index = rank_gpu(cfg.device, len(gpus))
        if index is None:
            tf.config.set_visible_devices([], "GPU")
        elif index < len(gpus):  # this rank's GPU only (rlexp.cluster.rank_gpu), seen as GPU:0
            tf.config.set_visible_devices([gpus[index]], "GPU")
    except RuntimeError:
        pass  # TensorFlow already started in this process (a second learner): keep its settings
    if cfg.device.startswith("cuda") and not tf.config.list_physical_devices("GPU"):
        raise RLExpError(f"backend.device={cfg.device} but TensorFlow sees no GPU; use backend.device=cpu")


def clip_by_global_norm(grads: list[tf.Tensor], max_norm: float) -> list[tf.Tensor]:
    """``grads`` scaled to a global norm of at most ``max_norm`` as torch's clip_grad_norm_ does: by
    max_norm / (norm + 1e-6) when the norm is larger."""
    norm = tf.linalg.global_norm(grads)
    scale = tf.minimum(1.0, max_norm / (norm + 1e-6))
    return [g * scale for g in grads]


class TFLearner(Learner):
    """Base of every TensorFlow learner: generators, compiled functions, library state and ``.npz`` checkpoints.

    Subclasses build their networks from :attr:`init_rng` (the ``init`` stream), list them in
    :meth:`modules` and their optimizers in :meth:`optimizers`.
    """

    CHECKPOINT_SUFFIX = ".npz"
    RNG_KEY = "tf_rng"
    LOAD_ERRORS = (tf.errors.InvalidArgumentError,)

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        setup_tf(cfg.backend, comm.num_procs())
        self.init_rng = seeds.generator("init")  # initial weights (then synced from rank 0)
        self.gen = tf.random.Generator.from_seed(seeds["learner"])

    def function(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` compiled by tf.function (and XLA when backend.jit_compile).

        Recurrent networks' batches change shape every epoch (the number and length of sequences). A
        tf.function traces the first shape it sees as it is and later ones with unknown dimensions,
        whose kernels may round differently: a resumed run (whose first shape is another) would not
        repeat the numbers. So with ``network.recurrent`` every call goes through the trace for tensors
        of unknown dimensions only.
        """
        compiled = tf.function(fn, jit_compile=self.cfg.backend.jit_compile, reduce_retracing=True)
        if self.cfg.network.recurrent is None:
            return compiled

        def generic(*args: Any) -> Any:
            specs = tf.nest.map_structure(
                lambda x: tf.TensorSpec([None] * len(x.shape), x.dtype) if isinstance(x, tf.Tensor) else x,
                args,
            )
            return compiled.get_concrete_function(*specs)(*args)

        return generic

    def modules(self) -> dict[str, Module]:
        raise NotImplementedError

    def optimizers(self) -> dict[str, Adam]:
        raise NotImplementedError

    @staticmethod
    def sync(*nets: Module) -> None:
        """Copy rank 0's values of ``nets`` to all ranks (before targets are copied from them)."""
        sync_variables([v for n in nets for v in n.parameters()])

    @staticmethod
    def optimize(opt: Adam, tape: tf.GradientTape, loss: tf.Tensor) -> None:
        """One step of ``opt`` on ``loss`` (inside a compiled step): the gradients of its parameters,
        averaged over ranks, applied."""
        opt.apply(avg_grads(tape.gradient(loss, opt.params)))

    def tensors(self, batch: Batch) -> Batch:
        return {k: tf.constant(v) for k, v in batch.items()}

    def get_weights(self) -> dict[str, list[np.ndarray]]:
        """Every module's variables as arrays, in torch's parameters() order and layout."""
        return {k: [v.numpy() for v in m.parameters()] for k, m in self.modules().items()}

    def set_weights(self, weights: dict[str, list[np.ndarray]]) -> None:
        for k, m in self.modules().items():
            for v, value in zip(m.parameters(), weights[k], strict=True):
                v.assign(np.asarray(value, dtype=np.float32).reshape(v.shape))
        self.refresh()

    def get_buffers(self) -> dict[str, list[np.ndarray]]:
        """The modules' saved state that is not trained (:meth:`rlexp.nn.tf.Module.buffers`: CrossQ's
        running statistics), in torch's state_dict order; only modules that have some."""
        return {k: [v.numpy() for v in m.buffers()] for k, m in self.modules().items() if m.buffers()}

    def set_buffers(self, buffers: dict[str, list[np.ndarray]]) -> None:
        for k, m in self.modules().items():
            for v, value in zip(m.buffers(), buffers[k] if m.buffers() else [], strict=True):
                v.assign(np.asarray(value, dtype=v.dtype.as_numpy_dtype).reshape(v.shape))
        self.refresh()

    def library_state(self) -> dict[str, Any]:
        state = {
            "modules": self.get_weights(),
            "optimizers": {k: [s.numpy() for s in o.slots] for k, o in self.optimizers().items()},
            self.RNG_KEY: self.gen.state.numpy(),
        }
        buffers = self.get_buffers()
        return {**state, "buffers": buffers} if buffers else state

    def load_library_state(self, state: dict[str, Any]) -> None:
        self.set_weights(state["modules"])
        if self.get_buffers():
            self.set_buffers(state["buffers"])
        for k, o in self.optimizers().items():
            for s, value in zip(o.slots, state["optimizers"][k], strict=True):
                s.assign(value)
        self.gen.reset(state[self.RNG_KEY])

    def write_file(self, path: str | os.PathLike, state: dict[str, Any]) -> None:
        save_npz(path, state)

    def read_file(self, path: str | os.PathLike) -> dict[str, Any]:
        return load_npz(path)


class OnPolicyTFLearner(OnPolicyLearner, TFLearner):
    """The actor-critic and value-function training of VPG, TRPO and PPO in TensorFlow. Acting runs in
    numpy on a copy of the MLP weights, or through compiled TF functions for CNN networks."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.discrete = isinstance(act_space, spaces.Discrete)
        net = cfg.network
        algo = self.algo
        self.ac = ActorCritic(
            self.obs_dim,
            act_space,
            net.hidden_sizes,
            net.activation,
            self.init_rng,
            self.image,
            algo.log_std_init,
            algo.ortho_init,
            None if net.recurrent is None else (net.recurrent, net.recurrent_size),
            net.recurrent_critic,
            algo.use_sde,
        )
        self.sync(self.ac)
        self.vf_optimizer = Adam(self.ac.v.parameters(), lr=algo.vf_lr, eps=algo.adam_eps)
        self._v_step = self.function(self._v_step_graph)
        pi, v = self.ac.pi, self.ac.v
        head = pi.mu_net if isinstance(pi, GaussianActor) else pi.logits_net
        log_std = (lambda: pi.log_std.numpy()) if isinstance(pi, GaussianActor) else None
        # the policy's MLP in numpy: to its output, or with gSDE to its latent features (last hidden layer)
        pi_mlp, log_std, sde = policy_head(
            lambda: linear_layers(head),
            net.activation,
            log_std,
            self.rng,
            cfg.env.num_envs,
            isinstance(pi, GaussianActor) and pi.sde,
        )
        if net.recurrent is not None:  # numpy heads and cells after the encoder (a CNN's through TF)
            self.acting = self.recurrent_acting(pi_mlp, log_std, sde)
            return
        if self.image is None:
            pi_out: Forward = pi_mlp
            v_out: Forward = MLPCopy(lambda: linear_layers(v.v_net), net.activation)
        else:
            to_out = head if sde is None else pi.latent  # type: ignore[union-attr]
            pi_out = TFForward(self.function(lambda o: to_out(pi.encode(o))))
            v_out = TFForward(self.function(lambda o: v.v_net(v.encode(o))))
        self.acting = ActorCriticActing(pi_out, v_out, log_std, self.rng, sde)

    def recurrent_acting(
        self, pi_mlp: MLPCopy, log_std: Any, sde: StateDependentNoise | None
    ) -> RecurrentActing:
        """Acting with recurrent networks, as the torch learner's: the encoders (a CNN through a
        compiled TF function), then each network's recurrent cell and MLP head in numpy."""
        net, pi, v = self.cfg.network, self.ac.pi, self.ac.v

        def cell(encoder: Recurrent) -> RecurrentCell:
            return RecurrentCell(
                encoder.kind,
                lambda: [
                    (encoder.weight_ih.numpy(), encoder.bias_ih.numpy()),
                    (encoder.weight_hh.numpy(), encoder.bias_hh.numpy()),
                ],
            )

        def inner(encoder: Recurrent) -> Forward | None:
            return None if encoder.inner is None else TFForward(self.function(encoder.inner))

        assert isinstance(pi.encoder, Recurrent)
        separate = isinstance(v.encoder, Recurrent)
        return RecurrentActing(
            pi_mlp,
            MLPCopy(lambda: linear_layers(v.v_net), net.activation),
            log_std,
            self.rng,
            cell(pi.encoder),
            cell(v.encoder) if separate else None,  # type: ignore[arg-type]
            self.cfg.env.num_envs,
            inner(pi.encoder),
            inner(v.encoder) if separate else None,  # type: ignore[arg-type]
            sde,
        )

    def modules(self) -> dict[str, Module]:
        return {"ac": self.ac}

    def optimizers(self) -> dict[str, Adam]:
        return {"vf": self.vf_optimizer}

    def tensors(self, batch: Batch) -> Batch:
        """The epoch's arrays as tensors (actions as int64 for Discrete; recurrent networks'
        observations as :class:`rlexp.nn.Sequences` of tensors)."""
        seqs = batch.get("obs")
        if isinstance(seqs, Sequences):
            batch = {**batch, "obs": np.zeros(0)}
        out = super().tensors(batch)
        out["act"] = tf.cast(out["act"], tf.int64 if self.discrete else tf.float32)
        if isinstance(seqs, Sequences):
            out["obs"] = Sequences(
                tf.constant(seqs.obs),
                tf.constant(seqs.valid),
                {k: tuple(tf.constant(x) for x in v) for k, v in seqs.states.items()},
            )
        return out

    def loss_v(self, batch: Batch) -> tf.Tensor:
        """Mean squared error of V(s) against the rewards-to-go; with ``algo.vf_clip`` (PPO), the larger of
        it and the error of V(s) clipped to within vf_clip of its value at collection time."""
        v = self.ac.v(batch["obs"])
        loss = tf.square(v - batch["ret"])
        clip = getattr(self.algo, "vf_clip", None)
        if clip is not None:
            v_clipped = batch["val"] + tf.clip_by_value(v - batch["val"], -clip, clip)
            loss = tf.maximum(loss, tf.square(v_clipped - batch["ret"]))
        return tf.reduce_mean(loss)

    def clip_grads(self, grads: list[tf.Tensor]) -> list[tf.Tensor]:
        """Scale ``grads`` to a global norm of at most ``algo.max_grad_norm`` (PPO's key; none for VPG
        and TRPO): :func:`clip_by_global_norm`."""
        max_norm = getattr(self.algo, "max_grad_norm", None)
        return grads if max_norm is None else clip_by_global_norm(grads, max_norm)

    def _v_step_graph(self, batch: Batch) -> None:
        with tf.GradientTape() as tape:
            loss = self.loss_v(batch)
        grads = avg_grads(tape.gradient(loss, self.vf_optimizer.params))
        self.vf_optimizer.apply(self.clip_grads(grads))

    def update_v(self, batch: Batch) -> tuple[float, float]:
        """``train_v_iters`` full-batch Adam steps on the value loss, each gradient clipped as
        :meth:`clip_grads` says; return (loss before, loss after)."""
        before = float(self.loss_v(batch))
        for _ in range(self.algo.train_v_iters):
            self._v_step(batch)
        return before, float(self.loss_v(batch))


class OffPolicyTFLearner(OffPolicyLearner, TFLearner):
    """What DDPG, TD3 and SAC share in TensorFlow: targets, the polyak average and the compiled update.

    Each gradient step is one compiled call of the algorithm's :meth:`update_networks` (traced once
    per value of ``policy_step``); with ``backend.compile_bursts`` the steps of one burst of the loop
    are one compiled call (:meth:`update_burst`). Acting runs in numpy on a copy of the policy's
    weights, or through a compiled TF function for CNN networks.
    """

    #: the most bytes of minibatches that one compiled burst stacks (a longer burst is several calls)
    BURST_BYTES = 64 << 20

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self._update = self.function(self.update_networks)
        self._burst = self.function(self._burst_graph)

    @property
    def compiles_bursts(self) -> bool:
        """Whether :meth:`update_burst` runs a burst as one compiled call: ``backend.compile_bursts``, for
        algorithms whose every step is the same graph (no policy delay: TD3 and CrossQ take one call
        per step) and whose update does nothing outside it (CrossQ's averaging over ranks)."""
        return (
            self.cfg.backend.compile_bursts
            and self.policy_delay == 1
            and type(self).compute_update is OffPolicyTFLearner.compute_update
        )

    def update_burst(self, sample: Callable[[], Batch], steps: int) -> list[Stats]:
        """With :attr:`compiles_bursts`, the burst's minibatches drawn up front (in the order the eager
        loop draws them, up to :attr:`BURST_BYTES` at a time) and stacked, their steps run by one
        compiled loop (:meth:`_burst_graph`): the per-call costs of TF (argument conversion, the
        function's dispatch, reading the statistics back) are paid once per burst, not once per step.
        The same ops on the same values as the eager loop: the same numbers."""
        if not self.compiles_bursts or steps < 2:
            return super().update_burst(sample, steps)
        out: list[Stats] = []
        while len(out) < steps:
            first = sample()
            size = sum(np.asarray(v).nbytes for v in first.values())
            batches = [first] + [sample() for _ in range(min(steps - len(out), self.BURST_BYTES // size) - 1)]
            if len(batches) == 1:
                out.append(self.update(first))
                continue
            stacked = self.tensors({k: np.stack([b[k] for b in batches]) for k in first})
            stats = {k: v.numpy() for k, v in self._burst(stacked).items()}
            self.n_updates += len(batches)
            out += [
                {k: (v[i] if v.ndim > 1 else float(v[i])) for k, v in stats.items()}
                for i in range(len(batches))
            ]
        self.refresh()
        return out

    def _burst_graph(self, batches: Batch) -> Stats:
        """:meth:`update_networks` on each minibatch of ``batches`` (stacked on a first axis), in order,
        in one graph; its statistics stacked the same way."""
        n = tf.shape(batches["obs"])[0]
        stats = self.update_networks({k: v[0] for k, v in batches.items()}, True)
        arrays = {
            k: tf.TensorArray(v.dtype, size=n, element_shape=v.shape).write(0, v) for k, v in stats.items()
        }
        for i in tf.range(1, n):
            stats = self.update_networks({k: v[i] for k, v in batches.items()}, True)
            arrays = {k: arrays[k].write(i, v) for k, v in stats.items()}
        return {k: a.stack() for k, a in arrays.items()}

    def net_kwargs(self) -> dict[str, Any]:
        net = self.cfg.network
        return {
            "hidden_sizes": net.hidden_sizes,
            "activation": net.activation,
            "rng": self.init_rng,
            "image": self.image,
        }

    @staticmethod
    def target(net: Module, copy: Module) -> Module:
        """``copy`` (a freshly built twin of ``net``) set to ``net``'s values: a target network."""
        for t, v in zip(copy.parameters(), net.parameters(), strict=True):
            t.assign(v)
        return copy

    def polyak_update(self, pairs: list[tuple[Module, Module]]) -> None:
        """targ <- polyak * targ + (1 - polyak) * main, for every (main, target) pair."""
        p = self.algo.polyak
        for main, targ in pairs:
            for t, v in zip(targ.parameters(), main.parameters(), strict=True):
                t.assign(p * t + (1 - p) * v)

    def compute_update(self, batch: Batch, policy_step: bool) -> Stats:
        return self._update(batch, policy_step)

    def to_numpy(self, stats: Stats) -> Stats:
        return {k: (v.numpy() if v.shape.rank else float(v)) for k, v in stats.items()}
