"""EntPPO's torch learner: PPO's surrogate minus ``ent_coef`` times the mean policy entropy."""

from __future__ import annotations

import torch
from torch.distributions import Distribution

from rlexp.algos.learner import Batch
from rlexp.algos.ppo.torch import PPOLearner


class EntPPOLearner(PPOLearner):
    """PPO-clip with an entropy bonus; everything else (KL early stop, value steps) is PPO's."""

    def surrogate(self, batch: Batch) -> tuple[Distribution, torch.Tensor, torch.Tensor, torch.Tensor]:
        pi, loss, ratio, kl = super().surrogate(batch)
        return pi, loss - self.algo.ent_coef * pi.entropy().mean(), ratio, kl
