"""Acting in numpy, for both backends: one observation per env step through a copy of the weights.

A forward pass of a small MLP on one observation is mostly framework overhead, so the on-policy
learners of both backends, and the TensorFlow off-policy ones, act here on a float64 *copy* of their
weights (the costs are in docs/benchmarks.md). The learner calls ``refresh()`` after every change of
its parameters (each update, each checkpoint load); the copy is then re-taken at the next act, so a
burst of updates copies once. Actions are drawn from the learner's numpy Generator (its ``acting``
stream), whose state is checkpointed with the learner. The math runs in float64, so probabilities,
values and actions equal the framework's float32 ones to float32 precision (tested).

Weights use PyTorch's layout: a layer is ``(W, b)`` with ``W`` of shape (out_features,
in_features), applied as ``x @ W.T + b``. A learner hands each copy a function that reads the
current weights: ``linear_layers`` in nn/torch.py, ``MLP.layers`` in nn/tf.py.

Networks with a CNN encoder (``network.encoder=nature_cnn``) act through their framework instead
(``TorchForward`` in nn/torch.py, ``TFForward`` in nn/tf.py, each a :class:`Forward`): the same
acting classes here sample from their outputs, so actions still come from the learner's Generator.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from rlexp.nn import LOG_STD_MAX, LOG_STD_MIN, SDE_EPS

Layers = list[tuple[np.ndarray, np.ndarray]]
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


# numpy's versions of rlexp.nn.ACTIVATIONS
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "gelu": _gelu,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "identity": lambda x: x,
}


def mlp_forward(
    layers: Layers, x: np.ndarray, activation: str, output_activation: str = "identity"
) -> np.ndarray:
    """The MLP of ``layers`` on ``x``: ``activation`` between layers, ``output_activation`` after the last."""
    act, out_act = ACTIVATIONS[activation], ACTIVATIONS[output_activation]
    for i, (w, b) in enumerate(layers):
        x = x @ w.T + b
        x = act(x) if i < len(layers) - 1 else out_act(x)
    return x


class Forward(Protocol):
    """What the acting classes call for a network's output on one observation: an :class:`MLPCopy`,
    or a framework's forward pass for networks numpy does not run (a CNN)."""

    def __call__(self, x: np.ndarray) -> np.ndarray: ...

    def refresh(self) -> None: ...


class WeightCopy:
    """A float64 copy of some layers' weights, taken at the first use after :meth:`refresh`.

    :param read: returns the layers' current ``(W, b)`` pairs.
    """

    def __init__(self, read: Callable[[], Layers]) -> None:
        self.read = read
        self._layers: Layers | None = None  # None: stale

    def refresh(self) -> None:
        """The network changed: copy its weights again at the next use."""
        self._layers = None

    @property
    def layers(self) -> Layers:
        if self._layers is None:
            self._layers = [(np.array(w, np.float64), np.array(b, np.float64)) for w, b in self.read()]
        return self._layers


class SharedRead:
    """One read of a network's layers shared by the copies of its parts (a policy's trunk and heads): the
    first part asked for after :meth:`refresh` reads all the layers (a backend's one call), the others take
    that read. Refreshed with the copies, by the learner.

    :param read: returns all the layers' ``(W, b)`` pairs, the parts' in order.
    :param sizes: the number of layers of each part.
    """

    def __init__(self, read: Callable[[], Layers], sizes: list[int]) -> None:
        self.read, self.sizes = read, sizes
        self._layers: Layers | None = None  # None: stale

    def refresh(self) -> None:
        """The network changed: read it again at the next use."""
        self._layers = None

    def part(self, i: int) -> Callable[[], Layers]:
        """A read of part ``i``'s layers (for its :class:`WeightCopy`)."""
        start = sum(self.sizes[:i])

        def read() -> Layers:
            if self._layers is None:
                self._layers = self.read()
            return self._layers[start : start + self.sizes[i]]

        return read


class MLPCopy(WeightCopy):
    """An MLP's forward pass in numpy, on a :class:`WeightCopy` of its weights.

    :param activation: between layers; ``output_activation`` after the last (keys of :data:`ACTIVATIONS`).
    """

    def __init__(
        self, read: Callable[[], Layers], activation: str, output_activation: str = "identity"
    ) -> None:
        super().__init__(read)
        self.activation, self.output_activation = activation, output_activation

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return mlp_forward(self.layers, x, self.activation, self.output_activation)


