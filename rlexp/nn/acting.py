"""Acting in numpy, shared by both backends: one observation per env step through a copy of the weights.

A forward pass of a small MLP on one observation is mostly framework overhead: here a PyTorch call
of PPO's actor-critic costs ~150 us and a TensorFlow call ~500 us, while the same arithmetic in
numpy takes ~30 us. So the on-policy learners of both backends (and the TensorFlow off-policy ones)
act on a *snapshot* of their weights, re-taken after every change of the parameters (after each
update and each checkpoint load), and draw actions from their own numpy Generator, whose state is
checkpointed with the learner. The math runs in float64, so the
probabilities and values equal the framework's float32 ones to float32 precision.

Weights use PyTorch's layout: a layer is ``(W, b)`` with ``W`` of shape (out_features,
in_features), applied as ``x @ W.T + b``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

Layers = list[tuple[np.ndarray, np.ndarray]]
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


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


class ActorCriticActing:
    """Spinning Up's actor-critic acting (VPG, TRPO, PPO): sample, log-probability and V(s) in numpy.

    :param discrete: a categorical policy over logits (else a diagonal Gaussian with a
        state-independent log std).
    :param activation: the hidden activation of both MLPs (a key of :data:`ACTIVATIONS`).
    :param rng: the Generator that draws actions; the learner checkpoints its state.
    """

    def __init__(self, discrete: bool, activation: str, rng: np.random.Generator) -> None:
        self.discrete, self.activation, self.rng = discrete, activation, rng
        self.pi: Layers = []
        self.v: Layers = []
        self.log_std: np.ndarray | None = None

    def load(self, pi: Layers, v: Layers, log_std: np.ndarray | None) -> None:
        """Take a new snapshot of the weights (copies, as float64)."""
        self.pi = [(np.array(w, np.float64), np.array(b, np.float64)) for w, b in pi]
        self.v = [(np.array(w, np.float64), np.array(b, np.float64)) for w, b in v]
        self.log_std = None if log_std is None else np.array(log_std, np.float64)

    def _head(self, obs: np.ndarray) -> np.ndarray:
        return mlp_forward(self.pi, np.asarray(obs, dtype=np.float64), self.activation)

    def _sample(self, out: np.ndarray) -> tuple[np.ndarray, float]:
        """An action drawn from the policy with head output ``out``, and its log-probability."""
        if self.discrete:
            logp_all = out - np.logaddexp.reduce(out)
            probs = np.exp(logp_all)
            a = min(int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum())), len(out) - 1)
            return np.int64(a), float(logp_all[a])
        assert self.log_std is not None
        std = np.exp(self.log_std)
        a = out + std * self.rng.standard_normal(out.shape)
        logp = np.sum(-0.5 * ((a - out) / std) ** 2 - self.log_std - _HALF_LOG_2PI)
        return a.astype(np.float32), float(logp)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Sample an action for one observation; return (action, V(obs), log-prob of the action)."""
        obs = np.asarray(obs, dtype=np.float64)
        a, logp = self._sample(self._head(obs))
        return a, self.value(obs), logp

    def value(self, obs: np.ndarray) -> float:
        """V(obs) for one observation."""
        return float(mlp_forward(self.v, np.asarray(obs, dtype=np.float64), self.activation)[0])

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """A sample, or with ``deterministic`` the mean (Box) / the most likely action (Discrete)."""
        out = self._head(obs)
        if not deterministic:
            return self._sample(out)[0]
        return np.int64(np.argmax(out)) if self.discrete else out.astype(np.float32)
