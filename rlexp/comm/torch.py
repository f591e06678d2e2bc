"""PyTorch over MPI: identical parameters on every rank, gradients averaged in ONE flat allreduce."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch

from rlexp.comm import allreduce_, broadcast_, num_procs


def _flat(tensors: list[torch.Tensor]) -> np.ndarray:
    return torch.cat([t.detach().reshape(-1).cpu() for t in tensors]).numpy()


def _unflat(flat: np.ndarray, tensors: list[torch.Tensor]) -> None:
    src = torch.from_numpy(flat)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(src[offset : offset + n].view_as(t))
            offset += n


def sync_params(params: Iterable[torch.Tensor]) -> None:
    """Copy rank 0's parameter values to every rank (one broadcast of the flattened values)."""
    if num_procs() == 1:
        return
    params = list(params)
    flat = np.ascontiguousarray(_flat(params))
    _unflat(broadcast_(flat), params)


def avg_grads(params: Iterable[torch.Tensor], extras: Sequence[float] = ()) -> list[float]:
    """Replace each ``p.grad`` by its mean over ranks: one allreduce of all gradients concatenated.

    Parameters without a gradient (``grad is None``) take part with zeros and get none back, so all
    ranks exchange buffers of the same size. One contiguous CPU gradient (a flat parameter, see
    :func:`rlexp.algos.torch_common.flatten_`) is reduced in place, without packing.

    ``extras`` are scalars averaged in the same allreduce and returned (as float32 values when there
    is more than one rank): PPO's approximate KL rides with its gradients, so a policy step costs one
    collective instead of two.
    """
    if num_procs() == 1:
        return [float(x) for x in extras]
    params = list(params)
    if not extras and len(params) == 1 and params[0].grad is not None:
        grad = params[0].grad
        if grad.is_contiguous() and grad.device.type == "cpu":
            buf = grad.view(-1).numpy()  # shares grad's memory
            allreduce_(buf)
            buf /= num_procs()
            return []
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = np.concatenate([_flat(grads), np.asarray(extras, dtype=np.float32)])
    allreduce_(flat)
    flat /= num_procs()
    n = len(flat) - len(extras)
    _unflat(flat[:n], grads)  # the existing grads are written in place; the stand-in zeros are dropped
    return [float(x) for x in flat[n:]]


def average_(tensors: Sequence[torch.Tensor]) -> None:
    """Replace each tensor's values by their mean over ranks, in place: one allreduce of all of them
    concatenated (CrossQ's running statistics after each update). Nothing with one rank."""
    if num_procs() == 1 or not tensors:
        return
    flat = np.ascontiguousarray(_flat(list(tensors)))
    allreduce_(flat)
    flat /= num_procs()
    _unflat(flat, list(tensors))