class StateDependentNoise:
    """gSDE's exploration (generalized state-dependent exploration: Raffin, Kober and Stulp 2022; SB3's
    ``use_sde``) for a Gaussian policy whose ``pi`` forward gives its latent features (the last hidden
    layer): the action is ``mean + latent @ E``, with ``mean = latent @ W.T + b`` and ``E`` a (latent,
    act_dim) matrix drawn from N(0, exp(log_std)^2), one per env slot, kept until :meth:`resample`
    (the loop draws them at each epoch's start and every ``algo.sde_sample_freq`` steps). Given the
    state, the action is Gaussian with variance ``latent^2 @ exp(log_std)^2 + SDE_EPS`` per dimension:
    its log-probability, which the frameworks' policies compute alike (nn/torch.py's GaussianActor).

    :param head: reads ``[(W, b)]``, the policy's output layer.
    :param log_std: reads the (latent, act_dim) log std matrix.
    :param rng: the learner's acting Generator (checkpointed).
    :param slots: the envs of the rank, each with its own matrix.
    """

    def __init__(
        self,
        head: Callable[[], Layers],
        log_std: Callable[[], np.ndarray],
        rng: np.random.Generator,
        slots: int,
    ) -> None:
        self.head, self.read_log_std, self.rng, self.slots = WeightCopy(head), log_std, rng, slots
        self._std: np.ndarray | None = None
        self.matrices: np.ndarray | None = None  # (slots, latent, act_dim); None until the first resample

    def refresh(self) -> None:
        """The network changed: copy its weights again before the next call (the matrices stay)."""
        self.head.refresh()
        self._std = None

    @property
    def std(self) -> np.ndarray:
        if self._std is None:
            self._std = np.exp(np.array(self.read_log_std(), np.float64))
        return self._std

    def resample(self) -> None:
        """Fresh exploration matrices for every slot, from the acting Generator."""
        std = self.std
        self.matrices = std * self.rng.standard_normal((self.slots, *std.shape))

    def mean(self, latent: np.ndarray) -> np.ndarray:
        ((w, b),) = self.head.layers
        return latent @ w.T + b

    def sample(self, latent: np.ndarray, slot: int) -> tuple[np.ndarray, float]:
        """An action for the ``latent`` features with slot ``slot``'s matrix (``-1``: a fresh draw, for
        :meth:`ActorCriticActing.act`), and its log-probability."""
        std = self.std
        if slot < 0:
            matrix = std * self.rng.standard_normal(std.shape)
        else:
            assert self.matrices is not None, "resample() draws the matrices before the first step"
            matrix = self.matrices[slot]
        mean = self.mean(latent)
        a = mean + latent @ matrix
        variance = latent**2 @ std**2 + SDE_EPS
        logp = np.sum(-0.5 * (a - mean) ** 2 / variance - 0.5 * np.log(variance) - _HALF_LOG_2PI)
        return a.astype(np.float32), float(logp)


def policy_head(
    read: Callable[[], Layers],
    activation: str,
    log_std: Callable[[], np.ndarray] | None,
    rng: np.random.Generator,
    slots: int,
    sde: bool,
) -> tuple[MLPCopy, Callable[[], np.ndarray] | None, StateDependentNoise | None]:
    """The policy's MLP in numpy and how it explores, as :class:`ActorCriticActing` takes them: the
    whole MLP (``read``: its layers) with ``log_std`` (None: categorical), or with ``sde`` the MLP to its
    latent features, no state-independent log std and the :class:`StateDependentNoise` that applies
    the output layer (``log_std`` then reads its matrix)."""
    if not sde:
        return MLPCopy(read, activation), log_std, None
    assert log_std is not None, "gSDE needs a Gaussian policy"
    noise = StateDependentNoise(lambda: read()[-1:], log_std, rng, slots)
    return MLPCopy(lambda: read()[:-1], activation, activation), None, noise


