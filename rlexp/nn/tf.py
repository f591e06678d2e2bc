"""TensorFlow 2 networks of the algorithms, mirroring rlexp/nn/torch.py one to one: the same classes,
attribute names and parameter order.

Every linear layer keeps its weight in PyTorch's layout (out_features, in_features) and multiplies
with ``transpose_b=True``, and ``parameters()`` lists variables in the order of torch's: weights
copy between the backends without reshaping, which the parity tests use. Initialisation follows
torch's default (uniform in +-1/sqrt(fan_in) for weights and biases), drawn from a numpy Generator.
Distributions are written out (no tensorflow-probability): diagonal Gaussian and categorical, each
as a tuple of its parameters.

Convolutions keep torch's weight layout too, (out, in, kh, kw), transposed to TF's (kh, kw, in,
out) when applied; TF runs them on NHWC images (its CPU kernels want channels last) and flattens
their output in torch's (C, H, W) order, so a :class:`NatureCNN`'s weights copy between the
backends as they are. Networks with an image encoder list its parameters first (after a Gaussian
policy's ``log_std``), as torch registers them.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf
from gymnasium import spaces

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
    """Base of every network here: :meth:`parameters` lists its variables in torch's order.

    ``encoder``: the image encoder of the networks that read observations (None: flat observations,
    read as they are).
    """

    encoder: Module | None = None

    def parameters(self) -> list[tf.Variable]:
        raise NotImplementedError

    def buffers(self) -> list[tf.Variable]:
        """State that is not trained but saved, in the order of torch's state_dict buffers (the running
        statistics of :class:`BatchRenorm`); none here."""
        return []

    def encoder_parameters(self) -> list[tf.Variable]:
        """The encoder's variables (none without one)."""
        return [] if self.encoder is None else self.encoder.parameters()

    def encode(self, obs: tf.Tensor) -> tf.Tensor:
        """What the MLP reads: the observations, or their image encoder's features."""
        return obs if self.encoder is None else self.encoder(obs)


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


class Conv2d(Module):
    """torch.nn.Conv2d without padding: weight of shape (out, in, kh, kw) in torch's layout and
    initialisation (uniform in +-1/sqrt(in * kh * kw)), applied to NHWC images."""

    def __init__(self, n_in: int, n_out: int, kernel: int, stride: int, rng: np.random.Generator) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(n_in * kernel * kernel)
        shape = (n_out, n_in, kernel, kernel)
        self.weight = tf.Variable(rng.uniform(-bound, bound, shape).astype(np.float32), name="weight")
        self.bias = tf.Variable(rng.uniform(-bound, bound, (n_out,)).astype(np.float32), name="bias")
        self.stride = stride

    def parameters(self) -> list[tf.Variable]:
        return [self.weight, self.bias]

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        kernel = tf.transpose(self.weight, [2, 3, 1, 0])  # (kh, kw, in, out)
        return tf.nn.conv2d(x, kernel, self.stride, "VALID") + self.bias


class NatureCNN(Module):
    """The Nature DQN encoder (Mnih et al. 2015), as rlexp/nn/torch.py's: pixels / 255, the
    convolutions of :data:`rlexp.nn.NATURE_CNN_CONVS` with ReLU, a dense layer of
    NATURE_CNN_FEATURES units with ReLU. Leading dimensions are kept (one observation or a batch).

    :param image: the layout of one observation (:func:`rlexp.nn.image_layout`).
    :param rng: draws the initial weights.
    """

    def __init__(self, image: Image, rng: np.random.Generator) -> None:
        super().__init__()
        self.image = image
        self.convs: list[Conv2d] = []
        channels = image.chw[0]
        for out, kernel, stride in NATURE_CNN_CONVS:
            self.convs.append(Conv2d(channels, out, kernel, stride, rng))
            channels = out
        height, width = nature_cnn_output(*image.chw[1:])
        self.flat = channels * height * width
        self.fc = Linear(self.flat, NATURE_CNN_FEATURES, rng)

    def parameters(self) -> list[tf.Variable]:
        return [*(v for conv in self.convs for v in conv.parameters()), *self.fc.parameters()]

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        shape, obs = self.image.shape, tf.convert_to_tensor(obs)
        lead = tf.shape(obs)[: obs.shape.rank - len(shape)]
        x = tf.reshape(tf.cast(obs, tf.float32) / 255.0, (-1, *shape))
        if len(shape) == 2:
            x = x[..., None]
        elif self.image.channels_first:
            x = tf.transpose(x, [0, 2, 3, 1])  # NCHW -> NHWC
        for conv in self.convs:
            x = tf.nn.relu(conv(x))
        x = tf.reshape(tf.transpose(x, [0, 3, 1, 2]), (-1, self.flat))  # flattened as torch does: (C, H, W)
        x = tf.nn.relu(self.fc(x))
        return tf.reshape(x, tf.concat([lead, [NATURE_CNN_FEATURES]], 0))


