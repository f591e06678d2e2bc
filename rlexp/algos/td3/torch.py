"""TD3 in PyTorch (Spinning Up's td3_pytorch update, with the critics really frozen for the policy step).

Per gradient step: target ``y = r + gamma (1 - d) min_i Q_targ_i(s', clip(mu_targ(s') + clip(eps, -c,
c), -1, 1))`` with ``eps ~ N(0, target_noise)``; one Adam step on ``MSE(Q1, y) + MSE(Q2, y)``; every
``policy_delay``-th step also one policy step on ``-mean(Q1(s, mu(s)))`` and the polyak update.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlexp.algos.ddpg.torch import DDPGLearner


class TD3Learner(DDPGLearner):
    """TD3 update; see ``conf/algo/td3.yaml`` for the hyperparameters."""

    N_CRITICS = 2

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        d = self.tensors(batch)
        algo = self.algo
        (q1, q2), (q1_targ, q2_targ) = self.qs, self.q_targs
        q1v, q2v = q1(d["obs"], d["act"]), q2(d["obs"], d["act"])
        with torch.no_grad():
            a_targ = self.pi_targ(d["obs2"])
            noise = (
                d["target_noise"] if "target_noise" in d else torch.randn_like(a_targ)
            )  # pre-drawn in parity tests
            eps = torch.clamp(noise * algo.target_noise, -algo.noise_clip, algo.noise_clip)
            a2 = torch.clamp(a_targ + eps, -1.0, 1.0)
            backup = d["rew"] + algo.gamma * (1 - d["done"]) * torch.min(
                q1_targ(d["obs2"], a2), q2_targ(d["obs2"], a2)
            )
        loss_q = ((q1v - backup) ** 2).mean() + ((q2v - backup) ** 2).mean()
        self.step_optimizer(self.q_optimizer, loss_q, self.q_flat)
        stats: dict[str, Any] = {
            "LossQ": loss_q.item(),
            "Q1Vals": q1v.detach().cpu().numpy(),
            "Q2Vals": q2v.detach().cpu().numpy(),
        }
        if self.n_updates % algo.policy_delay == 0:
            stats["LossPi"] = self.update_pi(d["obs"])
        self.n_updates += 1
        return stats
