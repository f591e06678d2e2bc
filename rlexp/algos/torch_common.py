"""What the PyTorch learners share: threads and device set-up, flat parameter buffers, the library
state and checkpoint files, and the on-policy (actor-critic + value function) and off-policy
(targets, polyak, frozen critics) bases. The twin of tf_common.py; what does not depend on the
backend is in learner.py.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import inspect
import math
import os
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

import rlexp.comm as comm
from rlexp.algos.learner import Batch, Learner, OffPolicyLearner, OnPolicyLearner, Stats
from rlexp.checkpoint import load_torch, save_torch
from rlexp.cluster import rank_gpu
from rlexp.comm.torch import avg_grads, sync_params
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
from rlexp.nn.kernels import LEGACY_MIN_MACS, onednn_min_macs
from rlexp.nn.torch import (
    ActorCritic,
    GaussianActor,
    Recurrent,
    TorchForward,
    linear_layers,
    set_onednn_min_macs,
)
from rlexp.schema import BackendConfig, RLExpConfig, cxx_compiler
from rlexp.seeding import RankSeeds


def _eager(method: Any) -> None:
    """Let an optimizer method that torch wraps with ``torch._disable_dynamo`` run without importing
    torch._dynamo (~1.3 s, as long as torch's own import, in every process of a torch run).

    torch imports Dynamo on the first call of such a method, only to run it unseen by Dynamo; rlexp
    compiles only with ``backend.compile`` (:class:`CompiledUpdate`). The wrapper caches what it would
    call on the function (``__dynamo_disable``): given this one, the function runs as it is when nothing
    is being compiled, and is handed to Dynamo's ``disable`` when something is (a user's
    ``torch.compile`` in the same process), as torch does.
    Where torch's wrapper is not the one expected, nothing changes (Dynamo is imported, as before).
    """
    fn = getattr(method, "__wrapped__", None)
    if fn is None or hasattr(fn, "__dynamo_disable"):
        return

    def call(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            from torch._dynamo import disable

            return disable(fn, wrapping=False)(*args, **kwargs)
        return fn(*args, **kwargs)

    setattr(fn, "__dynamo_disable", call)


for _name in ("add_param_group", "zero_grad", "state_dict", "load_state_dict"):
    _eager(getattr(torch.optim.Optimizer, _name))


def torch_step(
    cls: type[torch.optim.Optimizer], optimizer: torch.optim.Optimizer, closure: Any = None
) -> Any:
    """``cls.step(optimizer, closure)``, torch's own step, without the wrapper that imports torch._dynamo
    on every call (``_use_grad_for_differentiable``: it turns gradients off unless the optimizer is
    ``differentiable`` and marks a graph break for Dynamo, which means nothing when nothing compiles;
    see :func:`_eager`). The profiler's and the global step hooks' wrapper is left out with it."""
    step = inspect.unwrap(cls.step)
    if optimizer.defaults.get("differentiable") or torch.compiler.is_compiling():
        return cls.step(optimizer, closure)
    with torch.no_grad():
        return step(optimizer, closure)


class FusedAdam(torch.optim.Adam):
    """torch.optim.Adam with its fused kernel (one pass over all tensors instead of a loop per tensor;
    the same update rule, so TF's Adam still matches it), whose step calls that kernel directly.

    torch's ``Adam.step`` spends about as long in Python (hooks, profiler records, grouping tensors by
    device, argument checks) as the kernel itself takes on these networks (~100 us a step on a CPU).
    Once every parameter has its state, :meth:`step` does what ``torch.optim.adam._fused_adam`` does
    for one group on one device: count the step, then call ``torch._fused_adam_`` with the group's
    values; the same kernel with the same arguments, so the same numbers and the same state_dict.
    """

    def __init__(
        self, params: Iterable[torch.Tensor], lr: float, eps: float, betas: tuple[float, float] = (0.9, 0.999)
    ) -> None:
        super().__init__(list(params), lr=lr, eps=eps, betas=betas, fused=True)
        self._tensors: tuple[list[torch.Tensor], ...] | None = None

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        if closure is not None or len(self.param_groups) != 1:
            return torch_step(torch.optim.Adam, self, closure)
        group = self.param_groups[0]
        params = group["params"]
        # the gradients of the last step, unless zero_grad(set_to_none) or backward made new ones
        if self._tensors is None or any(
            g is not p.grad for g, p in zip(self._tensors[1], params, strict=True)
        ):
            if any(p.grad is None or not self.state.get(p) for p in params):
                # the first step makes the state (and a missing grad: torch's rules)
                return torch_step(torch.optim.Adam, self)
            states = [self.state[p] for p in params]
            plain = not (group["amsgrad"] or group["maximize"] or group.get("decoupled_weight_decay"))
            fast = (
                plain
                and group["weight_decay"] == 0
                and all(isinstance(s["step"], torch.Tensor) for s in states)
            )
            same = len({(p.device, p.dtype) for p in params}) == 1 and params[0].device.type == "cpu"
            if not (fast and same):
                return torch_step(torch.optim.Adam, self)
            grads = [p.grad for p in params]
            self._tensors = (
                params,
                grads,
                [s["exp_avg"] for s in states],
                [s["exp_avg_sq"] for s in states],
                [s["step"] for s in states],
            )
        params, grads, exp_avgs, exp_avg_sqs, steps = self._tensors
        beta1, beta2 = group["betas"]
        with torch.no_grad():
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"],
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
        return None

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self._tensors = None  # the state tensors are new objects


class CenteredRMSprop(torch.optim.RMSprop):
    """torch.optim.RMSprop with ``centered=True`` (no momentum, no weight decay): the Nature DQN's and
    MinAtar's optimizer. On a CPU its step does torch's arithmetic itself, with numpy's square root.

    torch's float32 square root on a CPU is not correctly rounded (one ulp off for ~15% of inputs) and
    takes ~7x longer where its input is zero (600 us against 110 us over 263k values here), and zeros
    are common in this optimizer's averages: every weight whose gradient has always been zero keeps
    them at zero (a third of the network's in MinAtar Breakout, the weights reading convolution
    channels that never turn on). numpy's square root is correctly rounded, as TF's is, and takes the
    same time on any input. The step also skips the Python around torch's (hooks, profiler records,
    argument checks), as :class:`FusedAdam` does. The state and its state_dict are torch's.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, alpha: float, eps: float) -> None:
        super().__init__(list(params), lr=lr, alpha=alpha, eps=eps, centered=True)

    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        group = self.param_groups[0]
        params = [p for p in group["params"] if p.grad is not None]
        if (
            closure is not None
            or len(self.param_groups) != 1
            or any(
                p.device.type != "cpu" or p.dtype != torch.float32 or not self.state.get(p) for p in params
            )
        ):
            # the first step makes the state; a GPU: torch's own step
            return torch_step(torch.optim.RMSprop, self, closure)
        alpha, eps, lr = group["alpha"], group["eps"], group["lr"]
        with torch.no_grad(), np.errstate(invalid="ignore"):  # a negative variance: NaN, as torch's
            for p in params:
                grad, state = p.grad, self.state[p]
                state["step"] += 1
                square_avg, grad_avg = state["square_avg"], state["grad_avg"]
                square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                grad_avg.lerp_(grad, 1 - alpha)
                avg = square_avg.addcmul(grad_avg, grad_avg, value=-1)
                np.sqrt(avg.numpy(), out=avg.numpy())
                p.addcdiv_(grad, avg.add_(eps), value=-lr)
        return None


