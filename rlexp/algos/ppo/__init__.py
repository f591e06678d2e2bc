"""PPO-clip (Spinning Up's ppo): up to ``train_pi_iters`` full-batch Adam steps per epoch on the clipped
surrogate, stopping early on the rank-averaged KL, then ``train_v_iters`` value steps."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OnPolicyLearner
from rlexp.algos.on_policy import ON_POLICY_STATS, OnPolicyConfig
from rlexp.errors import check, check_at_least
from rlexp.schema import Stat

# algo.adv_norm: where advantages are normalised to mean 0, std 1
ADV_NORMS = ("epoch", "minibatch", "none")


@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO-clip; see ``conf/algo/ppo.yaml`` for the meaning of each key."""

    NAME: ClassVar[str] = "ppo"
    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "vf_lr")
    # the learning rates and the clip range fall linearly to 0 over the run's epochs
    RUN_SCHEDULES: ClassVar[tuple[tuple[str, Callable[[Any], bool]], ...]] = (
        ("anneal_lr", lambda algo: algo.anneal_lr),
        ("anneal_clip", lambda algo: algo.anneal_clip),
    )

    clip_ratio: float = MISSING
    pi_lr: float = MISSING
    train_pi_iters: int = MISSING
    target_kl: float | None = MISSING
    num_minibatches: int = MISSING
    update_epochs: int = MISSING
    ent_coef: float = MISSING
    vf_coef: float = MISSING
    vf_clip: float | None = MISSING
    max_grad_norm: float | None = MISSING
    anneal_lr: bool = MISSING
    anneal_clip: bool = MISSING
    adv_norm: str = MISSING

    @property
    def minibatched(self) -> bool:  # type: ignore[override]
        """Whether updates run in shuffled minibatches (SB3/CleanRL) instead of Spinning Up's full batches."""
        return self.num_minibatches > 0

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(
            0.0 < self.clip_ratio < 1.0,
            f"algo.clip_ratio={self.clip_ratio} is out of range; use 0 < clip_ratio < 1",
        )
        check_at_least(self, train_pi_iters=1, num_minibatches=0, update_epochs=1)
        check(
            self.target_kl is None or self.target_kl > 0,
            f"algo.target_kl={self.target_kl} is out of range; use > 0 or null (no early stop)",
        )
        for key in ("ent_coef", "vf_coef"):
            value = getattr(self, key)
            check(
                math.isfinite(value) and value >= 0, f"algo.{key}={value} is out of range; use a number >= 0"
            )
        for key in ("vf_clip", "max_grad_norm"):
            value = getattr(self, key)
            check(
                value is None or (math.isfinite(value) and value > 0),
                f"algo.{key}={value} is out of range; use a number > 0 or null (off)",
            )
        check(
            self.adv_norm in ADV_NORMS,
            f"algo.adv_norm={self.adv_norm!r} is unknown; choose one of: {', '.join(ADV_NORMS)}",
        )
        check(
            self.adv_norm != "minibatch" or self.minibatched,
            "algo.adv_norm=minibatch needs algo.num_minibatches > 0 (full-batch updates normalise per epoch)",
        )

    def validate_epoch(self, procs: int, num_envs: int) -> None:
        """Every minibatch needs a row: ``num_minibatches`` at most the rows a rank collects per epoch."""
        steps = self.steps_per_epoch // (procs * num_envs)
        rows = steps * num_envs
        check(
            self.num_minibatches <= rows,
            f"algo.num_minibatches={self.num_minibatches} is more than the {rows} rows each rank collects per "
            f"epoch ({steps} steps of each of its env.num_envs={num_envs} envs: algo.steps_per_epoch="
            f"{self.steps_per_epoch} over comm.procs={procs} x {num_envs} envs); every minibatch needs a row",
        )

    @property
    def epoch_adv_norm(self) -> bool:
        return self.adv_norm == "epoch"

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