class ActorCriticActing:
    """Spinning Up's actor-critic acting (VPG, TRPO, PPO): sample, log-probability and V(s).

    :param pi: the policy head: logits (``discrete``), the Gaussian's mean, or with ``sde`` its latent
        features (float64; a vector for one observation).
    :param v: the value function (an array of one value for one observation).
    :param log_std: reads the state-independent log std of a Gaussian policy (None: categorical, or gSDE).
    :param rng: the Generator that draws actions; the learner checkpoints its state.
    :param sde: a Gaussian policy's gSDE exploration (None: the state-independent std).
    """

    def __init__(
        self,
        pi: Forward,
        v: Forward,
        log_std: Callable[[], np.ndarray] | None,
        rng: np.random.Generator,
        sde: StateDependentNoise | None = None,
    ) -> None:
        self.pi, self.v, self.read_log_std, self.rng, self.sde = pi, v, log_std, rng, sde
        self.discrete = log_std is None and sde is None
        self.log_std: np.ndarray | None = None

    def refresh(self) -> None:
        """The networks changed: copy their weights again before the next call."""
        self.pi.refresh()
        self.v.refresh()
        self.log_std = None
        if self.sde is not None:
            self.sde.refresh()

    def _sample(self, out: np.ndarray, slot: int) -> tuple[np.ndarray, float]:
        """An action drawn from the policy with head output ``out`` (env ``slot``'s, for gSDE's
        matrix), and its log-probability."""
        if self.sde is not None:
            return self.sde.sample(out, slot)
        if self.read_log_std is None:
            logp_all = out - np.logaddexp.reduce(out)
            probs = np.exp(logp_all)
            a = min(int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum())), len(out) - 1)
            return np.int64(a), float(logp_all[a])
        if self.log_std is None:
            self.log_std = np.array(self.read_log_std(), np.float64)
        std = np.exp(self.log_std)
        a = out + std * self.rng.standard_normal(out.shape)
        logp = np.sum(-0.5 * ((a - out) / std) ** 2 - self.log_std - _HALF_LOG_2PI)
        return a.astype(np.float32), float(logp)

    def _act(self, out: np.ndarray, deterministic: bool) -> np.ndarray:
        """:meth:`act` from the head output ``out``."""
        if not deterministic:
            return self._sample(out, -1)[0]
        if self.discrete:
            return np.int64(np.argmax(out))
        return (out if self.sde is None else self.sde.mean(out)).astype(np.float32)

    def step(self, obs: np.ndarray, slot: int = 0) -> tuple[np.ndarray, float, float]:
        """Sample an action for one observation of env ``slot``; return (action, V(obs), log-prob of
        the action)."""
        obs = np.asarray(obs, dtype=np.float64)
        a, logp = self._sample(self.pi(obs), slot)
        return a, self.value(obs), logp

    def value(self, obs: np.ndarray) -> float:
        """V(obs) for one observation."""
        return float(self.v(np.asarray(obs, dtype=np.float64))[0])

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """A sample, or with ``deterministic`` the mean (Box) / the most likely action (Discrete)."""
        return self._act(self.pi(np.asarray(obs, dtype=np.float64)), deterministic)


