"""TensorFlow 2 networks of the algorithms, mirroring rlexp/nn/torch.py one to one: the same classes,
attribute names and parameter order.

Every linear layer keeps its weight in PyTorch's layout (out_features, in_features) and multiplies
with ``transpose_b=True``, and ``parameters()`` lists variables in the order of torch's: weights
copy between the backends without reshaping, which the parity tests use. Initialisation follows
torch's default (uniform in +-1/sqrt(fan_in) for weights and biases), drawn from a numpy Generator.
Distributions are written out (no tensorflow-probability): diagonal Gaussian and categorical, each
as a tuple of its parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from gymnasium import spaces

from rlexp.nn import LOG_STD_MAX, LOG_STD_MIN
from rlexp.nn.acting import Layers

# TensorFlow's versions of rlexp.nn.ACTIVATIONS
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
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
Dist = tuple[tf.Tensor, tf.Tensor | None]  # (logits, None) or (mean, log std)


class Module(tf.Module):
    """Base of every network here: :meth:`parameters` lists its variables in torch's order."""

    def parameters(self) -> list[tf.Variable]:
        raise NotImplementedError


class Linear(Module):
    """``y = x W^T + b`` with W of shape (out, in), as torch.nn.Linear."""

    def __init__(self, n_in: int, n_out: int, rng: np.random.Generator) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in)
        self.weight = tf.Variable(rng.uniform(-bound, bound, (n_out, n_in)).astype(np.float32), name="weight")
        self.bias = tf.Variable(rng.uniform(-bound, bound, (n_out,)).astype(np.float32), name="bias")

    def parameters(self) -> list[tf.Variable]:
        return [self.weight, self.bias]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.matmul(x, self.weight, transpose_b=True) + self.bias


class MLP(Module):
    """Linear layers with ``activation`` between them and ``output_activation`` after the last (what
    torch's ``mlp`` builds as an nn.Sequential)."""

    def __init__(self, layers: list[Linear], activation: str, output_activation: str) -> None:
        super().__init__()
        self.layers = layers
        self.act, self.out_act = ACTIVATIONS[activation], ACTIVATIONS[output_activation]

    def parameters(self) -> list[tf.Variable]:
        return [v for layer in self.layers for v in layer.parameters()]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = self.act(x) if i < len(self.layers) - 1 else self.out_act(x)
        return x


def mlp(
    sizes: Sequence[int], activation: str, rng: np.random.Generator, output_activation: str = "identity"
) -> MLP:
    """Linear layers of ``sizes`` (input first), ``activation`` between them, ``output_activation`` last."""
    return MLP(
        [Linear(sizes[i], sizes[i + 1], rng) for i in range(len(sizes) - 1)], activation, output_activation
    )


def linear_layers(net: MLP) -> Layers:
    """The (weight, bias) of each layer of ``net`` as numpy arrays, for acting in numpy (:mod:`rlexp.nn.acting`)."""
    return [(layer.weight.numpy(), layer.bias.numpy()) for layer in net.layers]


# --- distributions ------------------------------------------------------------------------------
def gaussian_log_prob(x: tf.Tensor, mu: tf.Tensor, log_std: tf.Tensor) -> tf.Tensor:
    """log N(x; mu, exp(log_std)) summed over the last axis."""
    return tf.reduce_sum(-0.5 * tf.square((x - mu) / tf.exp(log_std)) - log_std - _HALF_LOG_2PI, axis=-1)


