"""The algorithm registry: which schema, loop and per-backend learner make up each algorithm.

Adding an algorithm = one YAML in conf/algo, one schema in rlexp/config.py, one learner per backend
and one entry here. Nothing in this module imports a deep-learning library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlexp.config import AlgoConfig, PPOConfig

# Per-epoch keys that every on-policy learner's update() returns, in Spinning Up's log order.
_ON_POLICY_KEYS = ("LossPi", "LossV", "DeltaLossPi", "DeltaLossV", "Entropy", "KL")


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm.

    :param name: the id used on the command line (``algo=NAME``).
    :param schema: its config dataclass.
    :param family: ``on_policy`` or ``off_policy``: which shared loop trains it.
    :param learners: backend name -> ``"module:Class"`` of the learner that holds the math.
    :param action_spaces: names of the gymnasium action spaces it supports.
    :param update_keys: stats returned by ``learner.update`` and logged (average only) in this order.
    """

    name: str
    schema: type[AlgoConfig]
    family: str
    learners: dict[str, str]
    action_spaces: tuple[str, ...]
    update_keys: tuple[str, ...]

    def learner_class(self, backend: str) -> type:
        """Import and return the learner class for ``backend``."""
        module, cls = self.learners[backend].split(":")
        return getattr(importlib.import_module(module), cls)

    def loop(self) -> Callable[..., Any]:
        """The ``train`` function of this algorithm's family loop."""
        return importlib.import_module(f"rlexp.algos.{self.family}").train


ALGOS: dict[str, AlgoSpec] = {
    spec.name: spec
    for spec in (
        AlgoSpec(
            name="ppo",
            schema=PPOConfig,
            family="on_policy",
            learners={"torch": "rlexp.algos.ppo.torch:PPOLearner"},
            action_spaces=("Box", "Discrete"),
            update_keys=(*_ON_POLICY_KEYS, "ClipFrac", "StopIter"),
        ),
    )
}