class MinAtarCNN(Module):
    """MinAtar's encoder, as rlexp/nn/torch.py's: the 0/1 images as float32 (not scaled), one
    convolution of MINATAR_CNN_CHANNELS 3x3 filters with stride 1 and a ReLU, flattened in torch's
    (C, H, W) order. Leading dimensions are kept.

    :param image: the layout of one observation (:func:`rlexp.nn.image_layout`).
    :param rng: draws the initial weights.
    """

    def __init__(self, image: Image, rng: np.random.Generator) -> None:
        super().__init__()
        self.image = image
        self.conv = Conv2d(image.chw[0], MINATAR_CNN_CHANNELS, MINATAR_CNN_KERNEL, 1, rng)
        self.features = minatar_cnn_features(image)

    def parameters(self) -> list[tf.Variable]:
        return self.conv.parameters()

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        shape, obs = self.image.shape, tf.convert_to_tensor(obs)
        lead = tf.shape(obs)[: obs.shape.rank - len(shape)]
        x = tf.reshape(tf.cast(obs, tf.float32), (-1, *shape))
        if len(shape) == 2:
            x = x[..., None]
        elif self.image.channels_first:
            x = tf.transpose(x, [0, 2, 3, 1])  # NCHW -> NHWC
        x = tf.nn.relu(self.conv(x))
        x = tf.reshape(tf.transpose(x, [0, 3, 1, 2]), (-1, self.features))  # flattened as torch does
        return tf.reshape(x, tf.concat([lead, [self.features]], 0))


# (kind, size, role) of a recurrent layer: lstm or gru, its units, and the Sequences.states key it reads
RecurrentSpec = tuple[str, int, str]


class Recurrent(Module):
    """rlexp/nn/torch.py's Recurrent: an encoder (None: the observations as they are) followed by
    PyTorch's LSTM or GRU equations, written out (gates i, f, g, o / r, z, n in torch's order; weights
    ``weight_ih`` (gates x size, n_in), ``weight_hh``, ``bias_ih``, ``bias_hh`` in torch's layout and
    initialisation, uniform in +-1/sqrt(size)), run over time with ``tf.scan``. It takes
    :class:`rlexp.nn.Sequences` and returns the output at their valid steps (row-major)."""

    def __init__(
        self, inner: Module | None, n_in: int, spec: RecurrentSpec, rng: np.random.Generator
    ) -> None:
        super().__init__()
        self.kind, self.size, self.role = spec
        self.inner = inner
        gates = (4 if self.kind == "lstm" else 3) * self.size
        bound = 1.0 / math.sqrt(self.size)

        def draw(*shape: int) -> tf.Variable:
            return tf.Variable(rng.uniform(-bound, bound, shape).astype(np.float32))

        self.weight_ih, self.weight_hh = draw(gates, n_in), draw(gates, self.size)
        self.bias_ih, self.bias_hh = draw(gates), draw(gates)

    def parameters(self) -> list[tf.Variable]:
        own = [self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh]  # torch's order
        return [*([] if self.inner is None else self.inner.parameters()), *own]

    def step(self, gx: tf.Tensor, state: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, ...]:
        """One step from the input's gate pre-activations ``gx`` (x W_ih^T + b_ih); the new state."""
        gh = tf.matmul(state[0], self.weight_hh, transpose_b=True) + self.bias_hh
        if self.kind == "lstm":
            i, f, g, o = tf.split(gx + gh, 4, axis=-1)
            c = tf.sigmoid(f) * state[1] + tf.sigmoid(i) * tf.tanh(g)
            return tf.sigmoid(o) * tf.tanh(c), c
        xr, xz, xn = tf.split(gx, 3, axis=-1)
        hr, hz, hn = tf.split(gh, 3, axis=-1)
        r, z = tf.sigmoid(xr + hr), tf.sigmoid(xz + hz)
        n = tf.tanh(xn + r * hn)
        return ((1 - z) * n + z * state[0],)

    def __call__(self, seqs: Sequences) -> tf.Tensor:
        obs = tf.convert_to_tensor(seqs.obs)
        x = obs if self.inner is None else self.inner(obs)
        x = tf.cast(tf.reshape(x, tf.concat([tf.shape(seqs.valid), [-1]], 0)), tf.float32)  # (S, L, n_in)
        gx = tf.matmul(x, self.weight_ih, transpose_b=True) + self.bias_ih
        states = tf.scan(
            lambda state, g: self.step(g, state),
            tf.transpose(gx, [1, 0, 2]),  # time first
            initializer=tuple(tf.convert_to_tensor(h) for h in seqs.states[self.role]),
        )
        out = tf.transpose(states[0], [1, 0, 2])  # (S, L, size)
        return tf.boolean_mask(out, seqs.valid)


