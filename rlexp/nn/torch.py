"""PyTorch networks of the algorithms: MLPs, the Nature CNN, the on-policy actor-critic, the
off-policy actors and Q.

rlexp/nn/tf.py builds the same modules, with the same names and parameter order, in TensorFlow.
Attribute names here are part of the checkpoints (they are the state_dict keys).

Every network reads its observations through ``encoder``: for flat observations an nn.Identity
(no parameters, so the state_dict keys of MLP networks stay as they were), for images
(``image`` given) its own :class:`NatureCNN`, whose 512 features the MLP reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Distribution, Normal

from rlexp.nn import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    MINATAR_CNN_CHANNELS,
    MINATAR_CNN_KERNEL,
    NATURE_CNN_CONVS,
    NATURE_CNN_FEATURES,
    SDE_EPS,
    Image,
    Renorm,
    Sequences,
    minatar_cnn_features,
    nature_cnn_output,
)
from rlexp.nn.acting import Layers

_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _onednn_linear_op() -> Callable[..., torch.Tensor] | None:
    """torch's oneDNN fp32 linear kernel (``torch.ops.mkldnn._linear_pointwise``), or None in a build
    without it."""
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):
        return None


_ONEDNN_LINEAR = _onednn_linear_op()
# Products of rows x in_features x out_features from this size on go through oneDNN on the CPU; None:
# none do. Each torch learner sets it to what this machine measured (rlexp.nn.kernels: no fixed rule
# holds across CPUs) or, resumed, to what its run started with. The value here is the rule measured on
# the 2-vCPU AMD EPYC (a whole Adam step of an MLP: 64 rows through a 256x256 layer (4.2M) no faster, 100
# rows 1.14x, 256 rows 1.45x; docs/benchmarks.md), which every run used before the choice was measured.
ONEDNN_MIN_MACS: int | None = 6_000_000


def set_onednn_min_macs(value: int | None) -> None:
    """Set :data:`ONEDNN_MIN_MACS` (this process's networks: one learner per process)."""
    global ONEDNN_MIN_MACS
    ONEDNN_MIN_MACS = value


class _OneDNNLinear(torch.autograd.Function):
    """``x @ weight.T + bias`` through oneDNN; its backward takes its products through this function
    too, so that it is differentiable again (TRPO's Fisher-vector products differentiate a gradient)."""

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None  # type: ignore[attr-defined]
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")  # type: ignore[misc]

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        x, weight = ctx.saved_tensors  # type: ignore[attr-defined]
        need_x, need_w, need_b = ctx.needs_input_grad  # type: ignore[attr-defined]
        grad_x = _OneDNNLinear.apply(grad, weight.t(), None) if need_x else None  # grad @ weight
        grad_w = _OneDNNLinear.apply(grad.t(), x.t(), None) if need_w else None  # grad.T @ x
        grad_b = grad.sum(0) if need_b and ctx.has_bias else None  # type: ignore[attr-defined]
        return grad_x, grad_w, grad_b


class Linear(nn.Linear):
    """nn.Linear (the same parameters, values and gradients to float32 rounding) whose large products
    on the CPU run on oneDNN, the kernel library TensorFlow uses: on the AMD CPUs measured torch's own
    float32 product ran at about half its speed (see ONEDNN_MIN_MACS). Batches of 2-D float32 rows
    only; anything else, and a torch without oneDNN, takes ``nn.functional.linear``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``x @ weight.T + bias`` as :class:`Linear` computes it: through oneDNN for large float32
    products of 2-D rows on the CPU (see ONEDNN_MIN_MACS), else ``nn.functional.linear``; inside a
    compiled step (``backend.compile``) always the latter, whose kernel inductor chooses (its lowering of
    oneDNN's op takes only constant weights)."""
    if (
        _ONEDNN_LINEAR is not None
        and ONEDNN_MIN_MACS is not None
        and x.dim() == 2
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.shape[0] * weight.shape[0] * weight.shape[1] >= ONEDNN_MIN_MACS
        and not torch.compiler.is_compiling()
    ):
        if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
            return _OneDNNLinear.apply(x, weight, bias)
        return _ONEDNN_LINEAR(x, weight, bias, "none", [], "")
    return nn.functional.linear(x, weight, bias)


# torch's versions of rlexp.nn.ACTIVATIONS
ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "leaky_relu": nn.LeakyReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "sigmoid": nn.Sigmoid,
    "identity": nn.Identity,
}


def mlp(sizes: Sequence[int], activation: str, output_activation: str = "identity") -> nn.Sequential:
    """Linear layers of ``sizes`` (input first), ``activation`` between them, ``output_activation`` last.

    ReLU and tanh run in place on their Linear's output (which nothing else keeps; their backward
    needs only the result): the same values and gradients, without writing a fresh batch x width
    tensor per layer.
    """
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [
            Linear(sizes[i], sizes[i + 1]),
            _activation(activation if i < len(sizes) - 2 else output_activation),
        ]
    return nn.Sequential(*layers)


def linear_layers(seq: nn.Sequential) -> Layers:
    """The (weight, bias) of each Linear in ``seq`` as numpy arrays on the host, for acting in numpy
    (:mod:`rlexp.nn.acting`; views on CPU: the copy there is taken from them)."""
    return [
        (m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy())
        for m in seq
        if isinstance(m, nn.Linear)
    ]


class _NumpyTanh(torch.autograd.Function):
    """tanh in place on a contiguous float32 CPU tensor through numpy's vectorised float32 tanh, with
    torch's backward (``grad * (1 - y^2)`` of the result). numpy's kernel is about 10x faster than
    torch's on the CPUs measured (4,000 x 64: 0.05 against 0.55-0.65 ms; docs/benchmarks.md), which
    made tanh a third of a Spinning Up PPO update; its results are within 1.4 ULP of the exact tanh
    (torch's within 0.5), deterministic on a given machine."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        out = x.detach().numpy()
        np.tanh(out, out=out)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors  # type: ignore[attr-defined]
        return grad * (1 - y * y)


class TanhInPlace(nn.Module):
    """``tanh`` overwriting its input: the values and gradients of nn.Tanh (whose backward uses only
    the result), for use right after a Linear. On the CPU (contiguous float32) numpy computes it
    (:class:`_NumpyTanh`); elsewhere torch's ``tanh_``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype == torch.float32 and x.is_contiguous():
            if not torch.is_grad_enabled() or not x.requires_grad:
                out = x.detach().numpy()
                np.tanh(out, out=out)
                return x
            return _NumpyTanh.apply(x)
        return x.tanh_()


