"""TRPO and the natural policy gradient (Spinning Up's trpo): a conjugate-gradient step on the Fisher
information of the policy's KL, scaled to the trust region ``delta``, with a backtracking line search
(``natural_gradient.py``, shared by both backends), then ``train_v_iters`` value steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OnPolicyLearner
from rlexp.algos.on_policy import ON_POLICY_STATS, OnPolicyConfig
from rlexp.errors import check, check_at_least
from rlexp.schema import Stat


@dataclass
class TRPOConfig(OnPolicyConfig):
    """TRPO / natural policy gradient; see ``conf/algo/trpo.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "trpo"
    LR_KEYS: ClassVar[tuple[str, ...]] = ("vf_lr",)

    variant: str = MISSING
    delta: float = MISSING
    damping_coeff: float = MISSING
    cg_iters: int = MISSING
    backtrack_iters: int = MISSING
    backtrack_coeff: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(
            self.variant in ("trpo", "npg"), f"algo.variant={self.variant!r} is unknown; choose trpo or npg"
        )
        check(self.delta > 0, f"algo.delta={self.delta} is out of range; use > 0")
        check_at_least(self, damping_coeff=0, cg_iters=1, backtrack_iters=1)
        check(
            0 < self.backtrack_coeff < 1,
            f"algo.backtrack_coeff={self.backtrack_coeff} is out of range; use 0 < backtrack_coeff < 1",
        )

    def stats(self) -> tuple[Stat, ...]:
        backtrack = (("BacktrackIters", False),) if self.variant == "trpo" else ()
        return (*ON_POLICY_STATS, ("KL", False), *backtrack)

    @staticmethod
    def learner_class(backend: str) -> type[OnPolicyLearner]:
        """TRPOLearner of rlexp/algos/trpo/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.trpo.tf import TRPOLearner as TFTRPOLearner

            return TFTRPOLearner
        from rlexp.algos.trpo.torch import TRPOLearner

        return TRPOLearner