class SharedRecurrent(Module):
    """V's view of the policy's :class:`Recurrent` (``network.recurrent_critic=shared``): its output
    without a gradient; its variables stay the policy's (not in V's parameters)."""

    def __init__(self, source: Recurrent) -> None:
        super().__init__()
        self._source = [source]  # a list: tf.Module would track an attribute's variables as V's own

    def parameters(self) -> list[tf.Variable]:
        return []

    def __call__(self, seqs: Sequences) -> tf.Tensor:
        return tf.stop_gradient(self._source[0](seqs))


def encoder(
    obs_dim: int, image: Image | None, rng: np.random.Generator, recurrent: RecurrentSpec | None = None
) -> tuple[Module | None, int]:
    """(the encoder or None, the width of what the MLP reads): None and ``obs_dim`` for flat
    observations, else a fresh :class:`NatureCNN` or :class:`MinAtarCNN` (``image.encoder``, drawn from
    ``rng``) and its features; with ``recurrent``, that encoder inside a :class:`Recurrent` layer."""
    inner: Module | None
    if image is None:
        inner, width = None, obs_dim
    elif image.encoder == "minatar_cnn":
        inner = MinAtarCNN(image, rng)
        width = inner.features
    else:
        inner, width = NatureCNN(image, rng), NATURE_CNN_FEATURES
    if recurrent is None:
        return inner, width
    return Recurrent(inner, width, recurrent, rng), recurrent[1]


class TFForward:
    """A network's forward pass on one observation through a compiled TensorFlow function, as float64
    numpy: how a CNN network acts (torch's twin: rlexp.nn.torch.TorchForward). It has
    :class:`rlexp.nn.acting.MLPCopy`'s interface (call, refresh).

    :param fn: the compiled forward pass of a batch; each array argument is passed as a float32
        tensor with a batch axis of one (None stays None), and the output's first row is returned.
        It reads the live variables, so :meth:`refresh` has nothing to do.
    """

    def __init__(self, fn: Callable[..., tf.Tensor]) -> None:
        self.fn = fn

    def refresh(self) -> None:
        """Nothing to re-take: the forward pass reads the current variables."""

    def __call__(self, *args: np.ndarray | None) -> np.ndarray:
        tensors = [None if a is None else tf.constant(np.asarray(a, np.float32)[None]) for a in args]
        return np.asarray(self.fn(*tensors)[0], np.float64)


# owner -> the compiled call that reads its variables (read_numpy), kept as long as the owner lives
_READERS: weakref.WeakKeyDictionary[object, Callable[[], list[tf.Tensor]]] = weakref.WeakKeyDictionary()


def read_numpy(owner: object, variables: Callable[[], Sequence[tf.Variable]]) -> list[np.ndarray]:
    """The values of ``variables()`` (``owner``'s, the same ones at every call) as numpy arrays, read by
    one compiled call made at the first read and kept with ``owner``. Each eager read dispatches an op
    of its own (``v.numpy()``: ~26 us a variable here): a SAC policy's 8 read one by one after every
    update took ~250 us of a ~4.3 ms step, in one call ~150."""
    read = _READERS.get(owner)
    if read is None:
        fixed = list(variables())
        read = _READERS[owner] = tf.function(lambda: [tf.identity(v) for v in fixed])
    return [x.numpy() for x in read()]


def pairs(values: list[np.ndarray]) -> Layers:
    """[w0, b0, w1, b1, ...] as [(w0, b0), (w1, b1), ...]."""
    return list(zip(values[::2], values[1::2], strict=True))


