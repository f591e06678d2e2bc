"""EntPPO: rlexp's PPO with an entropy bonus in the policy loss (torch backend), as a plugin.

The config class is the schema of ``conf/algo/entppo.yaml`` and the algorithm's entry in rlexp's
registry (entry point ``rlexp.algos: entppo = "entppo:EntPPOConfig"``); it inherits PPO's keys, loop,
statistics and checks and adds ``mean_ent_coef``, an entropy bonus on the entropy averaged over action
dimensions (PPO's ``ent_coef`` sums them, as SB3 and CleanRL do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from rlexp.algos.ppo import PPOConfig
from rlexp.errors import check


@dataclass
class EntPPOConfig(PPOConfig):
    """PPO-clip whose policy loss subtracts ``mean_ent_coef`` times the policy's mean entropy per dimension."""

    NAME: ClassVar[str] = "entppo"
    BACKENDS: ClassVar[tuple[str, ...]] = ("torch",)

    mean_ent_coef: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.mean_ent_coef >= 0, f"algo.mean_ent_coef={self.mean_ent_coef} is out of range; use >= 0")

    @staticmethod
    def learner_class(backend: str) -> type[Any]:
        from entppo.torch import EntPPOLearner

        return EntPPOLearner
