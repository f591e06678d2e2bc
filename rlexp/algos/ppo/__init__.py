"""PPO-clip (Spinning Up's ppo): up to ``train_pi_iters`` full-batch Adam steps per epoch on the clipped
surrogate, stopping early on the rank-averaged KL, then ``train_v_iters`` value steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OnPolicyLearner
from rlexp.algos.on_policy import ON_POLICY_STATS, OnPolicyConfig
from rlexp.errors import check, check_at_least
from rlexp.schema import Stat


@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO-clip; see ``conf/algo/ppo.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "ppo"
    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "vf_lr")

    clip_ratio: float = MISSING
    pi_lr: float = MISSING
    train_pi_iters: int = MISSING
    target_kl: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(
            0.0 < self.clip_ratio < 1.0,
            f"algo.clip_ratio={self.clip_ratio} is out of range; use 0 < clip_ratio < 1",
        )
        check_at_least(self, train_pi_iters=1)
        check(self.target_kl > 0, f"algo.target_kl={self.target_kl} is out of range; use > 0")

    def stats(self) -> tuple[Stat, ...]:
        return (*ON_POLICY_STATS, ("Entropy", False), ("KL", False), ("ClipFrac", False), ("StopIter", False))

    @staticmethod
    def learner_class(backend: str) -> type[OnPolicyLearner]:
        """PPOLearner of rlexp/algos/ppo/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.ppo.tf import PPOLearner as TFPPOLearner

            return TFPPOLearner
        from rlexp.algos.ppo.torch import PPOLearner

        return PPOLearner
