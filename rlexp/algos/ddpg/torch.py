"""DDPG in PyTorch (Spinning Up's ddpg_pytorch update).

Per gradient step: one Adam step on ``mean((Q(s,a) - y)^2)`` with ``y = r + gamma (1 - d) Q_targ(s',
mu_targ(s'))``, then one Adam step on ``-mean(Q(s, mu(s)))`` with Q frozen, and the polyak update of
the targets. The losses are written once on functions of the networks, for the eager step (the modules)
and ``backend.compile``'s (functional calls on the flat parameters, :class:`CompiledUpdate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import FlatLayout, OffPolicyTorchLearner, Stage, adam
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

    def critic_loss(
        self,
        batch: Batch,
        pi_targ: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """``MSE(Q(s,a), y)`` and its statistics, for the target policy, the critics and their targets
        given as functions (the modules, or a compiled step's functional calls)."""
        q = critics[0](batch["obs"], batch["act"])
        with torch.no_grad():
            q_pi_targ = critics_targ[0](batch["obs2"], pi_targ(batch["obs2"]))
            backup = batch["rew"] + self.algo.gamma * (1 - batch["done"]) * q_pi_targ
        return ((q - backup) ** 2).mean(), {"QVals": q.detach()}

    @staticmethod
    def policy_loss(
        obs: torch.Tensor, pi: Callable[..., Any], critics: list[Callable[..., Any]]
    ) -> torch.Tensor:
        """``-mean(Q1(s, mu(s)))``."""
        return -critics[0](obs, pi(obs)).mean()

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        batch = self.with_draws(batch, policy_step)
        if self.compiles:
            return self.compiled_update(batch, policy_step)
        loss_q, stats = self.critic_loss(batch, self.pi_targ, self.qs, self.q_targs)
        self.optimize(self.q_optimizer, loss_q)
        stats["LossQ"] = loss_q
        if policy_step:  # DDPG: always; TD3: every policy_delay-th step
            with self.frozen(self.q_params):
                stats["LossPi"] = loss_pi = self.policy_loss(batch["obs"], self.pi, self.qs)
                self.optimize(self.pi_optimizer, loss_pi)
            self.polyak_update([(self.pi_flat, self.pi_targ_flat), (self.q_flat, self.q_targ_flat)])
        return stats

    def compiled_stages(
        self, policy_step: bool
    ) -> tuple[dict[str, torch.Tensor], list[Stage], Callable[[dict[str, torch.Tensor]], None] | None]:
        """The critics' step, then with ``policy_step`` the policy's and the polyak update of both targets:
        :meth:`update_networks`' steps on the flat parameters."""
        pi_layout, q_layout, polyak = FlatLayout(self.pi), FlatLayout(*self.qs), self.algo.polyak
        groups = {
            "q": self.q_flat,
            "q_targ": self.q_targ_flat,
            "pi": self.pi_flat,
            "pi_targ": self.pi_targ_flat,
        }

        def critics(
            groups: dict[str, torch.Tensor], batch: Batch, before: Stats
        ) -> tuple[torch.Tensor, Stats]:
            (pi_targ,) = pi_layout(groups["pi_targ"])
            return self.critic_loss(batch, pi_targ, q_layout(groups["q"]), q_layout(groups["q_targ"]))

        def policy(
            groups: dict[str, torch.Tensor], batch: Batch, before: Stats
        ) -> tuple[torch.Tensor, Stats]:
            (pi,) = pi_layout(groups["pi"])
            return self.policy_loss(batch["obs"], pi, q_layout(groups["q"])), {}

        def targets(groups: dict[str, torch.Tensor]) -> None:
            for name in ("pi", "q"):
                groups[f"{name}_targ"].mul_(polyak).add_(groups[name], alpha=1 - polyak)

        stages = [Stage("q", critics, self.q_optimizer, "LossQ")]
        if not policy_step:
            return groups, stages, None
        return groups, [*stages, Stage("pi", policy, self.pi_optimizer, "LossPi")], targets