def _activation(name: str) -> nn.Module:
    """A fresh activation module; ReLU and tanh in place (safe right after a Linear: their backward
    needs only the result)."""
    if name == "relu":
        return nn.ReLU(inplace=True)
    return TanhInPlace() if name == "tanh" else ACTIVATIONS[name]()


class NatureCNN(nn.Module):
    """The Nature DQN encoder (Mnih et al. 2015): image observations to NATURE_CNN_FEATURES features.

    Pixels are cast to float32 and divided by 255, put channels first (torch's convolutions want
    NCHW; gymnasium's images are HWC), then :data:`rlexp.nn.NATURE_CNN_CONVS` with ReLU, flattened in
    (C, H, W) order, and a dense layer with ReLU. Any leading dimensions are kept: one observation
    gives one feature vector, a batch a batch of them.

    :param image: the layout of one observation (:func:`rlexp.nn.image_layout`).
    """

    def __init__(self, image: Image) -> None:
        super().__init__()
        self.image = image
        layers: list[nn.Module] = []
        channels = image.chw[0]
        for out, kernel, stride in NATURE_CNN_CONVS:
            layers += [nn.Conv2d(channels, out, kernel, stride), nn.ReLU(inplace=True)]
            channels = out
        self.convs = nn.Sequential(*layers)
        height, width = nature_cnn_output(*image.chw[1:])
        self.fc = Linear(channels * height * width, NATURE_CNN_FEATURES)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        shape = self.image.shape
        lead = obs.shape[: obs.dim() - len(shape)]
        x = obs.reshape(-1, *shape).float() / 255.0
        if len(shape) == 2:
            x = x.unsqueeze(1)
        elif not self.image.channels_first:
            x = x.permute(0, 3, 1, 2)  # a channels-last view: this CNN's convolutions run faster on it
        x = torch.relu(self.fc(self.convs(x).flatten(1)))
        return x.reshape(*lead, NATURE_CNN_FEATURES)


class MinAtarCNN(nn.Module):
    """MinAtar's encoder (Young & Tian 2019): its 0/1 images as float32 (not scaled), channels first,
    one convolution of MINATAR_CNN_CHANNELS 3x3 filters with stride 1 and a ReLU, flattened in (C, H,
    W) order. Leading dimensions are kept.

    :param image: the layout of one observation (:func:`rlexp.nn.image_layout`).
    """

    def __init__(self, image: Image) -> None:
        super().__init__()
        self.image = image
        self.conv = nn.Conv2d(image.chw[0], MINATAR_CNN_CHANNELS, MINATAR_CNN_KERNEL, 1)
        self.features = minatar_cnn_features(image)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        shape = self.image.shape
        lead = obs.shape[: obs.dim() - len(shape)]
        x = obs.reshape(-1, *shape)
        if len(shape) == 2:
            x = x.unsqueeze(1)
        elif not self.image.channels_first:
            x = x.permute(0, 3, 1, 2)
        # contiguous NCHW in one conversion pass, not a channels-last view: on a view the output keeps
        # that layout, and the NCHW flatten and the backward pass behind it copy and run on mixed strides
        # (a MinAtar gradient step ~5% slower; the Nature CNN is the other way round)
        x = x.to(torch.float32, memory_format=torch.contiguous_format)
        return torch.relu(self.conv(x)).flatten(1).reshape(*lead, self.features)


# (kind, size, role) of a recurrent layer: lstm or gru, its units, and the Sequences.states key it reads
RecurrentSpec = tuple[str, int, str]


class Recurrent(nn.Module):
    """An encoder followed by PyTorch's LSTM or GRU (one layer): what a recurrent network reads its
    observations through. It takes :class:`rlexp.nn.Sequences` and returns the recurrent layer's output
    at their valid steps (row-major), starting each sequence from its recorded state ``states[role]``.

    :param inner: the encoder of each observation (nn.Identity, or a CNN), applied to every step.
    :param n_in: the width of ``inner``'s output.
    :param spec: (``lstm`` or ``gru``, units, role: ``pi`` or ``v``).
    """

    def __init__(self, inner: nn.Module, n_in: int, spec: RecurrentSpec) -> None:
        super().__init__()
        self.kind, self.size, self.role = spec
        self.inner = inner
        self.rnn: nn.LSTM | nn.GRU = (nn.LSTM if self.kind == "lstm" else nn.GRU)(
            n_in, self.size, batch_first=True
        )

    def forward(self, seqs: Sequences) -> torch.Tensor:
        x = self.inner(seqs.obs)
        x = x.reshape(*seqs.valid.shape, -1).float()  # (S, L, n_in)
        h0 = tuple(h[None].contiguous() for h in seqs.states[self.role])
        out, _ = self.rnn(x, h0 if self.kind == "lstm" else h0[0])
        return out[seqs.valid]


class SharedRecurrent(nn.Module):
    """V's view of the policy's :class:`Recurrent` (``network.recurrent_critic=shared``): its output
    without a gradient into it (sb3-contrib's shared_lstm). The policy's layer is not a submodule here:
    V's parameters, optimizer and state_dict leave it to the policy."""

    def __init__(self, source: Recurrent) -> None:
        super().__init__()
        object.__setattr__(self, "source", source)

    def forward(self, seqs: Sequences) -> torch.Tensor:
        return self.source(seqs).detach()  # type: ignore[operator]