# --- on-policy ----------------------------------------------------------------------------------
class CategoricalActor(Module):
    """Policy over a Discrete action space: logits from an MLP."""

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.logits_net = mlp([obs_dim, *hidden_sizes, n_actions], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return self.logits_net.parameters()

    def distribution(self, obs: tf.Tensor) -> Dist:
        return self.logits_net(obs), None

    def __call__(self, obs: tf.Tensor, act: tf.Tensor) -> tuple[Dist, tf.Tensor]:
        """pi and log pi(act|obs)."""
        pi = self.distribution(obs)
        logp = tf.nn.log_softmax(pi[0])
        return pi, tf.gather(logp, tf.cast(act, tf.int32), axis=-1, batch_dims=len(act.shape))

    @staticmethod
    def entropy(pi: Dist) -> tf.Tensor:
        logp = tf.nn.log_softmax(pi[0])
        return -tf.reduce_sum(tf.exp(logp) * logp, axis=-1)

    @staticmethod
    def kl(old: Dist, new: Dist) -> tf.Tensor:
        """KL(old || new) per observation."""
        logp0, logp1 = tf.nn.log_softmax(old[0]), tf.nn.log_softmax(new[0])
        return tf.reduce_sum(tf.exp(logp0) * (logp0 - logp1), axis=-1)


class GaussianActor(Module):
    """Diagonal Gaussian policy over a Box: mean from an MLP, state-independent log std (initially
    ``log_std_init``; Spinning Up's -0.5)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        log_std_init: float = -0.5,
    ) -> None:
        super().__init__()
        self.log_std = tf.Variable(np.full(act_dim, log_std_init, np.float32), name="log_std")
        self.mu_net = mlp([obs_dim, *hidden_sizes, act_dim], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return [self.log_std, *self.mu_net.parameters()]

    def distribution(self, obs: tf.Tensor) -> Dist:
        """(mean, log std broadcast to the mean's shape)."""
        mu = self.mu_net(obs)
        return mu, tf.zeros_like(mu) + self.log_std

    def __call__(self, obs: tf.Tensor, act: tf.Tensor) -> tuple[Dist, tf.Tensor]:
        """pi and log pi(act|obs)."""
        pi = self.distribution(obs)
        return pi, gaussian_log_prob(act, *pi)

    @staticmethod
    def entropy(pi: Dist) -> tf.Tensor:
        """Entropy of each action dimension (not summed), as torch's Normal.entropy()."""
        return 0.5 + _HALF_LOG_2PI + pi[1]

    @staticmethod
    def kl(old: Dist, new: Dist) -> tf.Tensor:
        """KL(old || new) per observation, summed over the action dimensions."""
        (mu0, log_std0), (mu1, log_std1) = old, new
        var0, var1 = tf.exp(2 * log_std0), tf.exp(2 * log_std1)
        return tf.reduce_sum(log_std1 - log_std0 + (var0 + tf.square(mu0 - mu1)) / (2 * var1) - 0.5, axis=-1)


class ValueFunction(Module):
    """The state-value function V(s) of the on-policy algorithms (Spinning Up's MLPCritic)."""

    def __init__(
        self, obs_dim: int, hidden_sizes: Sequence[int], activation: str, rng: np.random.Generator
    ) -> None:
        super().__init__()
        self.v_net = mlp([obs_dim, *hidden_sizes, 1], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return self.v_net.parameters()

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.v_net(obs), -1)


class ActorCritic(Module):
    """Spinning Up's MLPActorCritic: ``pi`` (categorical or Gaussian by action space) and ``v``."""

    def __init__(
        self,
        obs_dim: int,
        act_space: spaces.Space,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        log_std_init: float = -0.5,
        ortho_init: bool = False,
    ) -> None:
        super().__init__()
        if isinstance(act_space, spaces.Discrete):
            self.pi: CategoricalActor | GaussianActor = CategoricalActor(
                obs_dim, int(act_space.n), hidden_sizes, activation, rng
            )
        else:
            self.pi = GaussianActor(
                obs_dim, int(np.prod(act_space.shape)), hidden_sizes, activation, rng, log_std_init
            )
        self.v = ValueFunction(obs_dim, hidden_sizes, activation, rng)
        if ortho_init:
            head = self.pi.mu_net if isinstance(self.pi, GaussianActor) else self.pi.logits_net
            orthogonal_init_(head, ORTHO_GAINS["pi"], rng)
            orthogonal_init_(self.v.v_net, ORTHO_GAINS["v"], rng)

    def parameters(self) -> list[tf.Variable]:
        return [*self.pi.parameters(), *self.v.parameters()]


# Gains of the orthogonal initialisation: the same as rlexp/nn/torch.py's
ORTHO_GAINS = {"hidden": math.sqrt(2.0), "pi": 0.01, "v": 1.0}


def orthogonal(shape: tuple[int, int], gain: float, rng: np.random.Generator) -> np.ndarray:
    """A (rows, cols) matrix with orthonormal rows or columns times ``gain`` (torch's orthogonal_:
    QR of a standard normal draw, signs fixed by R's diagonal)."""
    rows, cols = shape
    flat = rng.standard_normal((max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    return (gain * (q.T if rows < cols else q)).astype(np.float32)


def orthogonal_init_(net: MLP, output_gain: float, rng: np.random.Generator) -> None:
    """Orthogonal weights (``ORTHO_GAINS['hidden']``, ``output_gain`` for the last layer) and zero
    biases for every layer of ``net``, in place, drawn from ``rng``."""
    for i, layer in enumerate(net.layers):
        gain = ORTHO_GAINS["hidden"] if i < len(net.layers) - 1 else output_gain
        layer.weight.assign(orthogonal(tuple(layer.weight.shape), gain, rng))
        layer.bias.assign(np.zeros(layer.bias.shape, np.float32))


# --- off-policy (DDPG, TD3, SAC). Actions are normalised to [-1, 1]; the loop maps them to the env's bounds.
class DeterministicActor(Module):
    """mu(s) in [-1, 1]^n: an MLP with a tanh output (DDPG, TD3)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.pi = mlp([obs_dim, *hidden_sizes, act_dim], activation, rng, "tanh")

    def parameters(self) -> list[tf.Variable]:
        return self.pi.parameters()

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        return self.pi(obs)


class QFunction(Module):
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
        self.q = mlp([obs_dim + act_dim, *hidden_sizes, 1], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return self.q.parameters()

    def __call__(self, obs: tf.Tensor, act: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.q(tf.concat([obs, act], axis=-1)), -1)


class SquashedGaussianActor(Module):
    """SAC's policy: u ~ N(mu(s), sigma(s)), a = tanh(u), with the tanh log-prob correction.

    log sigma is clamped to [LOG_STD_MIN, LOG_STD_MAX] (Spinning Up's -20, 2).
    """

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
    ) -> None:
        super().__init__()
        self.net = mlp([obs_dim, *hidden_sizes], activation, rng, activation)
        features = hidden_sizes[-1] if hidden_sizes else obs_dim  # no hidden layer: a linear policy
        self.mu_layer = Linear(features, act_dim, rng)
        self.log_std_layer = Linear(features, act_dim, rng)

    def parameters(self) -> list[tf.Variable]:
        return [*self.net.parameters(), *self.mu_layer.parameters(), *self.log_std_layer.parameters()]

    def heads(self) -> Layers:
        """The two output layers' (weight, bias) as numpy arrays (for acting in numpy)."""
        return [(d.weight.numpy(), d.bias.numpy()) for d in (self.mu_layer, self.log_std_layer)]

    def __call__(self, obs: tf.Tensor, noise: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        """(action in [-1, 1], log pi(action | obs)) for the standard normal draw ``noise``; None: the mean."""
        h = self.net(obs)
        mu = self.mu_layer(h)
        log_std = tf.clip_by_value(self.log_std_layer(h), LOG_STD_MIN, LOG_STD_MAX)
        u = mu if noise is None else mu + tf.exp(log_std) * noise
        logp = gaussian_log_prob(u, mu, log_std)
        logp -= tf.reduce_sum(2 * (math.log(2) - u - tf.nn.softplus(-2 * u)), axis=-1)
        return tf.tanh(u), logp


class Adam(tf.Module):
    """Adam with torch.optim.Adam's update (eps added to the bias-corrected sqrt(v)).

    Keras' Adam adds its epsilon before the bias correction, which changes small steps; this one
    keeps the two backends numerically equal. Slots (m, v) and the step count are tf.Variables.

    Each variable is updated by one fused ``ResourceApplyAdam`` kernel (instead of a dozen graph ops)
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
        (self.b1, self.b2), self.eps = betas, eps
        self.lr = tf.Variable(lr, trainable=False, dtype=tf.float32)  # a variable: it may be annealed
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
                lr=self.lr,
                beta1=tf.constant(self.b1, tf.float32),
                beta2=tf.constant(self.b2, tf.float32),
                epsilon=eps,
                grad=g,
            )
