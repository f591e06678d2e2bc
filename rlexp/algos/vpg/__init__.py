"""Vanilla policy gradient (Spinning Up's vpg): one full-batch policy-gradient step per epoch on
``-mean(log pi(a|s) * A)`` with GAE-lambda advantages, then ``train_v_iters`` value steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OnPolicyLearner
from rlexp.algos.on_policy import ON_POLICY_STATS, OnPolicyConfig
from rlexp.schema import Stat


@dataclass
class VPGConfig(OnPolicyConfig):
    """Vanilla policy gradient; see ``conf/algo/vpg.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "vpg"
    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "vf_lr")

    pi_lr: float = MISSING

    def stats(self) -> tuple[Stat, ...]:
        return (*ON_POLICY_STATS, ("Entropy", False), ("KL", False))

    @staticmethod
    def learner_class(backend: str) -> type[OnPolicyLearner]:
        """VPGLearner of rlexp/algos/vpg/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.vpg.tf import VPGLearner as TFVPGLearner

            return TFVPGLearner
        from rlexp.algos.vpg.torch import VPGLearner

        return VPGLearner
