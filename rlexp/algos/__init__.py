"""The algorithm registry: ``ALGOS`` maps each ``algo=NAME`` to its config class.

Every package below this one is an algorithm: its ``__init__.py`` defines the algorithm's config
class (a subclass of :class:`rlexp.schema.AlgoConfig` with a ``NAME``), which is both the schema of
``conf/algo/<name>.yaml`` and the algorithm's description: its family (through its base class), the
action spaces it supports, the statistics it logs and its learner per backend, all as real
references. Adding an algorithm touches its YAML preset and its package, nothing else. Nothing here
imports a deep-learning library: each learner module is imported only when its class is asked for.
"""

from __future__ import annotations

import importlib
import pkgutil

from rlexp.schema import AlgoConfig


def _discover() -> dict[str, type[AlgoConfig]]:
    """NAME -> config class of every algorithm package below rlexp.algos."""
    found: dict[str, type[AlgoConfig]] = {}
    for info in pkgutil.iter_modules(__path__, f"{__name__}."):
        if not info.ispkg:
            continue  # the family loops and learner bases
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, AlgoConfig) and obj.__module__ == info.name:
                found[obj.NAME] = obj
    return dict(sorted(found.items()))


ALGOS: dict[str, type[AlgoConfig]] = _discover()
