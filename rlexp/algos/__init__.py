"""The algorithm registry: which schema, loop and per-backend learner make up each algorithm.

Adding an algorithm = one YAML in conf/algo, one schema in rlexp/config.py, one learner per backend
and one entry here. Nothing in this module imports a deep-learning library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlexp.config import AlgoConfig, DDPGConfig, PPOConfig, SACConfig, TD3Config, TRPOConfig, VPGConfig

# A learner statistic logged each epoch: (key, with_min_and_max). False = the average only.
Stat = tuple[str, bool]

_ON_POLICY = (("LossPi", False), ("LossV", False), ("DeltaLossPi", False), ("DeltaLossV", False))


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm.

    :param name: the id used on the command line (``algo=NAME``).
    :param schema: its config dataclass.
    :param family: ``on_policy`` or ``off_policy``: which shared loop trains it.
    :param learners: backend name -> ``"module:Class"`` of the learner that holds the math.
    :param action_spaces: names of the gymnasium action spaces it supports.
    :param stats: the learner statistics logged after TotalEnvInteracts, in Spinning Up's order,
        as a function of the algorithm's config (some keys depend on options).
    """

    name: str
    schema: type[AlgoConfig]
    family: str
    learners: dict[str, str]
    action_spaces: tuple[str, ...]
    stats: Callable[[Any], tuple[Stat, ...]]

    def learner_class(self, backend: str) -> type:
        """Import and return the learner class for ``backend``."""
        module, cls = self.learners[backend].split(":")
        return getattr(importlib.import_module(module), cls)

    def env_action(self, act_space: Any) -> Callable[[Any], Any]:
        """Maps this algorithm's policy output to what ``env.step`` takes (on-policy: clip or int;
        off-policy: from [-1, 1] to the Box's bounds)."""
        from rlexp.envs import ActionAdapter, ActionScaler

        return ActionScaler(act_space).to_env if self.family == "off_policy" else ActionAdapter(act_space)

    def loop(self) -> Callable[..., Any]:
        """The ``train`` function of this algorithm's family loop."""
        return importlib.import_module(f"rlexp.algos.{self.family}").train


def _learners(name: str) -> dict[str, str]:
    cls = {"vpg": "VPG", "trpo": "TRPO", "ppo": "PPO", "ddpg": "DDPG", "td3": "TD3", "sac": "SAC"}[name]
    return {backend: f"rlexp.algos.{name}.{backend}:{cls}Learner" for backend in ("torch", "tf")}


def _sac_stats(cfg: SACConfig) -> tuple[Stat, ...]:
    base = (("Q1Vals", True), ("Q2Vals", True), ("LogPi", True), ("LossPi", False), ("LossQ", False))
    return (*base, ("Alpha", False), ("LossAlpha", False)) if cfg.autotune_alpha else base


ALGOS: dict[str, AlgoSpec] = {
    spec.name: spec
    for spec in (
        AlgoSpec(
            "vpg",
            VPGConfig,
            "on_policy",
            _learners("vpg"),
            ("Box", "Discrete"),
            lambda cfg: (*_ON_POLICY, ("Entropy", False), ("KL", False)),
        ),
        AlgoSpec(
            "trpo",
            TRPOConfig,
            "on_policy",
            _learners("trpo"),
            ("Box", "Discrete"),
            lambda cfg: (
                *_ON_POLICY,
                ("KL", False),
                *((("BacktrackIters", False),) if cfg.variant == "trpo" else ()),
            ),
        ),
        AlgoSpec(
            "ppo",
            PPOConfig,
            "on_policy",
            _learners("ppo"),
            ("Box", "Discrete"),
            lambda cfg: (
                *_ON_POLICY,
                ("Entropy", False),
                ("KL", False),
                ("ClipFrac", False),
                ("StopIter", False),
            ),
        ),
        AlgoSpec(
            "ddpg",
            DDPGConfig,
            "off_policy",
            _learners("ddpg"),
            ("Box",),
            lambda cfg: (("QVals", True), ("LossPi", False), ("LossQ", False)),
        ),
        AlgoSpec(
            "td3",
            TD3Config,
            "off_policy",
            _learners("td3"),
            ("Box",),
            lambda cfg: (("Q1Vals", True), ("Q2Vals", True), ("LossPi", False), ("LossQ", False)),
        ),
        AlgoSpec("sac", SACConfig, "off_policy", _learners("sac"), ("Box",), _sac_stats),
    )
}
