"""TD3 (Spinning Up's td3): DDPG with clipped double-Q, target policy smoothing and delayed policy updates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.ddpg import DDPGConfig
from rlexp.algos.learner import OffPolicyLearner
from rlexp.errors import check_at_least
from rlexp.schema import Stat


@dataclass
class TD3Config(DDPGConfig):
    """TD3; see ``conf/algo/td3.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "td3"

    target_noise: float = MISSING
    noise_clip: float = MISSING
    policy_delay: int = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check_at_least(self, target_noise=0, noise_clip=0, policy_delay=1)

    def stats(self) -> tuple[Stat, ...]:
        return (("Q1Vals", True), ("Q2Vals", True), ("LossPi", False), ("LossQ", False))

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """TD3Learner of rlexp/algos/td3/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.td3.tf import TD3Learner as TFTD3Learner

            return TFTD3Learner
        from rlexp.algos.td3.torch import TD3Learner

        return TD3Learner
