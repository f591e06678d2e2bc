"""TQC, Truncated Quantile Critics (Kuznetsov et al. 2020): SAC with distributional critics whose most
optimistic atoms are dropped from the target, which controls the overestimation of Q-learning more
finely than the minimum of two critics.

What each key means is written beside it in ``conf/algo/tqc.yaml``; in words:

- **Critics.** ``n_critics`` networks, each mapping (s, a) to ``n_quantiles`` atoms: its estimate of
  the return's quantiles at the levels (2i + 1) / (2 n_quantiles). Each has a polyak-averaged target
  copy, as SAC's critics.
- **Target.** With ``a' ~ pi(.|s')``, the target critics' atoms at (s', a') are pooled (n_critics x
  n_quantiles of them), sorted, and the ``drop_per_critic x n_critics`` largest are dropped; each kept
  atom z gives a target sample ``r + gamma (1 - d) (z - alpha log pi(a'|s'))``. Every critic learns all
  target samples with the quantile Huber loss (kappa 1), the mean over critics, atoms and samples.
- **Policy and alpha.** SAC's: the policy maximises the mean of all atoms at (s, a~) minus ``alpha log
  pi(a~|s)``; alpha is learned toward ``target_entropy`` (``autotune_alpha``, on by default, starting
  at ``alpha``), or fixed.

Defaults are sb3-contrib's TQC (2 critics, 25 quantiles, 2 dropped per critic, 256x256, Adam at 3e-4,
batch 256, tau 0.005, learning after 100 steps); ``tuned=tqc`` holds RL Baselines3 Zoo's MuJoCo entries.
Every other key means what it means for SAC (rlexp/algos/off_policy.py: replay, bursts, ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OffPolicyLearner
from rlexp.algos.sac import SACConfig
from rlexp.errors import check, check_at_least
from rlexp.schema import Stat


@dataclass
class TQCConfig(SACConfig):
    """TQC; see ``conf/algo/tqc.yaml`` for the meaning of each key and the module docstring for the
    algorithm in words. ``lr`` is its one learning rate (policy, critics, alpha)."""

    NAME: ClassVar[str] = "tqc"

    n_critics: int = MISSING
    n_quantiles: int = MISSING
    drop_per_critic: int = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check_at_least(self, n_critics=1, n_quantiles=1, drop_per_critic=0)
        check(
            self.drop_per_critic < self.n_quantiles,
            f"algo.drop_per_critic={self.drop_per_critic} drops every atom of the target (each critic has "
            f"algo.n_quantiles={self.n_quantiles}); use 0 <= drop_per_critic < n_quantiles",
        )

    def kept_atoms(self) -> int:
        """How many of the target critics' pooled atoms each target keeps."""
        return self.n_critics * (self.n_quantiles - self.drop_per_critic)

    def stats(self) -> tuple[Stat, ...]:
        base: tuple[Stat, ...] = (("QVals", True), ("LogPi", True), ("LossPi", False), ("LossQ", False))
        return (*base, ("Alpha", False), ("LossAlpha", False)) if self.autotune_alpha else base

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """TQCLearner of rlexp/algos/tqc/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.tqc.tf import TQCLearner as TFTQCLearner

            return TFTQCLearner
        from rlexp.algos.tqc.torch import TQCLearner

        return TQCLearner