def encoder(
    obs_dim: int, image: Image | None, recurrent: RecurrentSpec | None = None
) -> tuple[nn.Module, int]:
    """(the module that turns observations into the MLP's input, the width of that input): an
    nn.Identity of the ``obs_dim`` flat observation for no ``image``, else a fresh :class:`NatureCNN`
    or :class:`MinAtarCNN` (``image.encoder``); with ``recurrent``, that encoder inside a
    :class:`Recurrent` layer."""
    if image is None:
        inner: nn.Module
        inner, width = nn.Identity(), obs_dim
    elif image.encoder == "minatar_cnn":
        inner = MinAtarCNN(image)
        width = inner.features
    else:
        inner, width = NatureCNN(image), NATURE_CNN_FEATURES
    if recurrent is None:
        return inner, width
    return Recurrent(inner, width, recurrent), recurrent[1]


class TorchForward:
    """A network's forward pass on one observation in torch (no gradients), as float64 numpy: how a
    CNN network acts. It has :class:`rlexp.nn.acting.MLPCopy`'s interface, so the numpy acting
    classes use it in place of a weight copy (which suits MLPs only: a convolution in numpy is slow).

    :param fn: the forward pass (reads the live parameters, so :meth:`refresh` has nothing to do).
    :param device: where the network lives.
    """

    def __init__(self, fn: Callable[..., torch.Tensor], device: torch.device) -> None:
        self.fn, self.device = fn, device

    def refresh(self) -> None:
        """Nothing to re-take: the forward pass reads the current parameters."""

    @torch.no_grad()
    def __call__(self, obs: np.ndarray, *more: np.ndarray) -> np.ndarray:
        """``fn`` of one observation (and ``more`` arrays, as float32 tensors: a noisy network's draws)."""
        extra = [torch.as_tensor(np.asarray(a, np.float32), device=self.device) for a in more]
        out = self.fn(torch.as_tensor(obs, device=self.device), *extra)
        return out.cpu().numpy().astype(np.float64)


