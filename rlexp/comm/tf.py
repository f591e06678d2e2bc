"""TensorFlow over MPI: identical variables on every rank, gradients averaged in ONE flat allreduce
(the role of Spinning Up's MpiAdamOptimizer and sync_all_params)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from rlexp.comm import allreduce_, broadcast_, num_procs


def sync_variables(variables: Sequence[tf.Variable]) -> None:
    """Copy rank 0's values of ``variables`` to every rank (one broadcast)."""
    if num_procs() == 1:
        return
    flat = broadcast_(np.concatenate([v.numpy().reshape(-1) for v in variables]).astype(np.float32))
    offset = 0
    for v in variables:
        n = int(np.prod(v.shape))
        v.assign(flat[offset : offset + n].reshape(v.shape))
        offset += n


def _allreduce_mean(flat: np.ndarray) -> np.ndarray:
    out = np.array(flat, dtype=np.float32)
    allreduce_(out)
    return out / np.float32(num_procs())


def avg_grads(grads: Sequence[tf.Tensor], extras: Sequence[tf.Tensor] = ()) -> list[tf.Tensor]:
    """The gradients averaged over ranks, all concatenated into one allreduce, followed by
    ``extras`` (float32 scalars, e.g. PPO's approximate KL) averaged in the same allreduce.

    Usable inside ``tf.function`` (through ``tf.numpy_function``; not inside XLA). With one rank it
    returns its inputs untouched and adds nothing to the graph.
    """
    tensors = [*grads, *extras]
    if num_procs() == 1:
        return tensors
    flat = tf.concat([tf.reshape(t, [-1]) for t in tensors], axis=0)
    flat = tf.numpy_function(_allreduce_mean, [flat], tf.float32, stateful=True)
    out, offset = [], 0
    for t in tensors:
        n = int(np.prod(t.shape))
        out.append(tf.reshape(flat[offset : offset + n], t.shape))
        offset += n
    return out


def average_variables(variables: Sequence[tf.Variable]) -> None:
    """Set each variable to its mean over ranks (outside compiled code): one allreduce of all of them
    concatenated (CrossQ's running statistics after each update). Nothing with one rank."""
    if num_procs() == 1 or not variables:
        return
    flat = _allreduce_mean(np.concatenate([v.numpy().reshape(-1) for v in variables]))
    offset = 0
    for v in variables:
        n = int(np.prod(v.shape))
        v.assign(flat[offset : offset + n].reshape(v.shape))
        offset += n
