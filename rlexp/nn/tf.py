"""TensorFlow 2 networks shared by the algorithms, mirroring rlexp/nn/torch.py one to one.

Every dense layer keeps its kernel in PyTorch's layout (out_features, in_features) and multiplies
with ``transpose_b=True``, and modules list their variables in the order of torch's
``parameters()``: weights copy between the backends without reshaping, which the parity tests use.
Initialisation follows torch's default (uniform in +-1/sqrt(fan_in) for weights and biases).
Distributions are written out (no tensorflow-probability): diagonal Gaussian and categorical.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlexp.nn.acting import Layers, mlp_forward

ACTIVATIONS = {
    "tanh": tf.tanh,
    "relu": tf.nn.relu,
    "elu": tf.nn.elu,
    "leaky_relu": lambda x: tf.nn.leaky_relu(x, 0.01),
    "gelu": lambda x: tf.nn.gelu(x, approximate=False),
    "silu": tf.nn.silu,
    "sigmoid": tf.sigmoid,
    "identity": tf.identity,
}
LOG_STD_MAX, LOG_STD_MIN = 2.0, -20.0
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Dense(tf.Module):
    """``y = x W^T + b`` with W of shape (out, in), as torch.nn.Linear."""

    def __init__(self, n_in: int, n_out: int, rng: np.random.Generator) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.weight = tf.Variable(rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32), name="weight")
        self.bias = tf.Variable(rng.uniform(-bound, bound, (n_out,)).astype(np.float32), name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(x, self.weight, transpose_b=True) + self.bias


class MLP(tf.Module):
    """Dense layers of ``sizes`` with ``activation`` between them and ``output_activation`` after the last."""

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        output_activation: str = "identity",
    ) -> None:
        super().__init__()
        self.layers = [Dense(sizes[i], sizes[i + 1], rng) for i in range(len(sizes) - 1)]
        self.act, self.out_act = ACTIVATIONS[activation], ACTIVATIONS[output_activation]
        self.activation, self.output_activation = activation, output_activation
        self._snapshot: Layers | None = None  # float64 copies for np_forward; None: stale

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = self.act(x) if i < len(self.layers) - 1 else self.out_act(x)
        return x

    @property
    def params(self) -> list[tf.Variable]:
        return [v for layer in self.layers for v in (layer.weight, layer.bias)]

    def weights(self) -> Layers:
        """The current weights as numpy ``(W, b)`` pairs (for acting in numpy, :mod:`rlexp.nn.acting`)."""
        return [(layer.weight.numpy(), layer.bias.numpy()) for layer in self.layers]

    def snapshot(self) -> None:
        """Snapshot the current weights for :meth:`np_forward` (call after every change of the
        variables). The copy is taken at the next :meth:`np_forward`, so a burst of updates copies once."""
        self._snapshot = None

    def np_forward(self, x: np.ndarray) -> np.ndarray:
        """The same function in numpy on the last snapshot, for one observation at a time. The weights
        are kept as float64 (the precision of the computation), not converted on every call."""
        if self._snapshot is None:
            self._snapshot = [(w.astype(np.float64), b.astype(np.float64)) for w, b in self.weights()]
        return mlp_forward(self._snapshot, x, self.activation, self.output_activation)


class Net(tf.Module):
    """Base of the modules below: ``params`` lists variables in torch's parameters() order."""

    @property
    def params(self) -> list[tf.Variable]:
        raise NotImplementedError