class SquashedGaussianActing:
    """SAC's policy: ``tanh(mu(s) + sigma(s) * noise)`` (or ``tanh(mu(s))`` without noise).

    :param trunk: the hidden layers (their activation after the last one too).
    :param heads: reads ``[(W_mu, b_mu), (W_log_std, b_log_std)]``, the two output layers.
    """

    def __init__(self, trunk: MLPCopy, heads: Callable[[], Layers]) -> None:
        self.trunk, self.heads = trunk, WeightCopy(heads)

    def refresh(self) -> None:
        """The network changed: copy its weights again before the next call."""
        self.trunk.refresh()
        self.heads.refresh()

    def __call__(self, obs: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """The action in [-1, 1] for the standard normal draw ``noise`` (None: the mean's)."""
        h = self.trunk(np.asarray(obs, dtype=np.float64))
        (wm, bm), (ws, bs) = self.heads.layers
        mu = h @ wm.T + bm
        if noise is None:
            return np.tanh(mu).astype(np.float32)
        std = np.exp(np.clip(h @ ws.T + bs, LOG_STD_MIN, LOG_STD_MAX))
        return np.tanh(mu + std * noise).astype(np.float32)


class NoisyMLPCopy(MLPCopy):
    """The forward pass of an MLP of noisy linear layers (nn/torch.py's ``NoisyLinear``) in numpy:
    ``read`` gives each layer's means (W, b), ``sigmas`` its scales (W_sigma, b_sigma). Called with the
    layers' standard normal draws ``noise`` (each layer's in, then out) it computes
    ``x W^T + b + f(eps_out) * ((x * f(eps_in)) W_sigma^T + b_sigma)``, ``f(e) = sign(e) sqrt(|e|)``:
    the noisy layer without forming its weight matrix; without, the mean network."""

    def __init__(
        self,
        read: Callable[[], Layers],
        sigmas: Callable[[], Layers],
        activation: str,
        output_activation: str = "identity",
    ) -> None:
        super().__init__(read, activation, output_activation)
        self.sigmas = WeightCopy(sigmas)

    def refresh(self) -> None:
        super().refresh()
        self.sigmas.refresh()

    def __call__(self, x: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        if noise is None:
            return super().__call__(x)
        act, out_act = ACTIVATIONS[self.activation], ACTIVATIONS[self.output_activation]
        layers, start = self.layers, 0
        for i, ((w, b), (ws, bs)) in enumerate(zip(layers, self.sigmas.layers, strict=True)):
            n_out, n_in = w.shape
            eps = noise[start : start + n_in + n_out]
            f = np.sign(eps) * np.sqrt(np.abs(eps))
            start += n_in + n_out
            x = x @ w.T + b + f[n_in:] * ((x * f[:n_in]) @ ws.T + bs)
            x = act(x) if i < len(layers) - 1 else out_act(x)
        return x


class QActing:
    """Q(s, .) of a DQN network on one observation, in numpy: one MLP (``q``), or with dueling heads
    ``trunk`` (its activation after the last layer), ``v`` and ``a`` combined as V + A - mean(A).
    Each is a :class:`Forward` (an :class:`MLPCopy`, or a framework's pass for a CNN network, given as
    ``q``).

    A distributional head (``atoms`` > 1 outputs per action) gives its Q-values as C51's expectation
    over ``support`` of the softmax of each action's logits, or (``support`` None) QR-DQN's mean of the
    quantiles. A noisy network (``noise_sizes``: the draws each of the parts takes, in order) is called
    with the network's draws, split among its parts (each a :class:`NoisyMLPCopy`, or the framework's
    pass given them all); without, the mean network.
    """

    def __init__(
        self, q: Forward | None = None, trunk: Forward | None = None, v: Forward | None = None,
        a: Forward | None = None, atoms: int = 1, support: np.ndarray | None = None,
        noise_sizes: list[int] | None = None,
    ) -> None:  # fmt: skip
        self.q, self.parts = q, [f for f in (trunk, v, a) if f is not None]
        self.atoms, self.support, self.noise_sizes = atoms, support, noise_sizes

    def refresh(self) -> None:
        """The network changed: copy its weights again before the next call."""
        for f in [self.q] if self.q is not None else self.parts:
            f.refresh()

    @property
    def noise_size(self) -> int:
        """The standard normal draws of one noisy pass (0: not a noisy network)."""
        return sum(self.noise_sizes or [])

    def outputs(self, obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        """The network's output: (n_actions,) Q-values, or (n_actions, atoms) for a distributional head."""
        x = np.asarray(obs, dtype=np.float64)
        draws: list[Any] = [None] * 3
        if noise is not None and self.noise_sizes is not None:
            draws = np.split(noise, np.cumsum(self.noise_sizes)[:-1])
        call: Callable[..., np.ndarray] = lambda f, x, d: f(x) if d is None else f(x, d)  # noqa: E731
        if self.q is not None:
            out = call(self.q, x, draws[0])
        else:
            trunk, v, a = self.parts
            h = call(trunk, x, draws[0])
            value, adv = call(v, h, draws[1]), call(a, h, draws[2])
            if self.atoms == 1:
                return value + adv - adv.mean()
            adv = adv.reshape(-1, self.atoms)
            return value.reshape(1, self.atoms) + adv - adv.mean(0)
        return out if self.atoms == 1 else out.reshape(-1, self.atoms)

    def __call__(self, obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        """Q(obs, .) (float64), with the noisy layers' draws ``noise`` (None: the mean network)."""
        out = self.outputs(obs, noise)
        if self.atoms == 1:
            return out
        if self.support is None:  # quantiles
            return out.mean(-1)
        logits = out - out.max(-1, keepdims=True)
        probs = np.exp(logits)
        return (probs @ self.support) / probs.sum(-1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


class RecurrentCell(WeightCopy):
    """One step of PyTorch's LSTM or GRU in numpy, on a float64 copy of its weights.

    :param kind: ``lstm`` or ``gru``.
    :param read: returns ``[(weight_ih, bias_ih), (weight_hh, bias_hh)]`` in torch's layout.
    """

    def __init__(self, kind: str, read: Callable[[], Layers]) -> None:
        super().__init__(read)
        self.kind = kind

    @property
    def size(self) -> int:
        return int(self.layers[1][0].shape[1])

    def zero_state(self) -> tuple[np.ndarray, ...]:
        h = np.zeros(self.size)
        return (h, h.copy()) if self.kind == "lstm" else (h,)

    def __call__(
        self, x: np.ndarray, state: tuple[np.ndarray, ...]
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """(output, new state) for one input ``x`` and the state before it."""
        (w_ih, b_ih), (w_hh, b_hh) = self.layers
        gx, gh = w_ih @ x + b_ih, w_hh @ state[0] + b_hh
        if self.kind == "lstm":
            i, f, g, o = np.split(gx + gh, 4)
            c = _sigmoid(f) * state[1] + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            return h, (h, c)
        xr, xz, xn = np.split(gx, 3)
        hr, hz, hn = np.split(gh, 3)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        h = (1 - z) * np.tanh(xn + r * hn) + z * state[0]
        return h, (h,)


class RecurrentActing(ActorCriticActing):
    """:class:`ActorCriticActing` for recurrent networks: each network's encoder (``pi_in``, ``v_in``:
    the identity, or a framework's CNN pass), its recurrent cell, then the MLP head, with a recurrent
    state per slot: one per env of the rank (:meth:`step`, :meth:`value`) and one for :meth:`act`
    (test episodes, test_policy, the Python API). ``v_cell`` None: V reads the policy's output.

    A slot's state starts at zero and is reset to zero with :meth:`reset` when its episode ends;
    :meth:`state` flattens it (pi's h [and c], then V's) for the buffer and the checkpoints.
    """

    def __init__(
        self,
        pi: Forward,
        v: Forward,
        log_std: Callable[[], np.ndarray] | None,
        rng: np.random.Generator,
        pi_cell: RecurrentCell,
        v_cell: RecurrentCell | None,
        slots: int,
        pi_in: Forward | None = None,
        v_in: Forward | None = None,
        sde: StateDependentNoise | None = None,
    ) -> None:
        super().__init__(pi, v, log_std, rng, sde)
        self.pi_cell, self.v_cell, self.pi_in, self.v_in = pi_cell, v_cell, pi_in, v_in
        self.slots = slots
        self.states: list[dict[str, tuple[np.ndarray, ...]]] = [self.zero() for _ in range(slots + 1)]

    def refresh(self) -> None:
        super().refresh()
        for f in (self.pi_cell, self.v_cell, self.pi_in, self.v_in):
            if f is not None:
                f.refresh()

    def zero(self) -> dict[str, tuple[np.ndarray, ...]]:
        state = {"pi": self.pi_cell.zero_state()}
        if self.v_cell is not None:
            state["v"] = self.v_cell.zero_state()
        return state

    def reset(self, slot: int) -> None:
        """A new episode in env ``slot`` (``-1``: :meth:`act`'s)."""
        self.states[slot] = self.zero()

    def _forward(
        self, obs: np.ndarray, slot: int
    ) -> tuple[np.ndarray, np.ndarray, dict[str, tuple[np.ndarray, ...]]]:
        """(policy head output, V, the state after ``obs``) from slot ``slot``'s state."""
        x = np.asarray(obs, dtype=np.float64)
        state = self.states[slot]
        f_pi, s_pi = self.pi_cell(x if self.pi_in is None else self.pi_in(x), state["pi"])
        new = {"pi": s_pi}
        if self.v_cell is None:
            f_v = f_pi
        else:
            f_v, new["v"] = self.v_cell(x if self.v_in is None else self.v_in(x), state["v"])
        return self.pi(f_pi), self.v(f_v), new

    def step(self, obs: np.ndarray, slot: int = 0) -> tuple[np.ndarray, float, float]:
        out, v, new = self._forward(obs, slot)
        self.states[slot] = new
        a, logp = self._sample(out, slot)
        return a, float(v[0]), logp

    def value(self, obs: np.ndarray, slot: int = 0) -> float:  # type: ignore[override]
        """V(obs) after env ``slot``'s state, which stays as it is (a bootstrap value)."""
        return float(self._forward(obs, slot)[1][0])

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        out, _, new = self._forward(obs, -1)
        self.states[-1] = new
        return self._act(out, deterministic)

    def state(self, slot: int, dtype: Any = np.float32) -> np.ndarray:
        """Slot ``slot``'s state as one vector: pi's h (and c), then V's (float32 for the buffer,
        float64, as it is, for checkpoints)."""
        parts = [x for key in ("pi", "v") if key in self.states[slot] for x in self.states[slot][key]]
        return np.concatenate(parts).astype(dtype)

    def set_state(self, slot: int, flat: np.ndarray) -> None:
        """The inverse of :meth:`state`."""
        flat = np.asarray(flat, np.float64)
        parts, at = {}, 0
        for key, cell in (("pi", self.pi_cell), ("v", self.v_cell)):
            if cell is None:
                continue
            n = len(cell.zero_state())
            parts[key] = tuple(flat[at + k * cell.size : at + (k + 1) * cell.size].copy() for k in range(n))
            at += n * cell.size
        self.states[slot] = parts
