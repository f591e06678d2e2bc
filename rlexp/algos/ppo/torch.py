"""PPO-clip in PyTorch (Spinning Up's ppo_pytorch update, with the KL averaged over ranks).

Per epoch: up to ``train_pi_iters`` full-batch Adam steps on the clipped surrogate
``-mean(min(r*A, clip(r, 1-eps, 1+eps)*A))`` with ``r = pi(a|s) / pi_old(a|s)``, stopping early when
the rank-averaged approximate KL exceeds ``1.5 * target_kl``; then ``train_v_iters`` value steps.
The KL is averaged in the same allreduce as the gradients (one collective per policy step); the
step is taken only when that KL is within bounds, so the parameters follow Spinning Up's schedule.
"""

from __future__ import annotations

import torch
from torch.distributions import Distribution

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.vpg.torch import VPGLearner
from rlexp.comm.torch import avg_grads


class PPOLearner(VPGLearner):
    """PPO-clip update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def surrogate(self, batch: Batch) -> tuple[Distribution, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(pi, clipped surrogate loss, probability ratio r, approximate KL to the batch's policy)."""
        eps = self.algo.clip_ratio
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        ratio = torch.exp(logp - batch["logp"])
        adv = batch["adv"]
        loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv).mean()
        with torch.no_grad():
            kl = (batch["logp"] - logp).mean()
        return pi, loss, ratio, kl

    def loss_pi(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Clipped surrogate loss and its diagnostics: approx KL, entropy, fraction clipped."""
        eps = self.algo.clip_ratio
        pi, loss, ratio, kl = self.surrogate(batch)
        with torch.no_grad():
            info = {
                "kl": kl.item(),
                "ent": pi.entropy().mean().item(),
                "cf": ((ratio > 1 + eps) | (ratio < 1 - eps)).float().mean().item(),
            }
        return loss, info

    def update_networks(self, batch: Batch) -> Stats:
        """One PPO epoch update. Loss, KL and clip fraction are evaluated before and after it.

        Spinning Up logged KL/ClipFrac of the last iteration *before* its step; here they describe
        the policy actually reached, as does DeltaLossPi.
        """
        params = list(self.ac.pi.parameters())
        with torch.no_grad():
            loss_old, info_old = self.loss_pi(batch)
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            self.pi_optimizer.zero_grad()
            _, loss, _, kl = self.surrogate(batch)
            loss.backward()
            (kl_avg,) = avg_grads(params, [kl.item()])  # gradients and KL in one allreduce
            if kl_avg > 1.5 * self.algo.target_kl:  # the KL before this step: do not take it
                stop_iter = i
                break
            self.pi_optimizer.step()
        return self.epoch_stats(batch, loss_old, info_old, StopIter=stop_iter)
