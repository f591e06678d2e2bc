"""TD3 in PyTorch (Spinning Up's td3_pytorch update, with the critics really frozen for the policy step).

Per gradient step: target ``y = r + gamma (1 - d) min_i Q_targ_i(s', clip(mu_targ(s') + clip(eps, -c,
c), -1, 1))`` with ``eps ~ N(0, target_noise)``; one Adam step on ``MSE(Q1, y) + MSE(Q2, y)``; every
``policy_delay``-th step also DDPG's policy step on ``-mean(Q1(s, mu(s)))`` and the polyak update.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from gymnasium import spaces

from rlexp.algos.ddpg.torch import DDPGLearner
from rlexp.algos.learner import Batch, Stats
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class TD3Learner(DDPGLearner):
    """TD3 update; see ``conf/algo/td3.yaml`` for the hyperparameters."""

    N_CRITICS = 2

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.policy_delay = self.algo.policy_delay

    def with_draws(self, batch: Batch, policy_step: bool) -> Batch:
        """``batch`` with the standard normal draw of the target policy's noise (``target_noise``: given in
        the parity tests, else from the ``learner`` stream)."""
        if "target_noise" in batch:
            return batch
        return {**batch, "target_noise": self.noise((batch["obs"].shape[0], self.act_dim))}

    def critic_loss(
        self,
        batch: Batch,
        pi_targ: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """``MSE(Q1, y) + MSE(Q2, y)`` with the smaller target critic at the smoothed target action."""
        algo = self.algo
        (q1, q2), (q1_targ, q2_targ) = critics, critics_targ
        q1v, q2v = q1(batch["obs"], batch["act"]), q2(batch["obs"], batch["act"])
        with torch.no_grad():
            a_targ = pi_targ(batch["obs2"])
            eps = torch.clamp(batch["target_noise"] * algo.target_noise, -algo.noise_clip, algo.noise_clip)
            a2 = torch.clamp(a_targ + eps, -1.0, 1.0)
            q_targ = torch.min(q1_targ(batch["obs2"], a2), q2_targ(batch["obs2"], a2))
            backup = batch["rew"] + algo.gamma * (1 - batch["done"]) * q_targ
        loss_q = ((q1v - backup) ** 2).mean() + ((q2v - backup) ** 2).mean()
        return loss_q, {"Q1Vals": q1v.detach(), "Q2Vals": q2v.detach()}
