"""DDPG (Spinning Up's ddpg): a deterministic policy and one Q-function, Gaussian exploration noise,
polyak-averaged targets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OffPolicyLearner
from rlexp.algos.off_policy import OffPolicyConfig
from rlexp.errors import check
from rlexp.schema import Stat


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG; see ``conf/algo/ddpg.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "ddpg"
    TORCH_COMPILE: ClassVar[bool] = True
    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "q_lr")
    SAMPLED_ACTIONS: ClassVar[str | None] = None  # mu(obs): acting adds no noise outside training

    pi_lr: float = MISSING
    q_lr: float = MISSING
    act_noise: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.act_noise >= 0, f"algo.act_noise={self.act_noise} is out of range; use >= 0")

    def stats(self) -> tuple[Stat, ...]:
        return (("QVals", True), ("LossPi", False), ("LossQ", False))

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """DDPGLearner of rlexp/algos/ddpg/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.ddpg.tf import DDPGLearner as TFDDPGLearner

            return TFDDPGLearner
        from rlexp.algos.ddpg.torch import DDPGLearner

        return DDPGLearner