def linear_layers(net: MLP) -> Layers:
    """The (weight, bias) of each layer of ``net`` as numpy arrays, for acting in numpy (:mod:`rlexp.nn.acting`)."""
    return pairs(read_numpy(net, lambda: [v for layer in net.layers for v in (layer.weight, layer.bias)]))


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
        image: Image | None = None,
        recurrent: RecurrentSpec | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, rng, recurrent)
        self.logits_net = mlp([n_in, *hidden_sizes, n_actions], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return [*self.encoder_parameters(), *self.logits_net.parameters()]

    def distribution(self, obs: tf.Tensor) -> Dist:
        return self.logits_net(self.encode(obs)), None

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
    ``log_std_init``; Spinning Up's -0.5). ``sde``: gSDE, as rlexp/nn/torch.py's GaussianActor (a
    (latent, act_dim) log std matrix; the std of each state from its latent features)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        image: Image | None = None,
        log_std_init: float = -0.5,
        recurrent: RecurrentSpec | None = None,
        sde: bool = False,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, rng, recurrent)
        self.sde = sde
        shape = (hidden_sizes[-1] if hidden_sizes else n_in, act_dim) if sde else (act_dim,)
        self.log_std = tf.Variable(np.full(shape, log_std_init, np.float32), name="log_std")
        self.mu_net = mlp([n_in, *hidden_sizes, act_dim], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return [self.log_std, *self.encoder_parameters(), *self.mu_net.parameters()]

    def distribution(self, obs: tf.Tensor) -> Dist:
        """(mean, log std broadcast to the mean's shape)."""
        h = self.encode(obs)
        if not self.sde:
            mu = self.mu_net(h)
            return mu, tf.zeros_like(mu) + self.log_std
        latent = self.latent(h)
        variance = tf.matmul(tf.square(tf.stop_gradient(latent)), tf.exp(2 * self.log_std)) + SDE_EPS
        return self.mu_net.layers[-1](latent), 0.5 * tf.math.log(variance)

    def latent(self, features: tf.Tensor) -> tf.Tensor:
        """The MLP's last hidden layer (its activation applied) for the encoder's ``features``."""
        for layer in self.mu_net.layers[:-1]:
            features = self.mu_net.act(layer(features))
        return features

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
        self,
        obs_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        image: Image | None = None,
        recurrent: RecurrentSpec | None = None,
        shared: Recurrent | None = None,
    ) -> None:
        super().__init__()
        if shared is not None:  # the policy's recurrent layer, read without a gradient
            self.encoder: Module | None = SharedRecurrent(shared)
            n_in = shared.size
        else:
            self.encoder, n_in = encoder(obs_dim, image, rng, recurrent)
        self.v_net = mlp([n_in, *hidden_sizes, 1], activation, rng)

    def parameters(self) -> list[tf.Variable]:
        return [*self.encoder_parameters(), *self.v_net.parameters()]

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        return tf.squeeze(self.v_net(self.encode(obs)), -1)


class ActorCritic(Module):
    """Spinning Up's MLPActorCritic: ``pi`` (categorical or Gaussian by action space) and ``v``, each
    with its own encoder (``image``: a CNN each); with ``recurrent`` (kind, size), rlexp/nn/torch.py's
    recurrent layers (V's own, or a gradient-free view of the policy's)."""

    def __init__(
        self,
        obs_dim: int,
        act_space: spaces.Space,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
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
                obs_dim, int(act_space.n), hidden_sizes, activation, rng, image, rnn_pi
            )
        else:
            act_dim = int(np.prod(act_space.shape))
            self.pi = GaussianActor(
                obs_dim, act_dim, hidden_sizes, activation, rng, image, log_std_init, rnn_pi, sde
            )
        if recurrent is not None and recurrent_critic == "shared":
            assert isinstance(self.pi.encoder, Recurrent)
            self.v = ValueFunction(obs_dim, hidden_sizes, activation, rng, shared=self.pi.encoder)
        else:
            rnn_v = None if recurrent is None else (*recurrent, "v")
            self.v = ValueFunction(obs_dim, hidden_sizes, activation, rng, image, rnn_v)
        if ortho_init:  # the MLP heads only; a CNN encoder keeps its default initialisation
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
        image: Image | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, rng)
        self.pi = mlp([n_in, *hidden_sizes, act_dim], activation, rng, "tanh")

    def parameters(self) -> list[tf.Variable]:
        return [*self.encoder_parameters(), *self.pi.parameters()]

    def __call__(self, obs: tf.Tensor) -> tf.Tensor:
        return self.pi(self.encode(obs))


class BatchRenorm(Module):
    """Batch renormalisation (Ioffe 2017), as rlexp/nn/torch.py's (the same equations, parameters
    ``scale``, ``bias`` and buffers ``running_mean``, ``running_var``, ``steps``): with ``train`` the
    batch's statistics corrected by r and d after the warm-up, the running statistics updated; without,
    the running statistics, frozen."""

    def __init__(self, features: int, spec: Renorm) -> None:
        super().__init__()
        self.spec = spec
        self.scale = tf.Variable(tf.ones([features]), name="scale")
        self.bias = tf.Variable(tf.zeros([features]), name="bias")
        self.running_mean = tf.Variable(tf.zeros([features]), trainable=False, name="running_mean")
        self.running_var = tf.Variable(tf.ones([features]), trainable=False, name="running_var")
        self.steps = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="steps")

    def parameters(self) -> list[tf.Variable]:
        return [self.scale, self.bias]

    def buffers(self) -> list[tf.Variable]:
        return [self.running_mean, self.running_var, self.steps]

    def __call__(self, x: tf.Tensor, train: bool = False) -> tf.Tensor:
        spec = self.spec
        if not train:
            return (x - self.running_mean) / tf.sqrt(self.running_var + spec.eps) * self.scale + self.bias
        mean = tf.reduce_mean(x, axis=0)
        var = tf.reduce_mean(tf.square(x - mean), axis=0)
        std = tf.sqrt(var + spec.eps)
        running_std = tf.sqrt(self.running_var + spec.eps)
        warm = self.steps >= spec.warmup
        r = tf.stop_gradient(tf.clip_by_value(std / running_std, 1 / spec.rmax, spec.rmax))
        d = tf.stop_gradient(
            tf.clip_by_value((mean - self.running_mean) / running_std, -spec.dmax, spec.dmax)
        )
        r, d = tf.where(warm, r, tf.ones_like(r)), tf.where(warm, d, tf.zeros_like(d))
        self.running_mean.assign_add(spec.momentum * (tf.stop_gradient(mean) - self.running_mean))
        self.running_var.assign_add(spec.momentum * (tf.stop_gradient(var) - self.running_var))
        self.steps.assign_add(1)
        return ((x - mean) / std * r + d) * self.scale + self.bias

    def folded(self) -> tuple[np.ndarray, np.ndarray]:
        """(s, t) with ``self(x) = x * s + t`` in evaluation, as float64 numpy (for acting in numpy)."""
        s = self.scale.numpy().astype(np.float64) / np.sqrt(
            self.running_var.numpy().astype(np.float64) + self.spec.eps
        )
        return s, self.bias.numpy().astype(np.float64) - self.running_mean.numpy() * s


