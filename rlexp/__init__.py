"""rlexp: Spinning Up's deep-RL algorithms as a config-driven experiment platform.

The command line is ``python -m rlexp``; from Python (a script, a notebook)::

    import rlexp
    run = rlexp.train(["algo=sac", "env=Pendulum-v1", "algo.epochs=10"])
    run.progress, run.score, run.policy()(obs)
    rlexp.load("outputs/...")

See :mod:`rlexp.api`. Importing ``rlexp`` imports nothing heavy: the API and ``rlexp.__version__``
load on first use (every MPI rank imports this package and must start fast).
"""

import typing as _typing

from rlexp.errors import ConfigError, RLExpError

if _typing.TYPE_CHECKING:
    from rlexp.api import Policy, Run, compose, load, train

__all__ = ["ConfigError", "Policy", "RLExpError", "Run", "__version__", "compose", "load", "train"]
_API = ("Policy", "Run", "compose", "load", "train")  # rlexp.api's, imported on first use


def _version() -> str:
    """rlexp's version: that of the installed distribution (its one home is pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("rlexp")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"


def __getattr__(name: str) -> object:
    if name in _API:
        import rlexp.api as api

        return getattr(api, name)
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'rlexp' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public names (the API's too, before it is imported) and the module's dunders."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__") and n.endswith("__"))})
