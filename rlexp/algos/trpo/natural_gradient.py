"""What TRPO's learners share on both backends: the conjugate gradient and the line search, on any
vector type (torch tensors, numpy arrays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rlexp.comm as comm

EPS = 1e-8  # keeps the conjugate gradient's and the step size's divisions finite


def conjugate_gradient(Ax: Callable[[Any], Any], b: Any, iters: int) -> Any:
    """Approximately solve ``A x = b`` for symmetric positive-definite A given as a product function.

    Works on any vector type with ``@``, ``*``, ``+`` and ``-`` (torch tensors, numpy arrays).
    """
    x = b * 0
    r, p = b + 0, b + 0
    r_dot = r @ r
    for _ in range(iters):
        z = Ax(p)
        alpha = r_dot / (p @ z + EPS)
        x = x + alpha * p
        r = r - alpha * z
        r_dot_new = r @ r
        p = r + (r_dot_new / r_dot) * p
        r_dot = r_dot_new
    return x


def line_search(
    set_and_eval: Callable[[float], tuple[float, float]],
    restore: Callable[[], None],
    loss_old: float,
    algo: Any,
) -> tuple[float, float, int]:
    """Choose the step along the natural gradient; return (KL, surrogate loss, BacktrackIters).

    ``set_and_eval(f)`` puts the policy at the fraction ``f`` of the full step and returns its
    rank-averaged (KL, loss). ``npg``: the full step. ``trpo``: the first of ``backtrack_coeff**j``,
    j < backtrack_iters, with KL <= delta and a loss no worse than ``loss_old``; when none passes,
    ``restore()`` puts back the old parameters, BacktrackIters is backtrack_iters, and rank 0 says so.
    """
    if algo.variant == "npg":
        kl, loss = set_and_eval(1.0)
        return kl, loss, 0
    for j in range(algo.backtrack_iters):
        kl, loss = set_and_eval(algo.backtrack_coeff**j)
        if kl <= algo.delta and loss <= loss_old:
            return kl, loss, j
    restore()
    if comm.proc_id() == 0:
        print("Line search failed! Keeping old params.", flush=True)
    return 0.0, loss_old, algo.backtrack_iters
