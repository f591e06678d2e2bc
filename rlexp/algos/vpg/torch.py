"""Vanilla policy gradient in PyTorch (Spinning Up's vpg_pytorch update).

Per epoch: one full-batch Adam step on ``-mean(log pi(a|s) * A)``, then ``train_v_iters`` value
steps. KL and DeltaLossPi are evaluated after the step (Spinning Up's PyTorch VPG computed them
from the loss before the step, so it always logged 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.torch_common import OnPolicyTorchLearner, adam
from rlexp.comm.torch import avg_grads
from rlexp.config import RLExpConfig


class VPGLearner(OnPolicyTorchLearner):
    """VPG update; see ``conf/algo/vpg.yaml`` for the hyperparameters."""

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.pi_optimizer = adam(self.ac.pi.parameters(), self.algo.pi_lr)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {**super().optimizers(), "pi": self.pi_optimizer}

    def loss_pi(self, data: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Policy-gradient loss and its diagnostics: approx KL to the data's policy, entropy."""
        pi, logp = self.ac.pi(data["obs"], data["act"])
        loss = -(logp * data["adv"]).mean()
        with torch.no_grad():
            info = {"kl": (data["logp"] - logp).mean().item(), "ent": pi.entropy().mean().item()}
        return loss, info

    def update_networks(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        data = self.tensors(batch)
        self.pi_optimizer.zero_grad()
        loss_old, info_old = self.loss_pi(data)
        loss_old.backward()
        avg_grads(self.ac.pi.parameters())
        self.pi_optimizer.step()
        with torch.no_grad():
            loss_new, info_new = self.loss_pi(data)
        v_old, v_new = self.update_v(data)
        return {
            "LossPi": loss_old.item(),
            "LossV": v_old,
            "DeltaLossPi": loss_new.item() - loss_old.item(),
            "DeltaLossV": v_new - v_old,
            "Entropy": info_old["ent"],
            "KL": info_new["kl"],
        }
