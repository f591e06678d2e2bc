"""Vanilla policy gradient in PyTorch (Spinning Up's vpg_pytorch update).

Per epoch: one full-batch Adam step on ``-mean(log pi(a|s) * A)``, then ``train_v_iters`` value
steps. KL and DeltaLossPi are evaluated after the step (Spinning Up's PyTorch VPG computed them
from the loss before the step, so it always logged 0).
"""

from __future__ import annotations

import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.torch_common import OnPolicyTorchLearner, adam
from rlexp.comm.torch import avg_grads
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class VPGLearner(OnPolicyTorchLearner):
    """VPG update; see ``conf/algo/vpg.yaml`` for the hyperparameters. PPO extends it."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.pi_optimizer = adam(self.ac.pi.parameters(), self.algo.pi_lr, self.algo.adam_eps)

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {**super().optimizers(), "pi": self.pi_optimizer}

    def loss_pi(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Policy-gradient loss and its diagnostics: approx KL to the batch's policy, entropy."""
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        loss = -(logp * batch["adv"]).mean()
        with torch.no_grad():
            info = {"kl": (batch["logp"] - logp).mean().item(), "ent": pi.entropy().mean().item()}
        return loss, info

    def update_networks(self, batch: Batch) -> Stats:
        self.pi_optimizer.zero_grad()
        loss_old, info_old = self.loss_pi(batch)
        loss_old.backward()
        avg_grads(self.ac.pi.parameters())
        self.pi_optimizer.step()
        return self.epoch_stats(batch, loss_old, info_old)

    def epoch_stats(
        self, batch: Batch, loss_old: torch.Tensor, info_old: dict[str, float], **more: float
    ) -> Stats:
        """The statistics of an epoch whose policy steps are taken, after its value update (run here).

        ``loss_old`` and ``info_old``: :meth:`loss_pi` before the steps. Logged: the policy loss before
        and its change, the entropy before, the KL (and PPO's clip fraction) of the policy reached;
        ``more``: further statistics.
        """
        with torch.no_grad():
            loss_new, info_new = self.loss_pi(batch)
        if "cf" in info_new:
            more = {"ClipFrac": info_new["cf"], **more}
        return on_policy_stats(
            (loss_old.item(), loss_new.item()),
            self.update_v(batch),
            Entropy=info_old["ent"],
            KL=info_new["kl"],
            **more,
        )