def gaussian_log_prob(x: torch.Tensor, mu: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``Normal(mu, std).log_prob(x)`` written out exactly as torch.distributions computes it (the
    same values), without building a Distribution object."""
    return -((x - mu) ** 2) / (2 * std**2) - std.log() - _LOG_SQRT_2PI


class CategoricalActor(nn.Module):
    """Policy over a Discrete action space: logits from an MLP."""

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        recurrent: RecurrentSpec | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, recurrent)
        self.logits_net = mlp([n_in, *hidden_sizes, n_actions], activation)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Categorical(logits=self.logits_net(self.encoder(obs)))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """pi and log pi(act|obs)."""
        pi = self.distribution(obs)
        return pi, pi.log_prob(act)


class GaussianActor(nn.Module):
    """Diagonal Gaussian policy over a Box: mean from an MLP, state-independent log std (initially
    ``log_std_init``; Spinning Up's -0.5).

    With ``sde`` (gSDE: generalized state-dependent exploration, Raffin, Kober and Stulp 2022; SB3's
    ``use_sde``): ``log_std`` is a (latent, act_dim) matrix, where the latent features are the MLP's
    last hidden layer (the encoder's output without hidden layers). Acting adds ``latent @ E`` to the
    mean, ``E`` a matrix drawn from N(0, exp(log_std)^2) and kept for a while
    (:class:`rlexp.nn.acting.StateDependentNoise`); given the state, the action is then Gaussian with
    variance ``latent^2 @ exp(log_std)^2 + SDE_EPS`` per dimension, the latent taken without its
    gradient (SB3's default ``learn_features=False``).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        log_std_init: float = -0.5,
        recurrent: RecurrentSpec | None = None,
        sde: bool = False,
    ) -> None:
        super().__init__()
        features, n_in = encoder(obs_dim, image, recurrent)
        self.sde = sde
        shape = (hidden_sizes[-1] if hidden_sizes else n_in, act_dim) if sde else (act_dim,)
        self.log_std = nn.Parameter(
            torch.full(shape, float(log_std_init))
        )  # the first parameter, as before gSDE
        self.encoder = features
        self.mu_net = mlp([n_in, *hidden_sizes, act_dim], activation)

    def latent(self, features: torch.Tensor) -> torch.Tensor:
        """The MLP's last hidden layer (its activation applied) for the encoder's ``features``."""
        for module in list(self.mu_net)[:-2]:  # all but the output Linear and its (identity) activation
            features = module(features)
        return features

    def mean_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and std of the action distribution: the std is (act_dim,) without gSDE, else one row
        per observation."""
        if not self.sde:
            return self.mu_net(self.encoder(obs)), torch.exp(self.log_std)
        latent = self.latent(self.encoder(obs))
        variance = latent.detach() ** 2 @ torch.exp(2 * self.log_std) + SDE_EPS
        return self.mu_net[-2](latent), torch.sqrt(variance)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return Normal(*self.mean_std(obs))

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> tuple[Distribution, torch.Tensor]:
        """pi and log pi(act|obs). The log-density is computed from :meth:`mean_std`'s std (without gSDE
        the (act_dim,) vector), not from the Normal's copy of it broadcast to the batch (the same values,
        without a batch-sized log)."""
        mu, std = self.mean_std(obs)
        return Normal(mu, std), gaussian_log_prob(act, mu, std).sum(axis=-1)


class ValueFunction(nn.Module):
    """The state-value function V(s) of the on-policy algorithms (Spinning Up's MLPCritic)."""

    def __init__(
        self,
        obs_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        recurrent: RecurrentSpec | None = None,
        shared: Recurrent | None = None,
    ) -> None:
        super().__init__()
        if shared is not None:  # the policy's recurrent layer, read without a gradient
            self.encoder: nn.Module = SharedRecurrent(shared)
            n_in = shared.size
        else:
            self.encoder, n_in = encoder(obs_dim, image, recurrent)
        self.v_net = mlp([n_in, *hidden_sizes, 1], activation)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.v_net(self.encoder(obs)).squeeze(-1)


class ActorCritic(nn.Module):
    """Spinning Up's MLPActorCritic: ``pi`` (categorical or Gaussian by action space) and ``v``, each
    with its own encoder (``image``: a CNN each). With ``recurrent`` (kind, size) each encoder ends in
    a :class:`Recurrent` layer, V's own (``recurrent_critic="separate"``) or a gradient-free view of the
    policy's (``"shared"``). ``sde``: a Gaussian policy explores with gSDE (:class:`GaussianActor`)."""

    def __init__(
        self,
        obs_dim: int,
        act_space: spaces.Space,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        log_std_init: float = -0.5,
        ortho_init: bool = False,
        recurrent: tuple[str, int] | None = None,
        recurrent_critic: str = "separate",
        sde: bool = False,
    ) -> None:
        super().__init__()
        rnn_pi = None if recurrent is None else (*recurrent, "pi")
        if isinstance(act_space, spaces.Discrete):
            self.pi: CategoricalActor | GaussianActor = CategoricalActor(
                obs_dim, int(act_space.n), hidden_sizes, activation, image, rnn_pi
            )
        else:
            act_dim = int(np.prod(act_space.shape))
            self.pi = GaussianActor(
                obs_dim, act_dim, hidden_sizes, activation, image, log_std_init, rnn_pi, sde
            )
        if recurrent is not None and recurrent_critic == "shared":
            assert isinstance(self.pi.encoder, Recurrent)
            self.v = ValueFunction(obs_dim, hidden_sizes, activation, shared=self.pi.encoder)
        else:
            rnn_v = None if recurrent is None else (*recurrent, "v")
            self.v = ValueFunction(obs_dim, hidden_sizes, activation, image, rnn_v)
        if ortho_init:  # the MLP heads only; a CNN encoder keeps its default initialisation
            head = self.pi.mu_net if isinstance(self.pi, GaussianActor) else self.pi.logits_net
            orthogonal_init_(head, ORTHO_GAINS["pi"])
            orthogonal_init_(self.v.v_net, ORTHO_GAINS["v"])


# Gains of the orthogonal initialisation (SB3's ortho_init, CleanRL's layer_init): hidden layers
# sqrt(2), the policy's output layer 0.01, the value's output layer 1.
ORTHO_GAINS = {"hidden": math.sqrt(2.0), "pi": 0.01, "v": 1.0}


@torch.no_grad()
def orthogonal_init_(seq: nn.Sequential, output_gain: float) -> None:
    """Orthogonal weights (gain ``ORTHO_GAINS['hidden']``, ``output_gain`` for the last layer) and
    zero biases for every Linear of ``seq``, in place, from torch's global generator."""
    layers = [m for m in seq if isinstance(m, nn.Linear)]
    for i, layer in enumerate(layers):
        nn.init.orthogonal_(layer.weight, ORTHO_GAINS["hidden"] if i < len(layers) - 1 else output_gain)
        layer.bias.zero_()


# --- off-policy (DDPG, TD3, SAC). Actions are normalised to [-1, 1]; the loop maps them to the env's bounds.


class DeterministicActor(nn.Module):
    """mu(s) in [-1, 1]^n: an MLP with a tanh output (DDPG, TD3)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image)
        self.pi = mlp([n_in, *hidden_sizes, act_dim], activation, "tanh")

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.pi(self.encoder(obs))


def _renorm_corrections(
    mean: torch.Tensor,
    inv_std: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    warm: torch.Tensor,
    spec: Renorm,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch renormalisation's (r, d) from the batch's ``mean`` and ``1 / std`` (given without gradient)
    and the running statistics: 1 and 0 before the warm-up ends, then clipped to rmax and dmax."""
    running_std = torch.sqrt(running_var + spec.eps)
    r = torch.where(warm, (1 / (inv_std * running_std)).clamp(1 / spec.rmax, spec.rmax), 1.0)
    d = torch.where(warm, ((mean - running_mean) / running_std).clamp(-spec.dmax, spec.dmax), 0.0)
    return r, d


def _renorm_train(
    x: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    warm: torch.Tensor,
    spec: Renorm,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:class:`_BatchRenormTrain`'s forward pass as a formula for autograd (the batch statistics
    differentiated, r and d not), for a compiled step: Inductor fuses it and its derivative."""
    mean = x.mean(0)
    xhat = x - mean
    var = (xhat * xhat).mean(0)
    inv_std = torch.rsqrt(var + spec.eps)
    r, d = _renorm_corrections(mean.detach(), inv_std.detach(), running_mean, running_var, warm, spec)
    y = torch.addcmul(torch.addcmul(bias, d, scale), xhat * inv_std, r * scale)
    return y, mean.detach(), var.detach()


class _BatchRenormTrain(torch.autograd.Function):
    """:class:`BatchRenorm`'s training pass on a (batch, features) tensor with its backward written out:
    about six passes over the batch forward and seven back, where autograd's graph of the same formula
    (with torch's var_mean, whose column-wise Welford reduction alone took ~1.6 ms on 512 x 256 floats)
    made batch renormalisation half of a CrossQ gradient step. Returns (y, batch mean, batch variance);
    r and d, and the last two outputs, carry no gradient.

    With ``xhat = (x - mean) / std`` and ``y = scale (xhat r + d) + bias``, the gradient is batch
    normalisation's: ``dx = scale r / std (gy - mean(gy) - xhat mean(gy xhat))``, ``dscale = r sum(gy
    xhat) + d sum(gy)``, ``dbias = sum(gy)``.
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor,
        running_mean: torch.Tensor,
        running_var: torch.Tensor,
        warm: torch.Tensor,
        spec: Renorm,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mean = x.mean(0)
        xhat = x - mean
        var = (xhat * xhat).mean(0)  # biased, as Ioffe's and SBX's
        inv_std = torch.rsqrt(var + spec.eps)
        r, d = _renorm_corrections(mean, inv_std, running_mean, running_var, warm, spec)
        xhat.mul_(inv_std)
        y = torch.addcmul(torch.addcmul(bias, d, scale), xhat, r * scale)
        ctx.save_for_backward(xhat, inv_std, scale, r, d)
        ctx.mark_non_differentiable(mean, var)
        return y, mean, var

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, gy: torch.Tensor, _gm: torch.Tensor, _gv: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        xhat, inv_std, scale, r, d = ctx.saved_tensors  # type: ignore[attr-defined]
        n = gy.shape[0]
        g_sum, gx_sum = gy.sum(0), (gy * xhat).sum(0)
        k = scale * r * inv_std
        # dx = k gy - (xhat k gx_sum / n + k g_sum / n)
        dx = torch.addcmul(torch.addcmul(k * g_sum / n, xhat, k * gx_sum / n).neg_(), gy, k)
        return dx, r * gx_sum + d * g_sum, g_sum, None, None, None, None


class BatchRenorm(nn.Module):
    """Batch renormalisation (Ioffe 2017) of the features on the last axis, CrossQ's normalisation
    (:class:`rlexp.nn.Renorm` holds its settings and says what it computes).

    Training (``train=True``, a batch of rows): each feature is normalised by the batch's mean and
    (biased) std, ``y = (x - mean_B) / std_B * r + d`` with ``std_B = sqrt(var_B + eps)`` and the
    correction factors ``r = clip(std_B / std_run, 1/rmax, rmax)``, ``d = clip((mean_B - mean_run) /
    std_run, -dmax, dmax)`` taken without gradients (r = 1 and d = 0 during the first ``warmup`` training
    steps: plain batch normalisation); then the running statistics move toward the batch's and the step
    count rises. Evaluation (``train=False``, any leading shape): ``(x - mean_run) / std_run``, the running
    statistics frozen. Either way the result is scaled by ``scale`` and shifted by ``bias`` (learned).

    The running statistics and the step count are buffers: in the state_dict, hence in every checkpoint.
    """

    def __init__(self, features: int, spec: Renorm) -> None:
        super().__init__()
        self.spec = spec
        self.scale = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor, train: bool = False) -> torch.Tensor:
        spec = self.spec
        if not train:  # x * a + b: one pass
            a = self.scale * torch.rsqrt(self.running_var + spec.eps)
            return torch.addcmul(torch.addcmul(self.bias, self.running_mean, a, value=-1), x, a)
        warm = self.steps >= spec.warmup  # a tensor: no host synchronisation on a GPU
        args = (x, self.scale, self.bias, self.running_mean, self.running_var, warm, spec)
        # a compiled step (backend.compile): the formula, differentiated by autograd and fused by Inductor
        y, mean, var = (
            _renorm_train(*args) if torch.compiler.is_compiling() else _BatchRenormTrain.apply(*args)
        )
        with torch.no_grad():
            self.running_mean.add_(mean - self.running_mean, alpha=spec.momentum)
            self.running_var.add_(var - self.running_var, alpha=spec.momentum)
            self.steps.add_(1)
        return y


class RenormMLP(nn.Module):
    """:func:`mlp`'s layers with a :class:`BatchRenorm` of each Linear's input before it (CrossQ's
    networks, as SBX and sb3-contrib build them); with ``norm_output`` one more after the last
    activation (the policy's trunk, whose output feeds its two heads). ``layers`` alternates
    BatchRenorm and Linear modules; the activations follow each Linear.

    :param spec: the normalisation's settings (:class:`rlexp.nn.Renorm`).
    """

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str,
        spec: Renorm,
        output_activation: str = "identity",
        norm_output: bool = False,
    ) -> None:
        super().__init__()
        modules: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            modules += [BatchRenorm(sizes[i], spec), Linear(sizes[i], sizes[i + 1])]
        if norm_output:
            modules.append(BatchRenorm(sizes[-1], spec))
        self.layers = nn.ModuleList(modules)
        n = len(sizes) - 1
        self.acts = [_activation(activation if i < n - 1 else output_activation) for i in range(n)]

    def forward(self, x: torch.Tensor, train: bool = False) -> torch.Tensor:
        acts = iter(self.acts)
        for module in self.layers:
            x = module(x, train) if isinstance(module, BatchRenorm) else next(acts)(module(x))
        return x

    def norms(self) -> list[BatchRenorm]:
        """The BatchRenorm layers, first to last."""
        return [m for m in self.layers if isinstance(m, BatchRenorm)]