def rmsprop(params: Iterable[torch.Tensor], lr: float, alpha: float, eps: float) -> torch.optim.RMSprop:
    """Centered RMSprop for rlexp's learners: :class:`CenteredRMSprop`."""
    return CenteredRMSprop(params, lr=lr, alpha=alpha, eps=eps)


def adam(
    params: Iterable[torch.Tensor], lr: float, eps: float = 1e-8, betas: tuple[float, float] = (0.9, 0.999)
) -> torch.optim.Adam:
    """Adam for rlexp's learners: :class:`FusedAdam`."""
    return FusedAdam(params, lr=lr, eps=eps, betas=betas)


def flatten_(params: list[torch.nn.Parameter], grads: bool = True) -> torch.Tensor:
    """Move ``params`` into one contiguous tensor and return it.

    Each parameter stays the same Parameter object with the same values, but its data becomes a view
    of the returned tensor; with ``grads`` each also gets a gradient that is a view of ``flat.grad``
    (zeroed; backward adds into it in place). Adam, the polyak average and the MPI gradient average
    then run once on one tensor instead of once per layer, and the allreduce needs no packing.
    Parameters must then only change in place (optimizers, ``load_state_dict`` and ``copy_`` do).
    """
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    if grads:
        flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset : offset + n].view_as(p)
        if grads:
            p.grad = flat.grad[offset : offset + n].view_as(p)
        offset += n
    return flat


def clip_flat_grad_(flat: torch.Tensor, max_norm: float) -> None:
    """Scale the gradient of the flat parameter ``flat`` (:func:`flatten_`) to a norm of at most ``max_norm``:
    ``torch.nn.utils.clip_grad_norm_``'s rule (the factor ``max_norm / (norm + 1e-6)``, at most 1, applied
    without a branch) for one tensor, without its grouping of tensors by device (~80 us a call)."""
    grad = flat.grad
    assert grad is not None
    grad.mul_((max_norm / (torch.linalg.vector_norm(grad) + 1e-6)).clamp_(max=1.0))


