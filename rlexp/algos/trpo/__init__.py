"""TRPO: one learner per backend, and the conjugate gradient both use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

EPS = 1e-8


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