def renorm_buffers(*modules: nn.Module) -> list[torch.Tensor]:
    """The running means and variances of every :class:`BatchRenorm` in ``modules`` (what the ranks
    average after each update; the step counts agree by themselves)."""
    return [
        t
        for m in modules
        for n in m.modules()
        if isinstance(n, BatchRenorm)
        for t in (n.running_mean, n.running_var)
    ]


class QFunction(nn.Module):
    """Q(s, a) from an MLP over the concatenated observation (its encoder's features) and action.

    :param outputs: the MLP's outputs: 1 (a value, returned without its axis) or more (TQC's quantiles,
        returned as the last axis).
    :param renorm: CrossQ's batch renormalisation before each Linear (:class:`RenormMLP`); None: a plain MLP.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        outputs: int = 1,
        renorm: Renorm | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image)
        sizes = [n_in + act_dim, *hidden_sizes, outputs]
        self.q = mlp(sizes, activation) if renorm is None else RenormMLP(sizes, activation, renorm)
        self.squeeze = outputs == 1

    def forward(self, obs: torch.Tensor, act: torch.Tensor, train: bool = False) -> torch.Tensor:
        """Q(obs, act); ``train``: batch renormalisation with this batch's statistics (CrossQ's critic step)."""
        x = torch.cat([self.encoder(obs), act], dim=-1)
        q = self.q(x, train) if isinstance(self.q, RenormMLP) else self.q(x)
        return q.squeeze(-1) if self.squeeze else q


class QuantileCritics(nn.Module):
    """TQC's critics (Kuznetsov et al. 2020): ``n_critics`` networks, each a :class:`QFunction` with
    ``n_quantiles`` outputs, the atoms of its estimate of the return's distribution (quantiles at the
    levels (2i + 1) / (2 n_quantiles)). Returns (batch, n_critics, n_quantiles)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        n_critics: int,
        n_quantiles: int,
        image: Image | None = None,
    ) -> None:
        super().__init__()
        self.nets = nn.ModuleList(
            QFunction(obs_dim, act_dim, hidden_sizes, activation, image, outputs=n_quantiles)
            for _ in range(n_critics)
        )

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return torch.stack([net(obs, act) for net in self.nets], dim=-2)


