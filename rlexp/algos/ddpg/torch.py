"""DDPG in PyTorch (Spinning Up's ddpg_pytorch update).

Per gradient step: one Adam step on ``mean((Q(s,a) - y)^2)`` with ``y = r + gamma (1 - d) Q_targ(s',
mu_targ(s'))``, one Adam step on ``-mean(Q(s, mu(s)))`` with Q frozen, then polyak-averaged targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.torch_common import OffPolicyTorchLearner, adam
from rlexp.config import RLExpConfig
from rlexp.nn.torch import DeterministicActor, QFunction


class DDPGLearner(OffPolicyTorchLearner):
    """DDPG update; see ``conf/algo/ddpg.yaml`` for the hyperparameters. TD3 extends it with a twin critic."""

    N_CRITICS = 1

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        kw = self.net_kwargs()
        self.pi = DeterministicActor(self.obs_dim, self.act_dim, **kw).to(self.device)
        self.qs = [QFunction(self.obs_dim, self.act_dim, **kw).to(self.device) for _ in range(self.N_CRITICS)]
        self.sync(self.pi, *self.qs)
        self.pi_targ = self.target(self.pi)
        self.q_targs = [self.target(q) for q in self.qs]
        self.q_params = [p for q in self.qs for p in q.parameters()]
        self.pi_flat, self.pi_targ_flat = self.flat_group([self.pi], [self.pi_targ])
        self.q_flat, self.q_targ_flat = self.flat_group(self.qs, self.q_targs)
        self.pi_optimizer = adam([self.pi_flat], self.algo.pi_lr)
        self.q_optimizer = adam([self.q_flat], self.algo.q_lr)

    def _q_names(self) -> list[str]:
        return ["q"] if self.N_CRITICS == 1 else [f"q{i + 1}" for i in range(self.N_CRITICS)]

    def modules(self) -> dict[str, torch.nn.Module]:
        names = self._q_names()
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
        """mu(obs) in [-1, 1] (the policy is deterministic)."""
        return self.pi(self._obs(obs)).cpu().numpy()

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """mu(obs) plus Gaussian noise of std act_noise, clipped to [-1, 1]."""
        a = self.act(obs) + self.algo.act_noise * self.rng.standard_normal(self.act_dim)
        return np.clip(a, -1.0, 1.0)

    def update_pi(self, obs: torch.Tensor) -> float:
        """One policy step on -mean(Q1(s, mu(s))) with the critics frozen, then the polyak update."""
        self.frozen(self.q_params, True)
        loss_pi = -self.qs[0](obs, self.pi(obs)).mean()
        self.step_optimizer(self.pi_optimizer, loss_pi, self.pi_flat)
        self.frozen(self.q_params, False)
        self.polyak_update([(self.pi_flat, self.pi_targ_flat), (self.q_flat, self.q_targ_flat)])
        return loss_pi.item()

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        d = self.tensors(batch)
        q = self.qs[0](d["obs"], d["act"])
        with torch.no_grad():
            q_pi_targ = self.q_targs[0](d["obs2"], self.pi_targ(d["obs2"]))
            backup = d["rew"] + self.algo.gamma * (1 - d["done"]) * q_pi_targ
        loss_q = ((q - backup) ** 2).mean()
        self.step_optimizer(self.q_optimizer, loss_q, self.q_flat)
        loss_pi = self.update_pi(d["obs"])
        self.n_updates += 1
        return {"LossQ": loss_q.item(), "QVals": q.detach().cpu().numpy(), "LossPi": loss_pi}
