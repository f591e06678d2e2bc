"""rlexp: Spinning Up's deep-RL algorithms as a config-driven experiment platform.

The command line is ``python -m rlexp``; from Python (a script, a notebook)::

    import rlexp
    run = rlexp.train(["algo=sac", "env=Pendulum-v1", "algo.epochs=10"])
    run.progress, run.score, run.policy()(obs)
    rlexp.load("outputs/...")

See :mod:`rlexp.api`. Importing ``rlexp`` imports nothing heavy: the API loads on first use (every MPI
rank imports this package and must start fast).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlexp.errors import ConfigError, RLExpError

if TYPE_CHECKING:
    from rlexp.api import Policy, Run, compose, load, train

__all__ = ["ConfigError", "Policy", "RLExpError", "Run", "compose", "load", "train"]


def __getattr__(name: str) -> Any:
    if name in ("Policy", "Run", "compose", "load", "train"):
        import rlexp.api as api

        return getattr(api, name)
    raise AttributeError(f"module 'rlexp' has no attribute {name!r}")
