"""MPI core: rank, size, reductions, broadcast and pooled statistics (Spinning Up's mpi_tools).

mpi4py is imported only when this process was started by an MPI launcher (mpiexec sets
OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK). Otherwise every function behaves as the single rank
of a world of size 1, so training in one plain process needs no MPI at all.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np

_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK")
_seconds = 0.0  # wall-clock time this process spent inside MPI collectives (see seconds())


@functools.cache
def _world() -> Any:
    """COMM_WORLD under an MPI launcher, else None."""
    if not any(v in os.environ for v in _LAUNCHER_VARS):
        return None
    from mpi4py import MPI

    return MPI.COMM_WORLD


def proc_id() -> int:
    """This process's rank (0 without MPI)."""
    world = _world()
    return 0 if world is None else world.Get_rank()


def num_procs() -> int:
    """Number of ranks (1 without MPI)."""
    world = _world()
    return 1 if world is None else world.Get_size()


def seconds() -> float:
    """Total wall-clock seconds this process has spent inside MPI collectives (allreduce, broadcast,
    barrier), waiting for slower ranks included; 0 without MPI. Differences give a phase's MPI time."""
    return _seconds


def _op(name: str) -> Any:
    from mpi4py import MPI

    return {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[name]


def allreduce_(buf: np.ndarray, op: str = "sum") -> np.ndarray:
    """Reduce a contiguous numpy array across ranks in place (op: sum, max or min); return it."""
    global _seconds
    world = _world()
    if world is not None and world.Get_size() > 1:
        from mpi4py import MPI

        start = time.perf_counter()
        world.Allreduce(MPI.IN_PLACE, buf, op=_op(op))
        _seconds += time.perf_counter() - start
    return buf


def broadcast_(buf: np.ndarray, root: int = 0) -> np.ndarray:
    """Overwrite ``buf`` on every rank with root's contents (in place); return it."""
    global _seconds
    world = _world()
    if world is not None and world.Get_size() > 1:
        start = time.perf_counter()
        world.Bcast(buf, root=root)
        _seconds += time.perf_counter() - start
    return buf


def allgather(x: np.ndarray) -> np.ndarray:
    """Every rank's ``x`` (same shape and dtype on all ranks) stacked in rank order: shape (procs, *x.shape)."""
    global _seconds
    x = np.asarray(x, order="C")  # (not ascontiguousarray: it makes a 0-d array 1-d)
    world = _world()
    if world is None or world.Get_size() == 1:
        return x[None]
    out = np.empty((world.Get_size(), *x.shape), dtype=x.dtype)
    start = time.perf_counter()
    world.Allgather(x, out)
    _seconds += time.perf_counter() - start
    return out


def allgather_objects(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (small picklable values: host names, settings) in rank order."""
    world = _world()
    return [obj] if world is None or world.Get_size() == 1 else world.allgather(obj)


def barrier() -> None:
    """Wait until every rank gets here."""
    global _seconds
    world = _world()
    if world is not None:
        start = time.perf_counter()
        world.Barrier()
        _seconds += time.perf_counter() - start


def _reduce(x: Any, op: str) -> Any:
    arr = np.array(x, dtype=np.float64)
    out = allreduce_(np.ascontiguousarray(arr.reshape(-1)), op).reshape(arr.shape)
    return out.item() if out.ndim == 0 else out


def mpi_sum(x: Any) -> Any:
    """Sum of a scalar or array over ranks (float64)."""
    return _reduce(x, "sum")


def mpi_avg(x: Any) -> Any:
    """Mean of a scalar or array over ranks (float64)."""
    return _reduce(x, "sum") / num_procs()


def mpi_max(x: Any) -> Any:
    """Element-wise maximum over ranks."""
    return _reduce(x, "max")


def mpi_min(x: Any) -> Any:
    """Element-wise minimum over ranks."""
    return _reduce(x, "min")


def statistics_scalar(x: Any, with_min_and_max: bool = False) -> tuple[float, ...]:
    """Mean and population std of all values on all ranks (Spinning Up's mpi_statistics_scalar).

    Ranks may hold different numbers of values, including none; with no value anywhere every
    statistic is NaN. With ``with_min_and_max`` also returns the global min and max.
    """
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    total, n = mpi_sum(np.array([x.sum(), x.size], dtype=np.float64))
    mean = total / n if n > 0 else float("nan")
    sq = mpi_sum(np.sum((x - mean) ** 2)) if n > 0 else float("nan")
    std = float(np.sqrt(sq / n)) if n > 0 else float("nan")
    if not with_min_and_max:
        return float(mean), std
    lo = mpi_min(x.min() if x.size else np.inf)
    hi = mpi_max(x.max() if x.size else -np.inf)
    if n == 0:
        lo = hi = float("nan")
    return float(mean), std, float(lo), float(hi)
