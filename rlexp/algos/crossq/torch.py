"""CrossQ in PyTorch (Bhatt, Palenicek et al. 2024; the update of SBX's and sb3-contrib's CrossQ).

Per gradient step: ``a' ~ pi(.|s')`` with the policy's running statistics; each critic reads (s, a) and
(s', a') as one batch, normalised with its statistics (which the running statistics then follow); the
target ``r + gamma (1 - d) (min_i Q_i(s', a') - alpha log pi(a'|s'))`` from the second half, without
gradient; one Adam step on ``MSE(Q1, y) + MSE(Q2, y)`` of the first half. Every ``policy_delay``-th
step, SAC's policy step (the policy normalised with this batch, the critics with their running
statistics) and alpha step. With several ranks the running statistics are then averaged over them.
The step is SAC's (``SoftActorCritic.update_networks``, and its compiled stages with ``backend.compile``,
where the running statistics are groups that the stages update) without targets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.sac.torch import SoftActorCritic
from rlexp.algos.torch_common import adam, flatten_
from rlexp.comm.torch import average_
from rlexp.nn.torch import QFunction, SquashedGaussianActor, renorm_buffers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class CrossQLearner(SoftActorCritic):
    """CrossQ update; see ``conf/algo/crossq.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, algo = self.net_kwargs(), self.algo
        dims, renorm = (self.obs_dim, self.act_dim), algo.renorm()
        critic_kw = {**kw, "hidden_sizes": algo.critic_hidden_sizes(kw["hidden_sizes"])}
        with self.initialising():
            self.pi = SquashedGaussianActor(*dims, **kw, renorm=renorm).to(self.device)
            self.q1 = QFunction(*dims, **critic_kw, renorm=renorm).to(self.device)
            self.q2 = QFunction(*dims, **critic_kw, renorm=renorm).to(self.device)
        self.sync(self.pi, self.q1, self.q2)
        self.q_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.q_flat = flatten_(self.q_params)
        betas = (algo.adam_beta1, 0.999)
        self.q_optimizer = adam([self.q_flat], algo.lr, betas=betas)
        self.setup_policy(algo.lr, betas)
        self.policy_delay = algo.policy_delay
        self.running_stats = renorm_buffers(self.pi, self.q1, self.q2)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2}

    def compute_update(self, batch: Batch, policy_step: bool) -> Stats:
        stats = super().compute_update(batch, policy_step)
        average_(self.running_stats)  # the ranks' running statistics agree (nothing with one rank)
        return stats

    def critic_modules(self) -> list[torch.nn.Module]:
        return [self.q1, self.q2]

    def critic_targets(self) -> list[torch.nn.Module]:
        return []  # none: the critics read s' in the same batch as s

    def critic_loss(
        self,
        batch: Batch,
        alpha: float | torch.Tensor,
        pi: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """``MSE(Q1, y) + MSE(Q2, y)``, each critic normalising (s, a) and (s', a') as one batch, ``y`` from
        the smaller critic at ``a' ~ pi(.|s')`` (the policy at its running statistics)."""
        q1, q2 = critics
        obs, n = batch["obs"], batch["obs"].shape[0]
        with torch.no_grad():
            a2, logp_a2 = pi(batch["obs2"], noise=batch["noise2"])
        both_obs, both_act = torch.cat([obs, batch["obs2"]]), torch.cat([batch["act"], a2])
        q1v, q1_next = q1(both_obs, both_act, train=True).split(n)  # one batch: the same statistics
        q2v, q2_next = q2(both_obs, both_act, train=True).split(n)
        with torch.no_grad():
            q_next = torch.min(q1_next, q2_next)
            backup = batch["rew"] + self.algo.gamma * (1 - batch["done"]) * (q_next - alpha * logp_a2)
        loss_q = ((q1v - backup) ** 2).mean() + ((q2v - backup) ** 2).mean()
        return loss_q, {"Q1Vals": q1v.detach(), "Q2Vals": q2v.detach()}