def fold_into(norm: BatchRenorm, layer: Linear) -> tuple[np.ndarray, np.ndarray]:
    """``layer(norm(x))`` in evaluation as one linear layer's (W, b), float64 numpy."""
    s, t = norm.folded()
    w = layer.weight.numpy().astype(np.float64)
    return w * s, layer.bias.numpy() + w @ t


class RenormMLP(Module):
    """rlexp/nn/torch.py's RenormMLP: a :class:`BatchRenorm` before each :class:`Linear` (``layers``
    alternates them), ``activation`` after each Linear but the last (``output_activation``), and with
    ``norm_output`` a last BatchRenorm."""

    def __init__(
        self,
        sizes: Sequence[int],
        activation: str,
        spec: Renorm,
        rng: np.random.Generator,
        output_activation: str = "identity",
        norm_output: bool = False,
    ) -> None:
        super().__init__()
        self.layers: list[Module] = []
        for i in range(len(sizes) - 1):
            self.layers += [BatchRenorm(sizes[i], spec), Linear(sizes[i], sizes[i + 1], rng)]
        if norm_output:
            self.layers.append(BatchRenorm(sizes[-1], spec))
        self.act, self.out_act = ACTIVATIONS[activation], ACTIVATIONS[output_activation]
        self.n_linear = len(sizes) - 1

    def parameters(self) -> list[tf.Variable]:
        return [v for m in self.layers for v in m.parameters()]

    def buffers(self) -> list[tf.Variable]:
        return [v for m in self.layers for v in m.buffers()]

    def __call__(self, x: tf.Tensor, train: bool = False) -> tf.Tensor:
        i = 0
        for m in self.layers:
            if isinstance(m, BatchRenorm):
                x = m(x, train)
            else:
                x = m(x)
                x = self.act(x) if i < self.n_linear - 1 else self.out_act(x)
                i += 1
        return x

    def folded_layers(self) -> Layers:
        """The Linear layers with the BatchRenorm before each folded in (evaluation), for acting in numpy;
        a last BatchRenorm (``norm_output``) is left to :meth:`output_norm`."""
        norms_and_layers = zip(
            self.layers[0 : 2 * self.n_linear : 2], self.layers[1 : 2 * self.n_linear : 2], strict=True
        )
        return [fold_into(norm, layer) for norm, layer in norms_and_layers]  # type: ignore[arg-type]

    def output_norm(self) -> BatchRenorm | None:
        """The BatchRenorm after the last activation (``norm_output``), else None."""
        last = self.layers[-1] if self.layers else None
        return last if isinstance(last, BatchRenorm) and len(self.layers) > 2 * self.n_linear else None


def renorm_buffers(*modules: Module) -> list[tf.Variable]:
    """The running means and variances of every BatchRenorm of ``modules`` (averaged over ranks)."""
    return [v for m in modules for v in m.buffers() if v.dtype == tf.float32]


