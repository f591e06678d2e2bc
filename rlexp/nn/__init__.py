"""Networks: one module per backend (torch.py, tf.py) naming the same things the same way, and
acting in numpy on a copy of their weights (acting.py). This module holds what every backend shares:
the lists of activations and encoders, and the geometry of image observations and of the Nature CNN."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces

# The hidden-layer activations every backend implements (config check: network.activation). Each of
# nn/torch.py, nn/tf.py and nn/acting.py maps these names to its own functions; a test checks that
# all three implement exactly these and compute the same values.
ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "sigmoid", "identity")

# SAC's clamp of the policy's log sigma (Spinning Up's bounds), on every backend.
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0

# gSDE (the on-policy algorithms' ``algo.use_sde``): added to each action dimension's variance
# latent^2 @ exp(log_std)^2, on every backend (SB3's StateDependentNoiseDistribution epsilon).
SDE_EPS = 1e-6


# CrossQ's batch renormalisation (Ioffe 2017), on every backend (nn/torch.py, nn/tf.py: ``BatchRenorm``).
@dataclass(frozen=True)
class Renorm:
    """The settings of a batch renormalisation layer: while training, a layer normalises each feature by
    its minibatch mean and std and corrects them toward its running statistics by ``r`` and ``d``
    (``y = (x - mean_B) / std_B * r + d``, then ``scale * y + bias``); in evaluation it normalises by the
    running statistics alone, frozen.

    :ivar momentum: the weight of each training batch in the running statistics
        (``running <- running + momentum * (batch - running)``; flax's and SBX's ``1 - momentum``).
    :ivar eps: added to every variance before its square root.
    :ivar warmup: the layer's training steps during which r = 1 and d = 0 (plain batch normalisation,
        while the running statistics settle); from then on r and d correct the batch statistics.
    :ivar rmax: r is clipped to [1 / rmax, rmax] ...
    :ivar dmax: ... and d to [-dmax, dmax] (the paper's final bounds, as SBX and sb3-contrib use them).
    """

    momentum: float = 0.01
    eps: float = 0.001
    warmup: int = 100_000
    rmax: float = 3.0
    dmax: float = 5.0


# How observations reach the MLP heads (config check: network.encoder): ``mlp`` feeds the flat
# observation vector as it is; ``nature_cnn`` encodes image observations with the CNN of Mnih et al.
# (2015) into NATURE_CNN_FEATURES features; ``minatar_cnn`` encodes MinAtar's small 0/1 images with the
# network of Young & Tian (2019): one convolution of MINATAR_CNN_CHANNELS 3x3 filters, stride 1, ReLU,
# flattened (no scaling: the values are already 0 or 1). Each backend builds them as ``NatureCNN`` and
# ``MinAtarCNN``.
ENCODERS = ("mlp", "nature_cnn", "minatar_cnn")
# Memory (config check: network.recurrent): a recurrent layer between the encoder and the MLP of each
# on-policy network, PyTorch's LSTM or GRU equations on every backend (nn/torch.py, nn/tf.py, nn/acting.py).
RECURRENT = ("lstm", "gru")
# network.recurrent_critic: V's own recurrent layer, or the policy's output read without its gradient
RECURRENT_CRITIC = ("separate", "shared")
MINATAR_CNN_CHANNELS, MINATAR_CNN_KERNEL = 16, 3

# The Nature CNN's convolutions as (out_channels, kernel, stride), each followed by a ReLU, then a
# dense layer of NATURE_CNN_FEATURES units with a ReLU. No padding (torch's and TF's "VALID").
NATURE_CNN_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
NATURE_CNN_FEATURES = 512
NATURE_CNN_MIN_SIZE = 36  # the smallest height and width the convolutions reach (a 1x1 last feature map)


def nature_cnn_output(height: int, width: int) -> tuple[int, int]:
    """Height and width of the Nature CNN's last feature map for an image of ``height`` x ``width``
    pixels (0 or less: the image is too small for its kernels; the smallest that fits is 36x36)."""
    for _, kernel, stride in NATURE_CNN_CONVS:
        height, width = (height - kernel) // stride + 1, (width - kernel) // stride + 1
    return height, width


@dataclass(frozen=True)
class Image:
    """The layout of image observations: a uint8 Box of rank 2 or 3, as the env gives it.

    :ivar shape: one observation's shape: (height, width, channels), (channels, height, width) or
        (height, width) (one channel).
    :ivar channels_first: whether the channels come first (the smaller of the first and the last
        dimension is the channels' one; on a tie, the last, gymnasium's and TF's convention).
    :ivar encoder: the CNN that reads them (``network.encoder``: nature_cnn or minatar_cnn).
    """

    shape: tuple[int, ...]
    channels_first: bool
    encoder: str = "nature_cnn"

    @property
    def chw(self) -> tuple[int, int, int]:
        """(channels, height, width)."""
        if len(self.shape) == 2:
            return 1, self.shape[0], self.shape[1]
        if self.channels_first:
            return self.shape[0], self.shape[1], self.shape[2]
        return self.shape[2], self.shape[0], self.shape[1]


def is_image_space(space: spaces.Space) -> bool:
    """Whether ``space`` (a gymnasium space) holds images or a stack of them: a uint8 Box of rank >= 2.

    Such observations are kept in their shape (never flattened) and stored as uint8.
    """
    return isinstance(space, spaces.Box) and len(space.shape) >= 2 and space.dtype == np.uint8


def looks_like_image(space: spaces.Space) -> bool:
    """Whether ``space`` is shaped like one image but is not read as one (:func:`is_image_space`): a Box
    of another dtype than uint8 (float pixels, say) of rank 3, with 1, 3 or 4 channels first or last
    and sides of at least 8."""
    if not isinstance(space, spaces.Box) or space.dtype == np.uint8 or len(space.shape) != 3:
        return False
    first, *_, last = space.shape
    return (last in (1, 3, 4) and min(space.shape[:2]) >= 8) or (
        first in (1, 3, 4) and min(space.shape[1:]) >= 8
    )


def image_layout(space: spaces.Space) -> Image | None:
    """The :class:`Image` layout of ``space`` when it is a uint8 Box of rank 2 or 3, else None."""
    if not is_image_space(space) or len(space.shape) > 3:
        return None
    shape = tuple(int(n) for n in space.shape)
    return Image(shape, len(shape) == 3 and shape[0] < shape[2])


def minatar_cnn_features(image: Image) -> int:
    """The width of the MinAtar CNN's flattened output for ``image`` (0 or less: too small for its kernel)."""
    _, height, width = image.chw
    side = MINATAR_CNN_KERNEL - 1
    return MINATAR_CNN_CHANNELS * max(0, height - side) * max(0, width - side)


class Sequences(NamedTuple):
    """A batch of training sequences for recurrent networks (numpy arrays, or a backend's tensors): each
    env's epoch segment cut at episode starts and every ``network.seq_len`` steps, padded to one length.

    :ivar obs: (S, L, *observation) observations, padded with zeros after each sequence's end.
    :ivar valid: (S, L) bool: which steps are real (a prefix of each row).
    :ivar states: the recurrent state before each sequence's first step, per network: ``"pi"`` and
        ``"v"`` (when V has its own layer), each a tuple of (S, size) arrays, (h,) for a GRU, (h, c)
        for an LSTM; zeros where the sequence starts an episode.

    A network returns its outputs at the valid steps only, in row-major order: each sequence's steps in
    time order, sequence after sequence. That is the order of the epoch's other arrays (actions,
    advantages, ...), which are not padded. A NamedTuple, so that TensorFlow's compiled functions take it
    as a nested structure of tensors.
    """

    obs: Any
    valid: Any
    states: dict[str, tuple[Any, ...]]

    def num_sequences(self) -> int:
        return int(self.valid.shape[0])

    def select(self, idx: np.ndarray, take: Any) -> tuple[Sequences, np.ndarray]:
        """The sequences ``idx`` and the rows of the epoch's other arrays that they hold; ``take(x, idx)``
        indexes an array along its first axis (``x[idx]``, or ``tf.gather``)."""
        valid = self.valid.cpu() if hasattr(self.valid, "cpu") else self.valid  # a torch tensor on a GPU
        lengths = np.asarray(valid).sum(axis=1)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        rows = [np.arange(starts[i], starts[i] + lengths[i]) for i in idx]
        states = {k: tuple(take(x, idx) for x in v) for k, v in self.states.items()}
        picked = Sequences(take(self.obs, idx), take(self.valid, idx), states)
        return picked, np.concatenate(rows) if rows else np.zeros(0, np.int64)