# up to this many (estimate, target sample) pairs in a batch the quantile Huber loss goes over the pairs
# themselves (a few passes in float32, as TF's), above it through the sorted samples (:func:`_sorted_sums`),
# whose ~40 operations cost more at first but grow as n log m per estimate, not n m. Forward and backward
# on a Xeon: 6,400 pairs (QR-DQN on CartPole) 0.5 against 0.9 ms, 82k 1.1 against 2.0, 160k 1.7 against
# 1.2, 589k (TQC) 7.9 against 4.6
PAIRWISE_MAX_PAIRS = 1 << 17


def _pairwise_sums(current: torch.Tensor, target: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """For each estimate c_i (..., n): ``sum_j w_ij huber(t_j - c_i)`` and ``sum_j w_ij clip(t_j - c_i, -1,
    1)`` over the target samples, from the pairs: w is tau_i where t_j >= c_i, else 1 - tau_i."""
    delta = target[..., None, :] - current[..., :, None]  # (..., n, m)
    clip = delta.clamp(-1.0, 1.0)
    tau = ((torch.arange(n, dtype=delta.dtype, device=delta.device) + 0.5) / n)[:, None]
    weighted = torch.where(delta < 0, 1 - tau, tau).mul_(clip)
    # huber(d) = clip(d) (d - clip(d) / 2): d^2 / 2 within [-1, 1], |d| - 1/2 outside
    return (weighted * clip.mul_(-0.5).add_(delta)).sum(-1), weighted.sum(-1)


def _sorted_sums(
    current: torch.Tensor, target: torch.Tensor, lead: torch.Size, n: int, m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_pairwise_sums` from the sorted target samples, without the pairs (float64; see
    :class:`_QuantileHuberLoss`)."""
    c = current.expand(*lead, n).reshape(-1, n).double()
    t = target.expand(*lead, m).reshape(-1, m).double()
    # numpy's sort of many short rows is ~10x faster than torch's on a CPU
    t = torch.from_numpy(np.sort(t.numpy(), axis=1)) if t.device.type == "cpu" else t.sort(dim=1).values
    zero = torch.zeros(t.shape[0], 1, dtype=t.dtype, device=t.device)
    p1 = torch.cat([zero, t.cumsum(1)], dim=1)  # p1[k] = sum of the k smallest t
    p2 = torch.cat([zero, (t * t).cumsum(1)], dim=1)
    a = torch.searchsorted(t, c - 1, side="left")  # t < c - 1
    b = torch.searchsorted(t, c, side="left")  # t < c
    e = torch.searchsorted(t, c + 1, side="right")  # t <= c + 1
    s1a, s1b, s1e = p1.gather(1, a), p1.gather(1, b), p1.gather(1, e)
    s2a, s2b, s2e = p2.gather(1, a), p2.gather(1, b), p2.gather(1, e)
    na, nab, nbe, ne = a, b - a, e - b, m - e  # the four runs' sizes
    tau = (torch.arange(n, dtype=t.dtype, device=t.device) + 0.5) / n
    below = (c - 0.5) * na - s1a + 0.5 * ((s2b - s2a) - 2 * c * (s1b - s1a) + c * c * nab)
    above = 0.5 * ((s2e - s2b) - 2 * c * (s1e - s1b) + c * c * nbe) + (p1[:, -1:] - s1e) - (c + 0.5) * ne
    clipped_below = -na + (s1b - s1a) - c * nab
    clipped_above = (s1e - s1b) - c * nbe + ne
    return (1 - tau) * below + tau * above, (1 - tau) * clipped_below + tau * clipped_above


class _QuantileHuberLoss(torch.autograd.Function):
    """:func:`quantile_huber_loss` and its gradient: over the pairs where they are few (up to
    :data:`PAIRWISE_MAX_PAIRS`, :func:`_pairwise_sums`), else from the sorted target samples, without the
    pairs (:func:`_sorted_sums`).

    For an estimate c at the level tau and the target samples t_j sorted, the pairs fall into four runs
    of j: t < c - 1 (weight 1 - tau, Huber c - t - 1/2, clipped delta -1), c - 1 <= t < c (1 - tau,
    (t - c)^2 / 2, t - c), c <= t <= c + 1 (tau, (t - c)^2 / 2, t - c) and t > c + 1 (tau, t - c - 1/2,
    1). Binary search finds the runs' bounds; prefix sums of t and t^2 (float64) give each run's sum of
    Huber losses and of clipped deltas in O(1). The loss is ``sum_ij w h / count`` and its gradient with
    respect to c_i ``-sum_j w clip(delta_ij, -1, 1) / count``: the values of the pairwise formula, in
    O(n log m) per row instead of the O(n m) pairs (autograd's graph of the pairwise formula took about
    twenty passes over them and dominated TQC's gradient step; QR-DQN's 200 x 200 pairs more so).
    """

    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        current: torch.Tensor,
        target: torch.Tensor,
        sum_over_quantiles: bool,
        per_row: bool = False,
    ) -> torch.Tensor:
        n, m = current.shape[-1], target.shape[-1]
        lead = torch.broadcast_shapes(current.shape[:-1], target.shape[:-1])
        rows = math.prod(lead)
        if rows * n * m <= PAIRWISE_MAX_PAIRS:
            losses, clipped = _pairwise_sums(current, target, n)
        else:
            losses, clipped = _sorted_sums(current, target, lead, n, m)
        losses, clipped = losses.reshape(rows, n), clipped.reshape(rows, n)
        ctx.current_shape = current.shape  # type: ignore[attr-defined]
        ctx.per_row = per_row  # type: ignore[attr-defined]
        if per_row:  # each row's loss (QR-DQN's per transition, for its priorities and weights)
            count = m * (1 if sum_over_quantiles else n)
            ctx.save_for_backward((clipped / -count).to(current.dtype).reshape(*lead, n))
            return (losses.sum(1) / count).to(current.dtype).reshape(lead)
        count = rows * m * (1 if sum_over_quantiles else n)
        ctx.save_for_backward((clipped / -count).to(current.dtype).reshape(*lead, n))
        return (losses.sum() / count).to(current.dtype)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        (d_current,) = ctx.saved_tensors  # type: ignore[attr-defined]
        shape = ctx.current_shape  # type: ignore[attr-defined]
        if ctx.per_row:  # type: ignore[attr-defined]
            d_current, grad = d_current * grad.unsqueeze(-1), grad.new_ones(())
        if d_current.shape != shape:  # current was broadcast: sum over its broadcast axes
            d_current = d_current.sum_to_size(shape)
        return d_current * grad, None, None, None


def quantile_huber_loss(
    current: torch.Tensor, target: torch.Tensor, sum_over_quantiles: bool = False, per_row: bool = False
) -> torch.Tensor:
    """The quantile regression loss with the Huber loss (kappa 1) of QR-DQN (Dabney et al. 2018) and TQC.

    ``current``: (..., n) quantile estimates at the levels tau_i = (2i + 1) / (2n); ``target``: (..., m)
    samples of the target distribution, whose leading axes broadcast to ``current``'s (TQC: (batch, 1,
    m) against (batch, critics, n)). Every pair (i, j) of estimate and target sample contributes
    ``|tau_i - 1{target_j < current_i}| * huber(target_j - current_i)``; the loss is the mean over all
    pairs, or with ``sum_over_quantiles`` (QR-DQN) the sum over i of the mean over everything else;
    ``per_row``: each row's loss (shape: the broadcast leading axes), whose mean is that loss. The
    target carries no gradient. (:class:`_QuantileHuberLoss` computes it; in a function that
    ``torch.compile`` traces, the pairwise formula in plain ops, which autograd and ``torch.func``
    differentiate and inductor fuses.)
    """
    if not torch.compiler.is_compiling():
        return _QuantileHuberLoss.apply(current, target.detach(), sum_over_quantiles, per_row)
    n, m = current.shape[-1], target.shape[-1]
    delta = target.detach()[..., None, :] - current[..., :, None]  # (..., n, m)
    clip = delta.clamp(-1.0, 1.0)
    tau = ((torch.arange(n, dtype=delta.dtype, device=delta.device) + 0.5) / n)[:, None]
    weight = torch.where(delta.detach() < 0, 1 - tau, tau)
    losses = (weight * clip * (delta - 0.5 * clip)).sum(-1)  # (..., n): huber(d) = clip (d - clip / 2)
    count = m * (1 if sum_over_quantiles else n)
    if per_row:
        return losses.sum(-1) / count
    return losses.sum() / (count * losses[..., 0].numel())


class SquashedGaussianActor(nn.Module):
    """SAC's policy: u ~ N(mu(s), sigma(s)), a = tanh(u), with the tanh log-prob correction.

    log sigma is clamped to [LOG_STD_MIN, LOG_STD_MAX] (Spinning Up's -20, 2). With ``renorm`` (CrossQ)
    the trunk is a :class:`RenormMLP` with a batch renormalisation of its output too, before the heads.
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        renorm: Renorm | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image)
        sizes = [n_in, *hidden_sizes]
        self.net: nn.Module = (
            mlp(sizes, activation, activation)
            if renorm is None
            else RenormMLP(sizes, activation, renorm, activation, norm_output=True)
        )
        # no hidden layer: a policy linear in the encoder's output
        features = hidden_sizes[-1] if hidden_sizes else n_in
        self.mu_layer = Linear(features, act_dim)
        self.log_std_layer = Linear(features, act_dim)

    def forward(
        self,
        obs: torch.Tensor,
        deterministic: bool = False,
        with_logprob: bool = True,
        noise: torch.Tensor | None = None,
        train: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(action in [-1, 1], log pi(action | obs) or None). ``noise``: the standard normal draw to use;
        ``train``: batch renormalisation with this batch's statistics (CrossQ's policy step)."""
        x = self.encoder(obs)
        h = self.net(x, train) if isinstance(self.net, RenormMLP) else self.net(x)
        mu = self.mu_layer(h)
        std = torch.exp(torch.clamp(self.log_std_layer(h), LOG_STD_MIN, LOG_STD_MAX))
        if deterministic:
            u = mu
        else:
            u = mu + std * (torch.randn_like(mu) if noise is None else noise)
        logp = None
        if with_logprob:
            logp = gaussian_log_prob(u, mu, std).sum(-1)
            logp = logp - (2 * (np.log(2) - u - nn.functional.softplus(-2 * u))).sum(-1)
        return torch.tanh(u), logp


# --- value-based (DQN): Q(s, .) over a Discrete action space.


def scaled_noise(eps: torch.Tensor) -> torch.Tensor:
    """f(eps) = sign(eps) sqrt(|eps|): factorised noise's scaling of standard normal draws (Fortunato et al.)."""
    return eps.sign() * eps.abs().sqrt()


class NoisyLinear(Linear):
    """A factorised Gaussian noisy linear layer (Fortunato et al. 2018, NoisyNet): ``y = x (W + W_sigma *
    (f(eps_out) f(eps_in)^T))^T + b + b_sigma * f(eps_out)`` for standard normal draws ``eps_in`` (in
    features) and ``eps_out`` (out features), ``f(x) = sign(x) sqrt(|x|)``.

    ``weight`` and ``bias`` are the means (initialised as torch's Linear, uniform in +-1/sqrt(in): the
    paper's factorised initialisation), ``weight_sigma`` and ``bias_sigma`` the learnt scales, all
    ``sigma0 / sqrt(in)`` at first. Without noise (``noise=None``) the layer is its mean, a Linear.

    :param sigma0: the paper's sigma_0 (0.5 for factorised noise).
    """

    def __init__(self, n_in: int, n_out: int, sigma0: float) -> None:
        super().__init__(n_in, n_out)
        self.weight_sigma = nn.Parameter(torch.full((n_out, n_in), sigma0 / math.sqrt(n_in)))
        self.bias_sigma = nn.Parameter(torch.full((n_out,), sigma0 / math.sqrt(n_in)))

    @property
    def noise_size(self) -> int:
        """The standard normal draws one noisy pass takes: in features, then out features."""
        return self.in_features + self.out_features

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        if noise is None:
            return super().forward(x)
        f_in, f_out = scaled_noise(noise).split([self.in_features, self.out_features])
        if x.dim() == 1 or x.shape[0] == 1:  # one observation (acting): the same without forming the weights
            return linear(x, self.weight, self.bias) + f_out * linear(
                x * f_in, self.weight_sigma, self.bias_sigma
            )
        weight = self.weight + self.weight_sigma * torch.outer(f_out, f_in)
        return linear(x, weight, self.bias + self.bias_sigma * f_out)


class NoisyMLP(nn.Sequential):
    """:func:`mlp` of :class:`NoisyLinear` layers, called as ``net(x, noise)``: ``noise`` the draws of
    all its layers in order (each layer's in, then out; :attr:`noise_size` of them), one draw for the
    whole batch; None: every layer at its mean."""

    def __init__(
        self, sizes: Sequence[int], activation: str, sigma0: float, output_activation: str = "identity"
    ) -> None:
        layers: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            layers += [
                NoisyLinear(sizes[i], sizes[i + 1], sigma0),
                _activation(activation if i < len(sizes) - 2 else output_activation),
            ]
        super().__init__(*layers)

    @property
    def noise_size(self) -> int:
        return sum(m.noise_size for m in self if isinstance(m, NoisyLinear))

    def forward(self, x: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:  # type: ignore[override]
        sizes = [m.noise_size for m in self if isinstance(m, NoisyLinear)]
        draws = iter(noise.split(sizes)) if noise is not None else None
        for m in self:
            x = m(x, None if draws is None else next(draws)) if isinstance(m, NoisyLinear) else m(x)
        return x


def sigma_layers(seq: nn.Sequential) -> Layers:
    """The (weight_sigma, bias_sigma) of each :class:`NoisyLinear` in ``seq`` as numpy arrays on the
    host, beside :func:`linear_layers`' means (noisy acting in numpy)."""
    return [
        (m.weight_sigma.detach().cpu().numpy(), m.bias_sigma.detach().cpu().numpy())
        for m in seq
        if isinstance(m, NoisyLinear)
    ]


class DiscreteQNetwork(nn.Module):
    """Q(s, a) for every action a of a Discrete space: an MLP over the observation (its encoder's
    features) with one output per action.

    With ``dueling`` (Wang et al. 2016) the last hidden layer becomes two streams of the same width:
    ``v_net`` ends in V(s), ``a_net`` in the advantages A(s, .), and Q = V + A - mean(A). The hidden
    layers before it are the shared ``trunk``. Without hidden layers both streams are linear heads on
    the encoder's features.

    With ``atoms`` > 1 (a distributional head: C51's logits over its atoms, QR-DQN's quantiles) each
    action has ``atoms`` outputs, returned as (..., n_actions, atoms); dueling streams then give V's
    ``atoms`` and each action's advantages per atom, combined atom by atom. With ``noisy_sigma0`` every
    linear layer after the encoder is a :class:`NoisyLinear` (the encoder's CNN stays as it is), and
    ``forward(obs, noise)`` takes the draws of them all (:attr:`noise_size`: the nets in the order
    ``q_net``, or ``trunk``, ``v_net``, ``a_net``); None: the mean network.
    """

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden_sizes: Sequence[int],
        activation: str,
        image: Image | None = None,
        dueling: bool = False,
        atoms: int = 1,
        noisy_sigma0: float | None = None,
    ) -> None:
        super().__init__()
        self.dueling, self.n_actions, self.atoms = dueling, n_actions, atoms
        self.encoder, n_in = encoder(obs_dim, image)
        hidden = list(hidden_sizes)

        def make(sizes: list[int], out_act: str = "identity") -> nn.Sequential:
            if noisy_sigma0 is None:
                return mlp(sizes, activation, out_act)
            return NoisyMLP(sizes, activation, noisy_sigma0, out_act)

        if not dueling:
            self.q_net = make([n_in, *hidden, n_actions * atoms])
            return
        trunk, stream = hidden[:-1], hidden[-1:]
        self.trunk = make([n_in, *trunk], activation)
        width = trunk[-1] if trunk else n_in
        self.v_net = make([width, *stream, atoms])
        self.a_net = make([width, *stream, n_actions * atoms])

    def nets(self) -> list[nn.Sequential]:
        """The MLPs after the encoder, in the order their noise is drawn."""
        return [self.q_net] if not self.dueling else [self.trunk, self.v_net, self.a_net]

    @property
    def noise_sizes(self) -> list[int]:
        """The draws of each of :meth:`nets` (noisy networks; zeros otherwise)."""
        return [net.noise_size if isinstance(net, NoisyMLP) else 0 for net in self.nets()]

    @property
    def noise_size(self) -> int:
        return sum(self.noise_sizes)

    def forward(self, obs: torch.Tensor, noise: torch.Tensor | None = None) -> torch.Tensor:
        x = self.encoder(obs)
        if noise is None and self.atoms == 1:  # DQN's network
            if not self.dueling:
                return self.q_net(x)
            h = self.trunk(x)
            adv = self.a_net(h)
            return self.v_net(h) + adv - adv.mean(-1, keepdim=True)
        draws = noise.split(self.noise_sizes) if noise is not None else [None] * len(self.nets())

        def run(net: nn.Sequential, x: torch.Tensor, draw: torch.Tensor | None) -> torch.Tensor:
            return net(x, draw) if isinstance(net, NoisyMLP) else net(x)

        if not self.dueling:
            out = run(self.q_net, x, draws[0])
            return out if self.atoms == 1 else out.unflatten(-1, (self.n_actions, self.atoms))
        h = run(self.trunk, x, draws[0])
        v, adv = run(self.v_net, h, draws[1]), run(self.a_net, h, draws[2])
        if self.atoms == 1:
            return v + adv - adv.mean(-1, keepdim=True)
        adv = adv.unflatten(-1, (self.n_actions, self.atoms))
        return v.unsqueeze(-2) + adv - adv.mean(-2, keepdim=True)
