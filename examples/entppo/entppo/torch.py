"""EntPPO's torch learner: PPO's surrogate minus ``mean_ent_coef`` times the policy entropy averaged over
action dimensions (PPO's own ``ent_coef`` bonus takes the entropy of the whole action: their sum)."""

from __future__ import annotations

import torch
from torch.distributions import Distribution

from rlexp.algos.learner import Batch
from rlexp.algos.ppo.torch import PPOLearner


class EntPPOLearner(PPOLearner):
    """PPO-clip with an entropy bonus; everything else (KL early stop, value steps) is PPO's."""

    def surrogate(self, batch: Batch) -> tuple[Distribution, torch.Tensor, torch.Tensor, torch.Tensor]:
        pi, loss, ratio, kl = super().surrogate(batch)
        return pi, loss - self.algo.mean_ent_coef * pi.entropy().mean(), ratio, kl