class QFunction(Module):
    """Q(s, a) from an MLP over the concatenated observation (its encoder's features) and action, as
    rlexp/nn/torch.py's (``outputs`` > 1: TQC's quantiles on the last axis; ``renorm``: CrossQ's
    :class:`RenormMLP`)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        image: Image | None = None,
        outputs: int = 1,
        renorm: Renorm | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, rng)
        sizes = [n_in + act_dim, *hidden_sizes, outputs]
        self.q: MLP | RenormMLP = (
            mlp(sizes, activation, rng) if renorm is None else RenormMLP(sizes, activation, renorm, rng)
        )
        self.squeeze = outputs == 1

    def parameters(self) -> list[tf.Variable]:
        return [*self.encoder_parameters(), *self.q.parameters()]

    def buffers(self) -> list[tf.Variable]:
        return self.q.buffers()

    def __call__(self, obs: tf.Tensor, act: tf.Tensor, train: bool = False) -> tf.Tensor:
        x = tf.concat([self.encode(obs), act], axis=-1)
        q = self.q(x, train) if isinstance(self.q, RenormMLP) else self.q(x)
        return tf.squeeze(q, -1) if self.squeeze else q


class QuantileCritics(Module):
    """TQC's critics, as rlexp/nn/torch.py's: ``n_critics`` :class:`QFunction` with ``n_quantiles``
    outputs each, returned as (batch, n_critics, n_quantiles)."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        hidden_sizes: Sequence[int],
        activation: str,
        n_critics: int,
        n_quantiles: int,
        rng: np.random.Generator,
        image: Image | None = None,
    ) -> None:
        super().__init__()
        self.nets = [
            QFunction(obs_dim, act_dim, hidden_sizes, activation, rng, image, outputs=n_quantiles)
            for _ in range(n_critics)
        ]

    def parameters(self) -> list[tf.Variable]:
        return [v for net in self.nets for v in net.parameters()]

    def __call__(self, obs: tf.Tensor, act: tf.Tensor) -> tf.Tensor:
        return tf.stack([net(obs, act) for net in self.nets], axis=-2)


def quantile_huber_loss(
    current: tf.Tensor, target: tf.Tensor, sum_over_quantiles: bool = False, per_row: bool = False
) -> tf.Tensor:
    """rlexp/nn/torch.py's quantile Huber loss (kappa 1): estimates ``current`` (..., n) at the levels
    (2i + 1) / (2n) against the target samples ``target`` (..., m), which carry no gradient (``per_row``:
    each row's loss); its gradient computed beside it in a few passes over the pairs, as torch's
    ``_QuantileHuberLoss``."""
    n = current.shape[-1]
    tau = ((tf.range(n, dtype=current.dtype) + 0.5) / n)[:, None]
    target = tf.stop_gradient(target)

    @tf.custom_gradient
    def loss_of(current: tf.Tensor) -> tuple[tf.Tensor, Callable[[tf.Tensor], tf.Tensor]]:
        delta = target[..., None, :] - current[..., :, None]  # (..., n, m)
        c = tf.clip_by_value(delta, -1.0, 1.0)
        wc = tf.where(delta < 0, 1 - tau, tau) * c
        if per_row:  # each row's loss (QR-DQN's per transition, for its priorities and weights)
            count = tf.cast(tf.shape(delta)[-1] * (1 if sum_over_quantiles else n), delta.dtype)
            rows = tf.reduce_sum(wc * (delta - 0.5 * c), axis=[-2, -1]) / count
            d_rows = -tf.reduce_sum(wc, axis=-1) / count
            return rows, lambda grad: d_rows * grad[..., None]
        count = tf.cast(tf.size(delta) // (n if sum_over_quantiles else 1), delta.dtype)
        loss = tf.reduce_sum(wc * (delta - 0.5 * c)) / count
        d_current = -tf.reduce_sum(wc, axis=-1) / count
        return loss, lambda grad: d_current * grad

    return loss_of(current)


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
        image: Image | None = None,
        renorm: Renorm | None = None,
    ) -> None:
        super().__init__()
        self.encoder, n_in = encoder(obs_dim, image, rng)
        sizes = [n_in, *hidden_sizes]
        self.net: MLP | RenormMLP = (
            mlp(sizes, activation, rng, activation)
            if renorm is None
            else RenormMLP(sizes, activation, renorm, rng, activation, norm_output=True)
        )
        # no hidden layer: a policy linear in the encoder's output
        features = hidden_sizes[-1] if hidden_sizes else n_in
        self.mu_layer = Linear(features, act_dim, rng)
        self.log_std_layer = Linear(features, act_dim, rng)
        #: the hidden layers: the first of :meth:`acting_layers`
        self.n_hidden = len(hidden_sizes)

    def parameters(self) -> list[tf.Variable]:
        return [
            *self.encoder_parameters(),
            *self.net.parameters(),
            *self.mu_layer.parameters(),
            *self.log_std_layer.parameters(),
        ]

    def buffers(self) -> list[tf.Variable]:
        return self.net.buffers()

    def acting_layers(self) -> Layers:
        """The hidden layers' (weight, bias) then the two heads' as numpy arrays, for acting in numpy
        (:attr:`n_hidden` of them, then 2): read in one compiled call (:func:`read_numpy`); CrossQ's
        computed, each batch renormalisation folded into the layer after it."""
        heads = (self.mu_layer, self.log_std_layer)
        if isinstance(self.net, RenormMLP):
            norm = self.net.output_norm()
            tops = [
                fold_into(norm, d) if norm is not None else (d.weight.numpy(), d.bias.numpy()) for d in heads
            ]
            return [*self.net.folded_layers(), *tops]
        layers = [*self.net.layers, *heads]
        return pairs(read_numpy(self, lambda: [v for layer in layers for v in (layer.weight, layer.bias)]))

    def __call__(
        self, obs: tf.Tensor, noise: tf.Tensor | None, train: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(action in [-1, 1], log pi(action | obs)) for the standard normal draw ``noise``; None: the mean.
        ``train``: batch renormalisation with this batch's statistics (CrossQ's policy step)."""
        x = self.encode(obs)
        h = self.net(x, train) if isinstance(self.net, RenormMLP) else self.net(x)
        mu = self.mu_layer(h)
        log_std = tf.clip_by_value(self.log_std_layer(h), LOG_STD_MIN, LOG_STD_MAX)
        u = mu if noise is None else mu + tf.exp(log_std) * noise
        logp = gaussian_log_prob(u, mu, log_std)
        logp -= tf.reduce_sum(2 * (math.log(2) - u - tf.nn.softplus(-2 * u)), axis=-1)
        return tf.tanh(u), logp


def scaled_noise(eps: tf.Tensor) -> tf.Tensor:
    """f(eps) = sign(eps) sqrt(|eps|), as rlexp/nn/torch.py's."""
    return tf.sign(eps) * tf.sqrt(tf.abs(eps))


