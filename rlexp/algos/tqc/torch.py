"""TQC in PyTorch (Kuznetsov et al. 2020; sb3-contrib's TQC update, in SAC's order of steps).

Per gradient step: ``a' ~ pi(.|s')``; the target critics' atoms at (s', a') pooled, sorted and the
largest ``drop_per_critic x n_critics`` dropped; target samples ``r + gamma (1 - d) (z - alpha log
pi(a'|s'))``; one Adam step of all critics on the quantile Huber loss; SAC's policy step on the mean of
all atoms, then its alpha step; then the polyak update of the target critics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.sac.torch import SoftActorCritic
from rlexp.algos.torch_common import adam
from rlexp.nn.torch import QuantileCritics, SquashedGaussianActor, quantile_huber_loss
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class TQCLearner(SoftActorCritic):
    """TQC update; see ``conf/algo/tqc.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw, algo = self.net_kwargs(), self.algo
        dims = (self.obs_dim, self.act_dim)
        with self.initialising():
            self.pi = SquashedGaussianActor(*dims, **kw).to(self.device)
            self.critics = QuantileCritics(
                *dims, kw["hidden_sizes"], kw["activation"], algo.n_critics, algo.n_quantiles, kw["image"]
            ).to(self.device)
        self.sync(self.pi, self.critics)
        self.critics_targ = self.target(self.critics)
        self.q_params = list(self.critics.parameters())
        self.q_flat, self.q_targ_flat = self.flat_group([self.critics], [self.critics_targ])
        self.q_optimizer = adam([self.q_flat], algo.lr)
        self.setup_policy(algo.lr)
        self.kept = algo.kept_atoms()

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"pi": self.pi, "critics": self.critics, "critics_targ": self.critics_targ}

    def critic_modules(self) -> list[torch.nn.Module]:
        return [self.critics]

    def critic_targets(self) -> list[torch.nn.Module]:
        return [self.critics_targ]

    def critic_loss(
        self,
        batch: Batch,
        alpha: float | torch.Tensor,
        pi: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """The quantile Huber loss of every critic's atoms to the kept target atoms."""
        gamma = self.algo.gamma
        quantiles = critics[0](batch["obs"], batch["act"])  # (batch, n_critics, n_quantiles)
        with torch.no_grad():
            a2, logp_a2 = pi(batch["obs2"], noise=batch["noise2"])
            atoms = critics_targ[0](batch["obs2"], a2).flatten(1)  # all critics' atoms pooled
            kept = torch.sort(atoms, dim=1).values[:, : self.kept]  # the largest dropped
            target = batch["rew"][:, None] + gamma * (1 - batch["done"][:, None]) * (
                kept - alpha * logp_a2[:, None]
            )
        loss_q = quantile_huber_loss(quantiles, target[:, None, :])
        return loss_q, {"QVals": quantiles.detach().mean((1, 2))}

    def q_pi(self, critics: list[Callable[..., Any]], obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return critics[0](obs, act).mean((1, 2))
