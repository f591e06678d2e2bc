"""SAC (Spinning Up's sac): a squashed Gaussian policy, twin Q-functions, a fixed entropy coefficient or
automatic entropy tuning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OffPolicyLearner
from rlexp.algos.off_policy import OffPolicyConfig
from rlexp.errors import check
from rlexp.schema import Stat


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC; see ``conf/algo/sac.yaml`` for the meaning of each key. ``lr`` is its one learning rate
    (policy, Q-functions, alpha)."""

    NAME: ClassVar[str] = "sac"
    TORCH_COMPILE: ClassVar[bool] = True

    alpha: float = MISSING
    autotune_alpha: bool = MISSING
    target_entropy: float | None = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.lr is not None, "algo.lr is required for sac (its one learning rate); give a value > 0")
        check(self.alpha >= 0, f"algo.alpha={self.alpha} is out of range; use >= 0")
        check(
            not self.autotune_alpha or self.alpha > 0,
            "algo.alpha must be > 0 with algo.autotune_alpha=true (it is the initial value)",
        )

    def stats(self) -> tuple[Stat, ...]:
        base: tuple[Stat, ...] = (
            ("Q1Vals", True),
            ("Q2Vals", True),
            ("LogPi", True),
            ("LossPi", False),
            ("LossQ", False),
        )
        return (*base, ("Alpha", False), ("LossAlpha", False)) if self.autotune_alpha else base

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """SACLearner of rlexp/algos/sac/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.sac.tf import SACLearner as TFSACLearner

            return TFSACLearner
        from rlexp.algos.sac.torch import SACLearner

        return SACLearner