# --- distributions ------------------------------------------------------------------------------
def gaussian_logp(x: tf.Tensor, mu: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """log N(x; mu, exp(log_std)) summed over the last axis."""
    return tf.reduce_sum(-0.5 * tf.square((x - mu) / tf.exp(log_std)) - log_std - _HALF_LOG_2PI, axis=-1)


def gaussian_entropy(log_std: tf.Tensor) -> tf.Tensor:
    """Entropy of each dimension (not summed), as torch's Normal.entropy()."""
    return 0.5 + _HALF_LOG_2PI + log_std


def gaussian_kl(mu0: tf.Tensor, log_std0: tf.Tensor, mu1: tf.Tensor, log_std1: tf.Tensor) -> tf.Tensor:
    """KL(N0 || N1) summed over the last axis."""
    var0, var1 = tf.exp(2 * log_std0), tf.exp(2 * log_std1)
    return tf.reduce_sum(log_std1 - log_std0 + (var0 + tf.square(mu0 - mu1)) / (2 * var1) - 0.5, axis=-1)


def categorical_logp(logits: tf.Tensor, act: tf.Tensor) -> tf.Tensor:
    return tf.gather(tf.nn.log_softmax(logits), tf.cast(act, tf.int32), axis=-1, batch_dims=len(act.shape))


def categorical_entropy(logits: tf.Tensor) -> tf.Tensor:
    logp = tf.nn.log_softmax(logits)
    return -tf.reduce_sum(tf.exp(logp) * logp, axis=-1)


def categorical_kl(logits0: tf.Tensor, logits1: tf.Tensor) -> tf.Tensor:
    logp0, logp1 = tf.nn.log_softmax(logits0), tf.nn.log_softmax(logits1)
    return tf.reduce_sum(tf.exp(logp0) * (logp0 - logp1), axis=-1)


# --- on-policy ----------------------------------------------------------------------------------
class ActorCritic(Net):
    """Spinning Up's MLPActorCritic: a categorical or diagonal-Gaussian policy (log std init -0.5) and V."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        discrete: bool,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.discrete = discrete
        if not discrete:
            self.log_std = tf.Variable(np.full(act_dim, -0.5, np.float32), name="log_std")
        self.pi_net = MLP([obs_dim, *hidden_sizes, act_dim], activation, rng)
        self.v_net = MLP([obs_dim, *hidden_sizes, 1], activation, rng)

    @property
    def pi_params(self) -> list[tf.Variable]:
        return self.pi_net.params if self.discrete else [self.log_std, *self.pi_net.params]

    @property
    def v_params(self) -> list[tf.Variable]:
        return self.v_net.params

    @property
    def params(self) -> list[tf.Variable]:
        return [*self.pi_params, *self.v_params]

    def dist(self, obs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor | None]:
        """(logits, None) or (mu, log_std broadcast to mu's shape)."""
        out = self.pi_net(obs)
        return (out, None) if self.discrete else (out, tf.zeros_like(out) + self.log_std)

    def logp(self, dist: tuple[tf.Tensor, tf.Tensor | None], act: tf.Tensor) -> tf.Tensor:
        out, log_std = dist
        return categorical_logp(out, act) if self.discrete else gaussian_logp(act, out, log_std)

    def entropy(self, dist: tuple[tf.Tensor, tf.Tensor | None]) -> tf.Tensor:
        out, log_std = dist
        return categorical_entropy(out) if self.discrete else gaussian_entropy(log_std)

    def kl(
        self, old: tuple[tf.Tensor, tf.Tensor | None], new: tuple[tf.Tensor, tf.Tensor | None]
    ) -> tf.Tensor:
        if self.discrete:
            return categorical_kl(old[0], new[0])
        return gaussian_kl(old[0], old[1], new[0], new[1])

    def v(self, obs: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.v_net(obs), -1)


# --- off-policy (actions in [-1, 1]) ------------------------------------------------------------
class DeterministicActor(Net):
    """mu(s) = tanh(MLP(s)) (DDPG, TD3)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.net = MLP([obs_dim, *hidden_sizes, act_dim], activation, rng, output_activation="tanh")

    @property
    def params(self) -> list[tf.Variable]:
        return self.net.params

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        return self.net(obs)


class QFunction(Net):
    """Q(s, a) from an MLP over the concatenated observation and action."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.net = MLP([obs_dim + act_dim, *hidden_sizes, 1], activation, rng)

    @property
    def params(self) -> list[tf.Variable]:
        return self.net.params

    def __call__(self, obs: tf.Tensor, act: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.net(tf.concat([obs, act], axis=-1)), -1)


class SquashedGaussianActor(Net):
    """SAC's policy: u ~ N(mu(s), sigma(s)), a = tanh(u), log-prob with the tanh correction."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.net = MLP([obs_dim, *hidden_sizes], activation, rng, output_activation=activation)
        self.mu_layer = Dense(hidden_sizes[-1], act_dim, rng)
        self.log_std_layer = Dense(hidden_sizes[-1], act_dim, rng)
        self._heads: Layers | None = None  # float64 copies of the two heads for np_forward; None: stale

    @property
    def params(self) -> list[tf.Variable]:
        return [
            *self.net.params,
            self.mu_layer.weight,
            self.mu_layer.bias,
            self.log_std_layer.weight,
            self.log_std_layer.bias,
        ]

    def snapshot(self) -> None:
        """As :meth:`MLP.snapshot`: the weights are copied (float64) at the next :meth:`np_forward`."""
        self.net.snapshot()
        self._heads = None

    def np_forward(self, obs: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        """tanh(mu + std * noise) (or tanh(mu) without noise) in numpy, on the last snapshot."""
        h = self.net.np_forward(obs)
        if self._heads is None:
            self._heads = [
                (d.weight.numpy().astype(np.float64), d.bias.numpy().astype(np.float64))
                for d in (self.mu_layer, self.log_std_layer)
            ]
        (wm, bm), (ws, bs) = self._heads
        mu = h @ wm.T + bm
        if noise is None:
            return np.tanh(mu)
        return np.tanh(mu + np.exp(np.clip(h @ ws.T + bs, LOG_STD_MIN, LOG_STD_MAX)) * noise)

    def __call__(self, obs: tf.Tensor, noise: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        """(action in [-1, 1], log pi(action | obs)) for the standard normal draw ``noise``; None: the mean."""
        h = self.net(obs)
        mu = self.mu_layer(h)
        log_std = tf.clip_by_value(self.log_std_layer(h), LOG_STD_MIN, LOG_STD_MAX)
        u = mu if noise is None else mu + tf.exp(log_std) * noise
        logp = gaussian_logp(u, mu, log_std)
        logp -= tf.reduce_sum(2 * (math.log(2) - u - tf.nn.softplus(-2 * u)), axis=-1)
        return tf.tanh(u), logp


class Adam(tf.Module):
    """Adam with torch.optim.Adam's update (eps added to the bias-corrected sqrt(v)).

    Keras' Adam adds its epsilon before the bias correction, which changes small steps; this one
    keeps the two backends numerically equal. Slots (m, v) and the step count are tf.Variables.

    Each variable is updated by one fused ``ResourceApplyAdam`` kernel (instead of ~12 graph ops)
    with its epsilon scaled by ``sqrt(1 - beta2^t)``, which turns TF's formula
    ``lr sqrt(1-b2^t)/(1-b1^t) m / (sqrt(v) + eps')`` into torch's
    ``lr/(1-b1^t) m / (sqrt(v)/sqrt(1-b2^t) + eps)`` exactly (up to rounding).
    """

    def __init__(
        self,
        params: Sequence[tf.Variable],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__()
        self.params = list(params)
        self.lr, (self.b1, self.b2), self.eps = lr, betas, eps
        self.m = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]
        self.v = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]
        self.step = tf.Variable(0.0, trainable=False)

    @property
    def slots(self) -> list[tf.Variable]:
        return [self.step, *self.m, *self.v]

    def apply(self, grads: Sequence[tf.Tensor]) -> None:
        step = self.step.assign_add(1.0)
        b1_power, b2_power = tf.pow(self.b1, step), tf.pow(self.b2, step)
        eps = self.eps * tf.sqrt(1.0 - b2_power)
        for p, g, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            tf.raw_ops.ResourceApplyAdam(
                var=p.handle,
                m=m.handle,
                v=v.handle,
                beta1_power=b1_power,
                beta2_power=b2_power,
                lr=tf.constant(self.lr, tf.float32),
                beta1=tf.constant(self.b1, tf.float32),
                beta2=tf.constant(self.b2, tf.float32),
                epsilon=eps,
                grad=g,
            )
