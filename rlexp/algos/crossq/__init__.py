"""CrossQ (Bhatt, Palenicek et al., ICLR 2024): SAC without target networks, with batch renormalisation
in the critics and the policy, as sample-efficient as high update-to-data methods at one gradient step
per env step.

What each key means is written beside it in ``conf/algo/crossq.yaml``; in words:

- **Batch renormalisation.** Every Linear of the critics and of the policy reads its input through a
  batch renormalisation layer (Ioffe 2017; :class:`rlexp.nn.Renorm`): while training, features are
  normalised by the minibatch's mean and std, corrected toward the running statistics by ``r`` and
  ``d`` once the layer's first ``renorm_warmup`` training steps are done; in evaluation (acting, test
  episodes, the targets' next actions, ``rlexp.load(...).policy()``) by the running statistics, frozen.
  The running statistics are part of every checkpoint.
- **No target networks.** The critics' step feeds (s, a) and (s', a' ~ pi(.|s')) through each critic
  as ONE batch of 2 x batch_size rows, so that both halves are normalised with the same statistics (the
  paper's point: separate passes see different distributions); the second half gives the target
  ``r + gamma (1 - d) (min_i Q_i(s', a') - alpha log pi(a'|s'))``, without gradient, the first the
  estimates that learn it. The policy takes its next action with frozen statistics.
- **Policy.** SAC's policy step and automatic entropy tuning, every ``policy_delay``-th gradient step;
  the policy's own batch renormalisation learns from that step's batch, the critics evaluate its
  actions with frozen statistics. Adam with ``adam_beta1`` 0.5 for the policy and the critics (alpha's
  Adam keeps 0.9).
- **Critic width.** ``critic_width`` units in every hidden layer of the critics (the paper: 2048;
  sb3-contrib and SBX: 1024), as many layers as ``network.hidden_sizes``, which the policy keeps.

With ``comm.procs = N`` each rank normalises with the statistics of its own ``batch_size / N`` rows
(data-parallel batch normalisation's default, as torch's DDP without SyncBatchNorm) and the gradients
are averaged as for every algorithm; after every gradient step the running statistics are averaged
over the ranks too (one more allreduce, of 2 x the features of every layer), so that they agree on all
ranks, as the parameters do. Every other key means what it means for SAC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from omegaconf import MISSING

from rlexp.algos.learner import OffPolicyLearner
from rlexp.algos.sac import SACConfig
from rlexp.errors import check, check_at_least
from rlexp.nn import Renorm


@dataclass
class CrossQConfig(SACConfig):
    """CrossQ; see ``conf/algo/crossq.yaml`` for the meaning of each key and the module docstring for
    the algorithm in words. ``lr`` is its one learning rate (policy, critics, alpha)."""

    NAME: ClassVar[str] = "crossq"

    # no target networks: ``algo.polyak`` has nothing to average (its preset leaves it out; null here)
    polyak: float | None = None  # type: ignore[assignment]
    policy_delay: int = MISSING
    adam_beta1: float = MISSING
    critic_width: int | None = MISSING
    renorm_momentum: float = MISSING
    renorm_eps: float = MISSING
    renorm_warmup: int = MISSING

    def validate(self, procs: int) -> None:
        check(
            self.polyak is None,
            f"algo.polyak={self.polyak} has no meaning for crossq: it has no target networks; leave it out",
        )
        super().validate(procs)
        check_at_least(self, policy_delay=1, renorm_warmup=0)
        check(
            0.0 <= self.adam_beta1 < 1.0,
            f"algo.adam_beta1={self.adam_beta1} is out of range; use 0 <= adam_beta1 < 1 (CrossQ: 0.5)",
        )
        check(
            self.critic_width is None or self.critic_width >= 1,
            f"algo.critic_width={self.critic_width} is out of range; use an integer >= 1 (units per hidden "
            "layer of the critics) or null (network.hidden_sizes)",
        )
        check(
            0.0 < self.renorm_momentum <= 1.0,
            f"algo.renorm_momentum={self.renorm_momentum} is out of range; use 0 < renorm_momentum <= 1",
        )
        check(
            math.isfinite(self.renorm_eps) and self.renorm_eps > 0,
            f"algo.renorm_eps={self.renorm_eps} is out of range; use a number > 0",
        )

    def renorm(self) -> Renorm:
        """The batch renormalisation settings of every layer."""
        return Renorm(momentum=self.renorm_momentum, eps=self.renorm_eps, warmup=self.renorm_warmup)

    def critic_hidden_sizes(self, hidden_sizes: list[int]) -> list[int]:
        """The critics' hidden layers: ``critic_width`` units in as many layers as ``hidden_sizes``."""
        return list(hidden_sizes) if self.critic_width is None else [self.critic_width] * len(hidden_sizes)

    @staticmethod
    def learner_class(backend: str) -> type[OffPolicyLearner]:
        """CrossQLearner of rlexp/algos/crossq/torch.py or tf.py (imported here, on demand)."""
        if backend == "tf":
            from rlexp.algos.crossq.tf import CrossQLearner as TFCrossQLearner

            return TFCrossQLearner
        from rlexp.algos.crossq.torch import CrossQLearner

        return CrossQLearner