class FlatLayout:
    """Where each parameter of some modules sits in their flat tensor (:func:`flatten_`, in
    ``parameters()`` order, module after module): ``layout(flat)`` is the modules as functions of
    ``flat`` (or of an equal-layout copy, a target network's), each through
    ``torch.func.functional_call`` on named views of its part of ``flat``: what a compiled update
    (:class:`CompiledUpdate`) runs them on.

    The modules' buffers (batch renormalisation's running statistics, which a training pass updates
    in place) are the update's groups too, named ``key.i.name`` (:meth:`buffers`); ``layout(flat,
    groups)`` calls the modules on those, so that a stage's gradient may update them (a tensor that a
    gradient transform's function changes in place must be one of its arguments).

    :param key: the prefix of the buffers' group names.
    """

    def __init__(self, *modules: torch.nn.Module, key: str = "") -> None:
        self.modules, self.key = modules, key
        self.names = [[name for name, _ in m.named_parameters()] for m in modules]
        self.shapes = [[p.shape for p in m.parameters()] for m in modules]
        self.sizes = [[p.numel() for p in m.parameters()] for m in modules]
        self.buffer_names = [[name for name, _ in m.named_buffers()] for m in modules]

    def buffers(self) -> dict[str, torch.Tensor]:
        """The modules' buffers by group name (``key.i.name``), detached (the modules' own tensors)."""
        return {
            f"{self.key}.{i}.{name}": b.detach()
            for i, m in enumerate(self.modules)
            for name, b in m.named_buffers()
        }

    def params(self, flat: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Each module's named views of ``flat``."""
        parts = flat.split([sum(sizes) for sizes in self.sizes])
        return [
            {n: x.view(shape) for n, x, shape in zip(names, part.split(sizes), shapes, strict=True)}
            for part, names, shapes, sizes in zip(parts, self.names, self.shapes, self.sizes, strict=True)
        ]

    def __call__(
        self, flat: torch.Tensor, groups: dict[str, torch.Tensor] | None = None
    ) -> list[Callable[..., Any]]:
        """The modules as functions of ``flat``, on the buffers in ``groups`` (None: their own)."""

        def bound(module: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> Callable[..., Any]:
            return lambda *args, **kwargs: torch.func.functional_call(module, tensors, args, kwargs)

        tensors = self.params(flat)
        if groups is not None:
            for i, (part, names) in enumerate(zip(tensors, self.buffer_names, strict=True)):
                part.update({name: groups[f"{self.key}.{i}.{name}"] for name in names})
        return [bound(m, p) for m, p in zip(self.modules, tensors, strict=True)]


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The state tensors of the one parameter of ``optimizer`` (:class:`FusedAdam`: step, exp_avg,
    exp_avg_sq; :class:`CenteredRMSprop`: step, square_avg, grad_avg), made as torch's first step makes
    them when there are none yet, so that its ``state_dict`` is the one of the eager optimizer."""
    (param,) = optimizer.param_groups[0]["params"]
    state = optimizer.state[param]
    zeros = lambda: torch.zeros_like(param, memory_format=torch.preserve_format)  # noqa: E731
    if isinstance(optimizer, torch.optim.Adam):
        if not state:
            step = torch.zeros((), dtype=torch.float32, device=param.device)  # fused: on the device
            state.update(step=step, exp_avg=zeros(), exp_avg_sq=zeros())
        return [state["step"], state["exp_avg"], state["exp_avg_sq"]]
    if not state:
        state.update(step=torch.zeros((), dtype=torch.float32), square_avg=zeros(), grad_avg=zeros())
    return [state["step"], state["square_avg"], state["grad_avg"]]


def own_code(method: Callable[..., Any]) -> Callable[..., Any]:
    """The bound method ``method`` with a code object of its own. Dynamo keeps the programs it compiled
    from a function with the function's code object, at most 8 (``recompile_limit``), each guarded by
    the objects it read (here the learner): the learners of one process (tests, an in-process sweep)
    would share one method's list, and the ninth would fail to compile. With its own code object each
    compiled update has its own list, dropped with it."""
    fn = method.__func__  # type: ignore[attr-defined]
    clone = types.FunctionType(
        fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    return types.MethodType(clone, method.__self__)  # type: ignore[attr-defined]


#: a compiled update's loss: (all parameter groups by name, the batch, the statistics of the stages
#: before) -> (the loss, its statistics)
StageLoss = Callable[[dict[str, torch.Tensor], Batch, Stats], tuple[torch.Tensor, Stats]]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One optimizer step inside a :class:`CompiledUpdate`: the gradient of ``loss`` with respect to the
    parameter group ``group`` (the others held constant, as frozen critics are in a policy step), clipped
    to the global norm ``max_grad_norm`` (None: not clipped), then ``optimizer``'s rule on the group.
    ``stat`` names the loss in the update's statistics."""

    group: str
    loss: StageLoss
    optimizer: torch.optim.Optimizer
    stat: str
    max_grad_norm: float | None = None


class CompiledUpdate:
    """One gradient step of a learner, all its optimizer steps in order (DQN: one; SAC: the critics,
    the policy, alpha) and then ``finish`` (the polyak average of the targets), as one function
    compiled by ``torch.compile`` (``backend.compile``), where the eager step dispatches ~60 ops per
    optimizer step from Python and runs autograd's engine. Each stage's loss is the learner's own
    (written on functions of its flat parameters, :class:`FlatLayout`), its gradient comes from
    ``torch.func.grad_and_value``, and the clip and the optimizer's rule (:class:`FusedAdam`'s or
    :class:`CenteredRMSprop`'s, on the optimizer's own state) are tensor arithmetic. Inductor fuses them
    into a few C++ loops: the same arithmetic, rounded differently (sums in another order), deterministic
    from call to call, so a resumed run continues exactly. With several ranks each stage is two compiled
    calls, its gradient and its rule, around the MPI average, and ``finish`` runs as it is.

    :param groups: the flat parameters by name (:func:`flatten_`, and the targets' flat tensors): the
        stages' groups and whatever their losses read, buffers that they update included
        (:meth:`FlatLayout.buffers`).
    :param stages: the optimizer steps, in order; a stage's loss sees the groups as the stages before it
        left them, and their statistics.
    :param finish: ``finish(groups)``, in place and without gradients, after the stages (None: nothing).

    The compiled function is specialised to the shapes of the batch's tensors: one compilation per
    process, 4-80 s here, reported by :attr:`seconds`.
    """

    def __init__(
        self,
        groups: dict[str, torch.Tensor],
        stages: list[Stage],
        finish: Callable[[dict[str, torch.Tensor]], None] | None = None,
    ) -> None:
        self.groups, self.stages, self.finish = groups, stages, finish
        #: seconds of the first call, which compiles (None until then)
        self.seconds: float | None = None
        self._compiled: list[Callable[..., Any]] | None = None  # made at the first step

    def _compile(self) -> list[Callable[..., Any]]:
        """The compiled functions, made at the first step (``torch.compile`` imports Dynamo, ~1.3 s: a
        learner built to act, ``rlexp.load`` or test_policy of a compiled run, never pays it): the whole
        update with one rank, else each stage's gradient and the rule."""
        compiled = lambda fn: torch.compile(fn, fullgraph=True, dynamic=False)  # noqa: E731
        if comm.num_procs() == 1:
            return [compiled(own_code(self._whole))]
        n = len(self.stages)
        return [
            compiled(functools.partial(own_code(f), i))
            for f in (self._gradient, self._step_rule)
            for i in range(n)
        ]

    def _gradient(
        self, i: int, groups: dict[str, torch.Tensor], batch: Batch, before: Stats
    ) -> tuple[torch.Tensor, torch.Tensor, Stats]:
        stage = self.stages[i]

        def loss(flat: torch.Tensor, others: dict[str, torch.Tensor]) -> tuple[torch.Tensor, Stats]:
            return stage.loss({**others, stage.group: flat}, batch, before)

        # the other groups as arguments, not captured: the loss may update buffers among them in place
        others = {name: t for name, t in groups.items() if name != stage.group}
        grad, (value, stats) = torch.func.grad_and_value(loss, has_aux=True)(groups[stage.group], others)
        return grad, value, stats

    @staticmethod
    def _rule(
        flat: torch.Tensor,
        grad: torch.Tensor,
        state: list[torch.Tensor],
        coef: torch.Tensor,
        group: dict[str, Any],
        max_grad_norm: float | None,
    ) -> None:
        if max_grad_norm is not None:  # clip_flat_grad_'s rule
            grad = grad * (max_grad_norm / (torch.linalg.vector_norm(grad) + 1e-6)).clamp(max=1.0)
        state[0].add_(1)
        if "betas" in group:  # torch._fused_adam_'s arithmetic; coef: lr / (1 - beta1^t), sqrt(1 - beta2^t)
            _, m, v = state
            beta1, beta2 = group["betas"]
            m.lerp_(grad, 1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            flat.sub_(coef[0] * m / (v.sqrt() / coef[1] + group["eps"]))
        else:  # CenteredRMSprop's; coef: lr
            _, square_avg, grad_avg = state
            alpha = group["alpha"]
            square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
            grad_avg.lerp_(grad, 1 - alpha)
            avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt() + group["eps"]
            flat.sub_(coef[0] * grad / avg)

    def _step_rule(
        self, i: int, flat: torch.Tensor, grad: torch.Tensor, state: list[torch.Tensor], coef: torch.Tensor
    ) -> None:
        stage = self.stages[i]
        self._rule(flat, grad, state, coef, self._hyper(stage), stage.max_grad_norm)

    def _hyper(self, stage: Stage) -> dict[str, Any]:
        """The numbers of ``stage``'s optimizer that its rule reads (compiled in as constants)."""
        group = stage.optimizer.param_groups[0]
        return {k: group[k] for k in ("betas", "eps", "alpha") if k in group}

    def _whole(
        self,
        groups: dict[str, torch.Tensor],
        batch: Batch,
        states: list[list[torch.Tensor]],
        coefs: list[torch.Tensor],
    ) -> Stats:
        def step(i: int, stats: Stats) -> tuple[torch.Tensor, Stats]:
            stage = self.stages[i]
            grad, value, more = self._gradient(i, groups, batch, stats)
            self._rule(
                groups[stage.group], grad, states[i], coefs[i], self._hyper(stage), stage.max_grad_norm
            )
            return value, more

        return self._run(groups, step)

    def _run(
        self, groups: dict[str, torch.Tensor], step: Callable[[int, Stats], tuple[torch.Tensor, Stats]]
    ) -> Stats:
        """The stages in order, ``step(i, stats so far) -> (stage i's loss, its statistics)``, then
        ``finish``: the update's statistics."""
        stats: Stats = {}
        for i, stage in enumerate(self.stages):
            value, more = step(i, stats)
            stats = {**stats, **more, stage.stat: value}
        if self.finish is not None:
            with torch.no_grad():
                self.finish(groups)
        return stats

    @staticmethod
    def _coefficients(optimizer: torch.optim.Optimizer, t: float) -> torch.Tensor:
        """The rule's scalars for the optimizer's ``t``-th step (counted from 1) as a float64 tensor
        (numbers would be compiled in as constants; powers computed inside the compiled function were
        recomputed per vector of parameters): Adam's ``lr / (1 - beta1^t)`` and ``sqrt(1 - beta2^t)``,
        in double as torch's fused kernel computes them; RMSprop's ``lr``."""
        group = optimizer.param_groups[0]
        lr = float(group["lr"])
        device = group["params"][0].device
        if "betas" not in group:
            return torch.tensor([lr], dtype=torch.float64, device=device)
        beta1, beta2 = group["betas"]
        values = [lr / (1 - beta1**t), math.sqrt(1 - beta2**t)]
        return torch.tensor(values, dtype=torch.float64, device=device)

    def __call__(self, batch: Batch) -> Stats:
        """One update on ``batch`` (tensors): the stages' statistics, each stage's loss under its ``stat``."""
        start = time.perf_counter() if self.seconds is None else None
        if self._compiled is None:
            self._compiled = self._compile()
        groups = {name: flat.detach() for name, flat in self.groups.items()}
        states = [optimizer_state(stage.optimizer) for stage in self.stages]
        if len(self._compiled) == 1:
            coefs = [
                self._coefficients(s.optimizer, float(st[0]) + 1)
                for s, st in zip(self.stages, states, strict=True)
            ]
            stats = self._compiled[0](groups, batch, states, coefs)
        else:
            n = len(self.stages)
            gradients, rules = self._compiled[:n], self._compiled[n:]

            def step(i: int, before: Stats) -> tuple[torch.Tensor, Stats]:
                stage, state = self.stages[i], states[i]
                grad, value, more = gradients[i](groups, batch, before)
                param = self.groups[stage.group]
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                param.grad.copy_(grad)
                avg_grads([param])
                coef = self._coefficients(stage.optimizer, float(state[0]) + 1)
                rules[i](groups[stage.group], param.grad, state, coef)
                return value, more

            stats = self._run(groups, step)
        if start is not None:
            self.seconds = time.perf_counter() - start
        return stats


class CompiledBurst:
    """Several gradient steps in a row, each a :class:`CompiledUpdate`'s (the step with the policy's or
    without it, TD3's delay), as one compiled call: the steps unrolled into one program, so that the
    per-call costs (Dynamo's guards, the wrappers around the compiled code, ~0.2 ms here) are paid once
    for all of them. The steps are the updates' own (the same losses, rules and random draws, given in
    each step's minibatch), in order; inductor may fuse across them, so the numbers are those of one call
    a step up to rounding, and the same from call to call. One rank only: with several, each stage's
    gradient is averaged between two compiled calls.

    :param updates: the update of each step, in order (one compilation per sequence of them).
    """

    def __init__(self, updates: list[CompiledUpdate]) -> None:
        self.updates = updates
        #: seconds of the first call, which compiles (None until then)
        self.seconds: float | None = None
        self._compiled: Callable[..., Any] | None = None

    def _steps(
        self,
        groups: dict[str, torch.Tensor],
        batches: list[Batch],
        states: list[list[list[torch.Tensor]]],
        coefs: list[list[torch.Tensor]],
    ) -> list[Stats]:
        return [
            update._whole(groups, batch, state, coef)
            for update, batch, state, coef in zip(self.updates, batches, states, coefs, strict=True)
        ]

    def __call__(self, batches: list[Batch]) -> list[Stats]:
        """The steps on ``batches`` (tensors, each with its step's random draws): each step's statistics."""
        start = time.perf_counter() if self.seconds is None else None
        if self._compiled is None:
            self._compiled = torch.compile(own_code(self._steps), fullgraph=True, dynamic=False)
        groups = {name: flat.detach() for u in self.updates for name, flat in u.groups.items()}
        states = [[optimizer_state(stage.optimizer) for stage in u.stages] for u in self.updates]
        # each optimizer's step count as it will be at each of its steps (TD3's policy skips some)
        counts: dict[int, float] = {}
        coefs = []
        for update, state in zip(self.updates, states, strict=True):
            step_coefs = []
            for stage, st in zip(update.stages, state, strict=True):
                key = id(stage.optimizer)
                counts[key] = counts.get(key, float(st[0])) + 1
                step_coefs.append(update._coefficients(stage.optimizer, counts[key]))
            coefs.append(step_coefs)
        stats = self._compiled(groups, batches, states, coefs)
        if start is not None:
            self.seconds = time.perf_counter() - start
        return stats


def setup_torch(cfg: BackendConfig, procs: int) -> torch.device:
    """Set torch's thread count and return the device named by ``cfg.device``.

    On a GPU, cuDNN computes convolutions only with algorithms that give the same numbers every time:
    its default choices include backward passes that sum with atomics in any order, so the same run
    (or the same run resumed) drifted apart on a GPU within one gradient step of the Nature CNN. With
    deterministic algorithms a GPU run of a CNN resumes exactly, as the CPU's always did.
    """
    n = cfg.threads_per_rank(procs)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    torch.distributions.Distribution.set_default_validate_args(
        False
    )  # argument checks: slow, and ours are valid
    device = torch_device(cfg.device)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    return device


def flushes_denormals() -> bool:
    """Whether this thread's floating-point unit now treats subnormal floats as zero (x86's FTZ/DAZ
    flags, ARM's FZ): the smallest subnormal times one then comes out zero."""
    return bool(np.float32(1e-45) * np.float32(1.0) == 0)


@contextlib.contextmanager
def denormals_flushed(on: bool) -> Iterator[None]:
    """With ``on``, subnormal floats count as zero in this thread inside the block, as in every TensorFlow
    and XLA op on a CPU (``torch.set_flush_denormal``), and as they did before afterwards.

    Subnormals (magnitude below 1.2e-38) take a CPU ~100x longer per operation. Adam's first moment
    decays by 0.9 a step where the gradient is zero (a ReLU unit that stays off): in ~800 steps it
    reaches them, and in a QR-DQN run on CartPole 63% of it was there, which made the fused Adam step
    ~15x slower (1.1 ms against 60 us). The flags are the thread's, so the block is where they hold:
    the env and the rest of the program keep IEEE arithmetic. Where the thread flushes already, or the
    CPU cannot (``set_flush_denormal`` says False), nothing changes.
    """
    if not on or flushes_denormals() or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def torch_device(name: str) -> torch.device:
    """The torch device for ``backend.device`` (cpu, cuda, cuda:N or auto): ``cuda`` and ``auto`` take
    the GPU of the rank's local rank on its node (:func:`rlexp.cluster.rank_gpu`); a CUDA device that
    this machine does not have is refused with an :class:`RLExpError` naming what is available."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    index = rank_gpu(name, count)
    if index is None:
        return torch.device("cpu")
    if index >= count:
        have = f"cuda:0..cuda:{count - 1}" if count else "no CUDA GPU"
        raise RLExpError(f"backend.device={name} but this machine has {have}; use backend.device=cpu or auto")
    return torch.device(f"cuda:{index}")


def machine_onednn_min_macs() -> int | None:
    """This machine's kernel threshold (:func:`rlexp.nn.kernels.onednn_min_macs`), rank 0's on every rank."""
    value = onednn_min_macs() if comm.proc_id() == 0 else 0
    value = int(comm.broadcast_(np.array([-1 if value is None else value], dtype=np.int64))[0])
    return None if value < 0 else value


def continued_seed(state: np.ndarray) -> int:
    """The seed of the ``learner`` stream of a run that continues on another kind of device than it
    saved on (``resume=RUN backend.device=...``): CPU and CUDA generators keep different states, so
    the stream goes on from a seed drawn from the saved state. The same checkpoint continues the same
    way every time, but not as the run would have on its first device."""
    return int.from_bytes(hashlib.blake2b(state.tobytes(), digest_size=8).digest(), "little")


class TorchLearner(Learner):
    """Base of every PyTorch learner: device, generators, library state and ``.pt`` checkpoints.

    Subclasses build their networks inside ``with self.initialising():`` (weights from the ``init``
    stream), list them in :meth:`modules` and their optimizers in :meth:`optimizers`. Randomness
    inside updates comes from :attr:`gen` (the ``learner`` stream), checkpointed as ``torch_rng``.
    """

    CHECKPOINT_SUFFIX = ".pt"
    RNG_KEY = "torch_rng"
    LOAD_ERRORS = (RuntimeError,)

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.device = setup_torch(cfg.backend, comm.num_procs())
        self.init_seed = seeds["init"]
        self.gen = torch.Generator(self.device).manual_seed(seeds["learner"])
        #: the kernel threshold of the torch networks' products (rlexp.nn.kernels): this machine's,
        #: rank 0's for every rank; a resumed run takes its checkpoint's
        self.onednn_min_macs = machine_onednn_min_macs() if self.device.type == "cpu" else None
        set_onednn_min_macs(self.onednn_min_macs)
        #: ``backend.flush_denormal``: updates count subnormal floats as zero (see :func:`denormals_flushed`)
        self.flush_denormal: bool = cfg.backend.flush_denormal

    @contextlib.contextmanager
    def initialising(self) -> Iterator[None]:
        """Build networks in this block: their initial weights come from the ``init`` stream (torch's
        global generator, seeded for the block and then put back as it was)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.init_seed)
            yield

    def modules(self) -> dict[str, torch.nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    @staticmethod
    def sync(*modules: torch.nn.Module) -> None:
        """Copy rank 0's parameters of ``modules`` to all ranks (before targets are copied from them)."""
        sync_params(p for m in modules for p in m.parameters())

    def tensors(self, batch: Batch) -> Batch:
        return {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}

    def noise(self, shape: tuple[int, ...]) -> torch.Tensor:
        """A standard normal draw of ``shape`` from the ``learner`` stream."""
        return torch.randn(shape, generator=self.gen, device=self.device)

    def library_state(self) -> dict[str, Any]:
        return {
            "modules": {k: m.state_dict() for k, m in self.modules().items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
            self.RNG_KEY: self.gen.get_state(),
        }

    def load_library_state(self, state: dict[str, Any]) -> None:
        for k, m in self.modules().items():
            m.load_state_dict(state["modules"][k])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        saved = state[self.RNG_KEY]
        if saved.numel() == self.gen.get_state().numel():
            self.gen.set_state(saved)
        else:  # a CUDA generator's state (16 bytes) on the CPU or the other way round: resumed on another device
            self.gen.manual_seed(continued_seed(saved.numpy()))

    def extra_state(self) -> dict[str, Any]:
        return {
            **super().extra_state(),
            "onednn_min_macs": -1 if self.onednn_min_macs is None else self.onednn_min_macs,
        }

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        saved = int(
            state.get("onednn_min_macs", LEGACY_MIN_MACS)
        )  # saved before it was measured: the old rule
        self.onednn_min_macs = None if saved < 0 or self.device.type != "cpu" else saved
        set_onednn_min_macs(self.onednn_min_macs)

    def write_file(self, path: str | os.PathLike, state: dict[str, Any]) -> None:
        save_torch(path, state)

    def read_file(self, path: str | os.PathLike) -> dict[str, Any]:
        # onto the CPU: the loop's part (replay, RNG states) becomes numpy again, and the networks'
        # and optimizers' load_state_dict copy their tensors to the device the parameters are on
        return load_torch(path, map_location="cpu")


class OnPolicyTorchLearner(OnPolicyLearner, TorchLearner):
    """The actor-critic and value-function training of VPG, TRPO and PPO in PyTorch.

    Subclasses implement ``update_networks(batch) -> stats`` with their policy step, calling
    :meth:`update_v` for the value function. Acting runs in numpy on a copy of the MLP weights, or
    through torch for CNN networks (:mod:`rlexp.nn.acting`).
    """

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.discrete = isinstance(act_space, spaces.Discrete)
        net = cfg.network
        algo = self.algo
        with self.initialising():
            self.ac = ActorCritic(
                self.obs_dim,
                act_space,
                net.hidden_sizes,
                net.activation,
                self.image,
                algo.log_std_init,
                algo.ortho_init,
                None if net.recurrent is None else (net.recurrent, net.recurrent_size),
                net.recurrent_critic,
                algo.use_sde,
            ).to(self.device)
        self.sync(self.ac)
        self.vf_optimizer = adam(self.ac.v.parameters(), algo.vf_lr, algo.adam_eps)
        pi, v = self.ac.pi, self.ac.v
        head = pi.mu_net if isinstance(pi, GaussianActor) else pi.logits_net
        log_std = (lambda: pi.log_std.detach().cpu().numpy()) if isinstance(pi, GaussianActor) else None
        # the policy's MLP in numpy: to its output, or with gSDE to its latent features (last hidden layer)
        pi_mlp, log_std, sde = policy_head(
            lambda: linear_layers(head),
            net.activation,
            log_std,
            self.rng,
            cfg.env.num_envs,
            isinstance(pi, GaussianActor) and pi.sde,
        )
        if net.recurrent is not None:  # numpy heads and cells after the encoder (a CNN's in torch)
            self.acting = self.recurrent_acting(pi_mlp, log_std, sde)
            return
        if self.image is None:
            pi_out: Forward = pi_mlp
            v_out: Forward = MLPCopy(lambda: linear_layers(v.v_net), net.activation)
        else:
            to_out = head if sde is None else pi.latent  # type: ignore[union-attr]
            pi_out = TorchForward(lambda o: to_out(pi.encoder(o)), self.device)
            v_out = TorchForward(lambda o: v.v_net(v.encoder(o)), self.device)
        self.acting = ActorCriticActing(pi_out, v_out, log_std, self.rng, sde)

    def recurrent_acting(
        self, pi_mlp: MLPCopy, log_std: Any, sde: StateDependentNoise | None
    ) -> RecurrentActing:
        """Acting with recurrent networks: the encoders (a CNN through torch), then each network's
        recurrent cell and MLP head in numpy, a state per env of the rank (and one for ``act``)."""
        net, pi, v = self.cfg.network, self.ac.pi, self.ac.v

        def cell(encoder: Recurrent) -> RecurrentCell:
            rnn = encoder.rnn
            return RecurrentCell(
                encoder.kind,
                lambda: [
                    (rnn.weight_ih_l0.detach().cpu().numpy(), rnn.bias_ih_l0.detach().cpu().numpy()),
                    (rnn.weight_hh_l0.detach().cpu().numpy(), rnn.bias_hh_l0.detach().cpu().numpy()),
                ],
            )

        def inner(encoder: Recurrent) -> Forward | None:
            return None if self.image is None else TorchForward(encoder.inner, self.device)

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

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"ac": self.ac}

    def update(self, batch: Batch) -> Stats:
        with denormals_flushed(self.flush_denormal):
            return super().update(batch)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"vf": self.vf_optimizer}

    def tensors(self, batch: Batch) -> Batch:
        """The epoch's arrays as tensors on the device (actions as int64 for Discrete; recurrent
        networks' observations as :class:`rlexp.nn.Sequences` of tensors)."""
        seqs = batch.get("obs")
        if isinstance(seqs, Sequences):
            batch = {**batch, "obs": np.zeros(0)}
        out = super().tensors(batch)
        out["act"] = out["act"].long() if self.discrete else out["act"].float()
        if isinstance(seqs, Sequences):
            dev = self.device
            out["obs"] = Sequences(
                torch.as_tensor(seqs.obs, device=dev),
                torch.as_tensor(seqs.valid, device=dev),
                {k: tuple(torch.as_tensor(x, device=dev) for x in v) for k, v in seqs.states.items()},
            )
        return out

    def loss_v(self, batch: Batch) -> torch.Tensor:
        """Mean squared error of V(s) against the rewards-to-go; with ``algo.vf_clip`` (PPO), the larger of
        it and the error of V(s) clipped to within vf_clip of its value at collection time (SB3's
        clip_range_vf, CleanRL's clip_vloss)."""
        v = self.ac.v(batch["obs"])
        loss = (v - batch["ret"]) ** 2
        clip = getattr(self.algo, "vf_clip", None)
        if clip is not None:
            v_clipped = batch["val"] + torch.clamp(v - batch["val"], -clip, clip)
            loss = torch.maximum(loss, (v_clipped - batch["ret"]) ** 2)
        return loss.mean()

    def clip_grads(self, params: list[torch.Tensor]) -> None:
        """Scale the (rank-averaged) gradient of ``params`` to a global norm of at most
        ``algo.max_grad_norm`` (PPO's key; none for VPG and TRPO)."""
        max_norm = getattr(self.algo, "max_grad_norm", None)
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_norm)

    def update_v(self, batch: Batch) -> tuple[float, float]:
        """``train_v_iters`` full-batch Adam steps on the value loss, each gradient clipped as
        :meth:`clip_grads` says; return (loss before, loss after)."""
        params = list(self.ac.v.parameters())
        with torch.no_grad():
            before = self.loss_v(batch).item()
        for _ in range(self.algo.train_v_iters):
            self.vf_optimizer.zero_grad()
            self.loss_v(batch).backward()
            avg_grads(params)
            self.clip_grads(params)
            self.vf_optimizer.step()
        with torch.no_grad():
            after = self.loss_v(batch).item()
        return before, after


class OffPolicyTorchLearner(OffPolicyLearner, TorchLearner):
    """What DDPG, TD3 and SAC share in PyTorch: targets, flat parameter groups, the optimizer step,
    the polyak average and frozen critics. Acting runs the torch policy on one observation.

    Subclasses build their networks in :meth:`initialising`, :meth:`sync` them, copy targets
    (:meth:`target`), flatten each group with its targets (:meth:`flat_group`) and make optimizers.
    Those whose config class has ``TORCH_COMPILE`` give their step's stages (:meth:`compiled_stages`)
    and, with ``backend.compile``, run each step through :meth:`compiled_update`.
    """

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        #: ``backend.compile``: each gradient step one compiled call (:meth:`compiled_update`); null
        #: (auto) is eager until the loop calls :meth:`choose_compile`
        self.compiles: bool = bool(getattr(cfg.backend, "compile", False))
        #: the choice that ``backend.compile=null`` made for the run whose checkpoint was loaded (None: none)
        self.recorded_compile: bool | None = None
        self._compiled: dict[bool, CompiledUpdate] = {}  # by policy_step, built at first use
        self._bursts: dict[tuple[bool, ...], CompiledBurst] = {}  # by the steps' policy_step, at first use
        self._compile_logged: set[Any] = set()  # those whose compile time log_lines() gave

    def choose_compile(self, planned_steps: int) -> tuple[bool | None, str | None]:
        """``backend.compile`` as given; null: the choice recorded in the checkpoint this run continues
        from (so that it continues exactly), else on where compiling pays: an algorithm with a compiled
        step on the CPU (where it was measured), a C++ compiler for inductor, and at least
        ``backend.compile_min_steps`` planned gradient steps per rank, the seconds of compiling being
        won back by then. All ranks agree (the minimum over them): a compiled rank rounds differently."""
        backend = self.cfg.backend
        if backend.compile is not None:
            return self.compiles, None
        if self.recorded_compile is not None:
            self.compiles = self.recorded_compile
            return self.compiles, None
        cxx, has_cxx = cxx_compiler()
        pays = (
            type(self.cfg.algo).TORCH_COMPILE
            and self.device.type == "cpu"
            and planned_steps >= backend.compile_min_steps
        )
        self.compiles = bool(comm.mpi_min(int(pays and has_cxx)))
        if self.compiles:
            return True, (
                f"backend.compile=null: each gradient step compiled by torch.compile ({planned_steps:,} planned "
                f"per rank, at least backend.compile_min_steps={backend.compile_min_steps:,}); "
                "backend.compile=false runs them eagerly"
            )
        if pays:
            where = f"{cxx} ($CXX, else g++) is not on PATH" if not has_cxx else "a rank has no C++ compiler"
            return False, f"backend.compile=null: eager gradient steps; compiling would pay here, but {where}"
        return False, None

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "compiles": self.compiles}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        if "compiles" in state:  # a checkpoint from before backend.compile=null records none
            self.recorded_compile = bool(state["compiles"])

    def compiled_stages(
        self, policy_step: bool
    ) -> tuple[dict[str, torch.Tensor], list[Stage], Callable[[dict[str, torch.Tensor]], None] | None]:
        """A gradient step for :class:`CompiledUpdate`, with or without the policy's step: (the flat
        parameter groups by name, the optimizer steps, what follows them)."""
        raise NotImplementedError(f"{type(self).__name__} has no compiled step")

    def with_draws(self, batch: Batch, policy_step: bool) -> Batch:
        """``batch`` (tensors) with the random draws of its gradient step, drawn from the ``learner``
        stream in the order the step uses them (SAC's actions, TD3's target noise, a noisy network's
        draws); none here. Drawn before the step, so that a compiled step takes them as inputs."""
        return batch

    def compiled_step(self, policy_step: bool) -> CompiledUpdate:
        """The compiled gradient step with or without the policy's (one compilation each, at first use)."""
        update = self._compiled.get(policy_step)
        if update is None:
            update = self._compiled[policy_step] = CompiledUpdate(*self.compiled_stages(policy_step))
        return update

    def compiled_update(self, batch: Batch, policy_step: bool) -> Stats:
        """One gradient step on ``batch`` (tensors, with the step's random draws) as one compiled call
        (one compilation for the steps with the policy's, one for those without)."""
        return self.compiled_step(policy_step)(batch)

    def log_lines(self) -> list[str]:
        lines = []
        for policy_step, update in sorted(self._compiled.items(), reverse=True):
            if update.seconds is None or policy_step in self._compile_logged:
                continue
            self._compile_logged.add(policy_step)
            what = "gradient step" if policy_step else "critics' step (without the policy's)"
            lines.append(f"backend.compile: torch.compile built the {what} in {update.seconds:.1f} s")
        for pattern, burst in self._bursts.items():
            if burst.seconds is None or pattern in self._compile_logged:
                continue
            self._compile_logged.add(pattern)
            lines.append(
                f"backend.compile: torch.compile built {len(pattern)} gradient steps as one call "
                f"(backend.compile_unroll) in {burst.seconds:.1f} s"
            )
        return lines

    def update(self, batch: Batch) -> Stats:
        with denormals_flushed(self.flush_denormal):
            return super().update(batch)

    @property
    def unroll(self) -> int:
        """The gradient steps of a burst that :meth:`update_burst` runs as one compiled call: torch's
        ``backend.compile_unroll`` when the steps compile, with one rank (several average each stage's
        gradient between compiled calls), for algorithms whose step is :meth:`update_networks` alone
        (CrossQ averages its running statistics after it); else 1."""
        if not self.compiles or comm.num_procs() > 1:
            return 1
        if type(self).compute_update is not OffPolicyLearner.compute_update:
            return 1
        return int(getattr(self.cfg.backend, "compile_unroll", 1))

    def update_burst(self, sample: Callable[[], Batch], steps: int) -> list[Stats]:
        """With :attr:`unroll` k > 1, the burst's steps k at a time as one compiled call
        (:class:`CompiledBurst`), the rest one call each: the k minibatches drawn first (the replay's
        stream, in the eager loop's order), then each step's random draws (the learner's stream, in the
        same order as one step at a time). The numbers are those of one call a step up to rounding."""
        k = self.unroll
        with denormals_flushed(self.flush_denormal):
            if k < 2 or steps < k:
                return super().update_burst(sample, steps)
            out: list[Stats] = []
            while steps - len(out) >= k:
                batches = [self.tensors(sample()) for _ in range(k)]
                pattern = tuple((self.n_updates + j) % self.policy_delay == 0 for j in range(k))
                inputs = [self.with_draws(b, p) for b, p in zip(batches, pattern, strict=True)]
                burst = self._bursts.get(pattern)
                if burst is None:
                    burst = self._bursts[pattern] = CompiledBurst([self.compiled_step(p) for p in pattern])
                out += [self.to_numpy(stats) for stats in burst(inputs)]
                self.n_updates += k
            out += super().update_burst(sample, steps - len(out))
            self.refresh()
            return out

    def net_kwargs(self) -> dict[str, Any]:
        net = self.cfg.network
        return {"hidden_sizes": net.hidden_sizes, "activation": net.activation, "image": self.image}

    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    @staticmethod
    def target(module: torch.nn.Module) -> torch.nn.Module:
        """A frozen copy of ``module`` (a target network)."""
        targ = copy.deepcopy(module)
        for p in targ.parameters():
            p.requires_grad_(False)
        return targ

    @staticmethod
    def flat_group(
        mains: list[torch.nn.Module], targs: list[torch.nn.Module]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Flatten the parameters of ``mains`` (with gradients) and of their targets ``targs`` (without):
        (main flat tensor, target flat tensor), element for element the same layout."""
        main = flatten_([p for m in mains for p in m.parameters()])
        return main, flatten_([p for m in targs for p in m.parameters()], grads=False)

    @torch.no_grad()
    def polyak_update(self, pairs: Iterable[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """targ <- polyak * targ + (1 - polyak) * main, for every (main, target) pair of flat tensors."""
        mains, targs = map(list, zip(*pairs, strict=True))
        torch._foreach_mul_(targs, self.algo.polyak)
        torch._foreach_add_(targs, mains, alpha=1 - self.algo.polyak)

    @staticmethod
    @contextlib.contextmanager
    def frozen(params: list[torch.nn.Parameter]) -> Iterator[None]:
        """Gradients of ``params`` off inside the block (the critics during a policy step)."""
        for p in params:
            p.requires_grad_(False)
        try:
            yield
        finally:
            for p in params:
                p.requires_grad_(True)

    @staticmethod
    def optimize(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
        """One step of ``opt`` on ``loss``: zero the gradients in place (a flat parameter's gradient
        is viewed by its layers, see :func:`flatten_`), backward, average them over ranks, step."""
        params = opt.param_groups[0]["params"]
        for p in params:
            if p.grad is not None:
                p.grad.zero_()
        loss.backward()
        avg_grads(params)
        opt.step()

    def to_numpy(self, stats: Stats) -> Stats:
        return {
            k: (v.item() if v.ndim == 0 else v.detach().cpu().numpy()) if isinstance(v, torch.Tensor) else v
            for k, v in stats.items()
        }