class NoisyLinear(Linear):
    """rlexp/nn/torch.py's factorised Gaussian noisy linear layer: ``weight`` and ``bias`` the means
    (drawn as :class:`Linear`'s), ``weight_sigma`` and ``bias_sigma`` the scales (``sigma0 / sqrt(in)``),
    parameters in that order; ``noise`` the in, then out, standard normal draws (None: the mean)."""

    def __init__(self, n_in: int, n_out: int, rng: np.random.Generator, sigma0: float) -> None:
        super().__init__(n_in, n_out, rng)
        scale = np.float32(sigma0 / math.sqrt(n_in))
        self.weight_sigma = tf.Variable(np.full((n_out, n_in), scale, np.float32), name="weight_sigma")
        self.bias_sigma = tf.Variable(np.full((n_out,), scale, np.float32), name="bias_sigma")
        self.n_in, self.n_out = n_in, n_out

    @property
    def noise_size(self) -> int:
        return self.n_in + self.n_out

    def parameters(self) -> list[tf.Variable]:
        return [self.weight, self.bias, self.weight_sigma, self.bias_sigma]

    def __call__(self, x: tf.Tensor, noise: tf.Tensor | None = None) -> tf.Tensor:
        if noise is None:
            return super().__call__(x)
        f_in, f_out = tf.split(scaled_noise(noise), [self.n_in, self.n_out])
        if len(x.shape) == 2 and x.shape[0] == 1:  # one observation (acting): without forming the weights
            noisy = tf.matmul(x * f_in, self.weight_sigma, transpose_b=True) + self.bias_sigma
            return tf.matmul(x, self.weight, transpose_b=True) + self.bias + f_out * noisy
        weight = self.weight + self.weight_sigma * (f_out[:, None] * f_in[None, :])
        return tf.matmul(x, weight, transpose_b=True) + (self.bias + self.bias_sigma * f_out)


class NoisyMLP(MLP):
    """:class:`MLP` of :class:`NoisyLinear` layers, called as ``net(x, noise)`` (the draws of all its
    layers in order; None: the means), as rlexp/nn/torch.py's."""

    @property
    def noise_size(self) -> int:
        return sum(layer.noise_size for layer in self.layers)  # type: ignore[attr-defined]

    def __call__(self, x: tf.Tensor, noise: tf.Tensor | None = None) -> tf.Tensor:
        sizes = [layer.noise_size for layer in self.layers]  # type: ignore[attr-defined]
        draws = tf.split(noise, sizes) if noise is not None and sizes else [None] * len(sizes)
        for i, (layer, draw) in enumerate(zip(self.layers, draws, strict=True)):
            x = layer(x, draw)  # type: ignore[call-arg]
            x = self.act(x) if i < len(self.layers) - 1 else self.out_act(x)
        return x


def noisy_mlp(
    sizes: Sequence[int],
    activation: str,
    rng: np.random.Generator,
    sigma0: float,
    output_activation: str = "identity",
) -> NoisyMLP:
    """:func:`mlp` of :class:`NoisyLinear` layers."""
    layers: list[Linear] = [NoisyLinear(sizes[i], sizes[i + 1], rng, sigma0) for i in range(len(sizes) - 1)]
    return NoisyMLP(layers, activation, output_activation)


def sigma_layers(net: MLP) -> Layers:
    """The (weight_sigma, bias_sigma) of each layer of a :class:`NoisyMLP` as numpy arrays."""
    return [(layer.weight_sigma.numpy(), layer.bias_sigma.numpy()) for layer in net.layers]  # type: ignore[attr-defined]


