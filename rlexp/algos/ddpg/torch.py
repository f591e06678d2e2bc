"""DDPG in PyTorch (Spinning Up's ddpg_pytorch update).

Per gradient step: one Adam step on ``mean((Q(s,a) - y)^2)`` with ``y = r + gamma (1 - d) Q_targ(s',
mu_targ(s'))``, then one Adam step on ``-mean(Q(s, mu(s)))`` with Q frozen, and the polyak update of
the targets.
"""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import OffPolicyTorchLearner, adam
from rlexp.nn.torch import DeterministicActor, QFunction
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DDPGLearner(OffPolicyTorchLearner):
    """DDPG update; see ``conf/algo/ddpg.yaml`` for the hyperparameters. TD3 extends it with a
    second critic (``N_CRITICS``)."""

    N_CRITICS = 1

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw = self.net_kwargs()
        with self.initialising():
            self.pi = DeterministicActor(self.obs_dim, self.act_dim, **kw).to(self.device)
            self.qs = [
                QFunction(self.obs_dim, self.act_dim, **kw).to(self.device) for _ in range(self.N_CRITICS)
            ]
        self.sync(self.pi, *self.qs)
        self.pi_targ = self.target(self.pi)
        self.q_targs = [self.target(q) for q in self.qs]
        self.q_params = [p for q in self.qs for p in q.parameters()]
        self.pi_flat, self.pi_targ_flat = self.flat_group([self.pi], [self.pi_targ])
        self.q_flat, self.q_targ_flat = self.flat_group(self.qs, self.q_targs)
        self.pi_optimizer = adam([self.pi_flat], self.algo.pi_lr)
        self.q_optimizer = adam([self.q_flat], self.algo.q_lr)

    def modules(self) -> dict[str, torch.nn.Module]:
        names = ["q"] if self.N_CRITICS == 1 else [f"q{i + 1}" for i in range(self.N_CRITICS)]
        return {
            "pi": self.pi,
            **dict(zip(names, self.qs, strict=True)),
            "pi_targ": self.pi_targ,
            **{f"{n}_targ": q for n, q in zip(names, self.q_targs, strict=True)},
        }

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"pi": self.pi_optimizer, "q": self.q_optimizer}

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """mu(obs) in [-1, 1] (the policy is deterministic either way)."""
        return self.pi(self.obs_tensor(obs)).cpu().numpy()

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """mu(obs) plus Gaussian noise of std act_noise, clipped to [-1, 1]."""
        return np.clip(
            self.act(obs) + self.algo.act_noise * self.rng.standard_normal(self.act_dim), -1.0, 1.0
        )

    def update_pi(self, obs: torch.Tensor) -> torch.Tensor:
        """One policy step on -mean(Q1(s, mu(s))) with the critics frozen, then the polyak update."""
        with self.frozen(self.q_params):
            loss_pi = -self.qs[0](obs, self.pi(obs)).mean()
            self.optimize(self.pi_optimizer, loss_pi)
        self.polyak_update([(self.pi_flat, self.pi_targ_flat), (self.q_flat, self.q_targ_flat)])
        return loss_pi

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        q = self.qs[0](batch["obs"], batch["act"])
        with torch.no_grad():
            q_pi_targ = self.q_targs[0](batch["obs2"], self.pi_targ(batch["obs2"]))
            backup = batch["rew"] + self.algo.gamma * (1 - batch["done"]) * q_pi_targ
        loss_q = ((q - backup) ** 2).mean()
        self.optimize(self.q_optimizer, loss_q)
        stats = {"LossQ": loss_q, "QVals": q}
        if policy_step:  # always: DDPG has no policy delay
            stats["LossPi"] = self.update_pi(batch["obs"])
        return stats
