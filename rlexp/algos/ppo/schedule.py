"""PPO's schedule, the same on both backends: learning-rate annealing and the minibatch order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


def annealed(lr: float, epoch: int, epochs: int) -> float:
    """The learning rate of epoch ``epoch`` (0-based) of ``epochs`` when annealing linearly to 0:
    ``lr * (1 - epoch / epochs)`` (CleanRL's schedule; the first update uses ``lr``)."""
    return lr * (1.0 - epoch / epochs)


def minibatch_indices(n: int, algo: Any, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """The rows of each minibatch step: ``algo.update_epochs`` passes over ``n`` rows, each a fresh
    permutation drawn from ``rng`` split into ``algo.num_minibatches`` parts of equal size (the first
    ``n % num_minibatches`` one row larger). Every rank takes the same number of steps."""
    for _ in range(algo.update_epochs):
        yield from np.array_split(rng.permutation(n), algo.num_minibatches)