class DiscreteQNetwork(Module):
    """Q(s, .) over a Discrete action space, as rlexp/nn/torch.py's (the same attributes and parameter
    order): an MLP with one output per action, or with ``dueling`` a shared ``trunk`` and two streams
    ``v_net`` and ``a_net`` combined as V + A - mean(A); with ``atoms`` > 1 a distributional head
    ((..., n_actions, atoms)), with ``noisy_sigma0`` noisy layers after the encoder (``noise``: their
    draws, :attr:`noise_size`)."""

    def __init__(
        self,
        obs_dim: int,
        n_actions: int,
        hidden_sizes: Sequence[int],
        activation: str,
        rng: np.random.Generator,
        image: Image | None = None,
        dueling: bool = False,
        atoms: int = 1,
        noisy_sigma0: float | None = None,
    ) -> None:
        super().__init__()
        self.dueling, self.n_actions, self.atoms = dueling, n_actions, atoms
        self.encoder, n_in = encoder(obs_dim, image, rng)
        hidden = list(hidden_sizes)

        def make(sizes: list[int], out_act: str = "identity") -> MLP:
            if noisy_sigma0 is None:
                return mlp(sizes, activation, rng, out_act)
            return noisy_mlp(sizes, activation, rng, noisy_sigma0, out_act)

        if not dueling:
            self.q_net = make([n_in, *hidden, n_actions * atoms])
            return
        trunk, stream = hidden[:-1], hidden[-1:]
        self.trunk = make([n_in, *trunk], activation)
        width = trunk[-1] if trunk else n_in
        self.v_net = make([width, *stream, atoms])
        self.a_net = make([width, *stream, n_actions * atoms])

    def nets(self) -> list[MLP]:
        """The MLPs after the encoder, in the order their noise is drawn."""
        return [self.q_net] if not self.dueling else [self.trunk, self.v_net, self.a_net]

    @property
    def noise_sizes(self) -> list[int]:
        return [net.noise_size if isinstance(net, NoisyMLP) else 0 for net in self.nets()]

    @property
    def noise_size(self) -> int:
        return sum(self.noise_sizes)

    def parameters(self) -> list[tf.Variable]:
        return [*self.encoder_parameters(), *(v for net in self.nets() for v in net.parameters())]

    def __call__(self, obs: tf.Tensor, noise: tf.Tensor | None = None) -> tf.Tensor:
        x = self.encode(obs)
        if noise is None and self.atoms == 1:  # DQN's network
            if not self.dueling:
                return self.q_net(x)
            h = self.trunk(x)
            adv = self.a_net(h)
            return self.v_net(h) + adv - tf.reduce_mean(adv, axis=-1, keepdims=True)
        draws = tf.split(noise, self.noise_sizes) if noise is not None else [None] * len(self.nets())

        def run(net: MLP, x: tf.Tensor, draw: tf.Tensor | None) -> tf.Tensor:
            return net(x, draw) if isinstance(net, NoisyMLP) else net(x)

        def per_atom(out: tf.Tensor) -> tf.Tensor:
            return tf.reshape(out, tf.concat([tf.shape(out)[:-1], [self.n_actions, self.atoms]], 0))

        if not self.dueling:
            out = run(self.q_net, x, draws[0])
            return out if self.atoms == 1 else per_atom(out)
        h = run(self.trunk, x, draws[0])
        v, adv = run(self.v_net, h, draws[1]), run(self.a_net, h, draws[2])
        if self.atoms == 1:
            return v + adv - tf.reduce_mean(adv, axis=-1, keepdims=True)
        adv = per_atom(adv)
        return v[..., None, :] + adv - tf.reduce_mean(adv, axis=-2, keepdims=True)


class RMSprop(tf.Module):
    """torch.optim.RMSprop with ``centered=True`` (the Nature DQN's and MinAtar's optimizer), written out:
    ``s <- alpha s + (1 - alpha) g^2``, ``m <- alpha m + (1 - alpha) g``,
    ``p <- p - lr g / (sqrt(s - m^2) + eps)``. Slots and lr are tf.Variables, as :class:`Adam`'s."""

    def __init__(self, params: Sequence[tf.Variable], lr: float, alpha: float, eps: float) -> None:
        super().__init__()
        self.params = list(params)
        self.alpha, self.eps = alpha, eps
        self.lr = tf.Variable(lr, trainable=False, dtype=tf.float32)
        self.square_avg = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]
        self.grad_avg = [tf.Variable(tf.zeros_like(p), trainable=False) for p in self.params]

    @property
    def slots(self) -> list[tf.Variable]:
        return [*self.square_avg, *self.grad_avg]

    def apply(self, grads: Sequence[tf.Tensor]) -> None:
        a = self.alpha
        for p, g, s, m in zip(self.params, grads, self.square_avg, self.grad_avg, strict=True):
            s.assign(a * s + (1 - a) * tf.square(g))
            m.assign(a * m + (1 - a) * g)
            p.assign_sub(self.lr * g / (tf.sqrt(s - tf.square(m)) + self.eps))


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
