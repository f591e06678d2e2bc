"""SAC in PyTorch (Spinning Up's sac_pytorch update, plus optional automatic entropy tuning), and what
its relatives TQC and CrossQ share with it (:class:`SoftActorCritic`).

Per gradient step: ``a' ~ pi(.|s')`` from the current policy; target ``y = r + gamma (1 - d)
(min_i Q_targ_i(s', a') - alpha log pi(a'|s'))``; one Adam step on ``MSE(Q1, y) + MSE(Q2, y)``; one
policy step on ``mean(alpha log pi(a~|s) - min_i Q_i(s, a~))`` with reparameterised ``a~`` and the
critics frozen; with ``autotune_alpha`` one step on ``-mean(log alpha (log pi(a~|s) + target_entropy))``;
then the polyak update.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import OffPolicyTorchLearner, adam, flatten_
from rlexp.nn.torch import QFunction, SquashedGaussianActor
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class SoftActorCritic(OffPolicyTorchLearner):
    """What SAC, TQC and CrossQ share in PyTorch: the squashed Gaussian policy ``pi`` with its Adam, the
    entropy coefficient alpha (``algo.alpha``, or learned toward ``target_entropy`` by its own Adam with
    ``autotune_alpha``), acting, and the policy step followed by the alpha step.

    A subclass builds ``pi`` and its critics in one ``initialising()`` block (their initial weights come
    from the ``init`` stream in that order), sets :attr:`q_params` (the critics' parameters, frozen in the
    policy step) and :attr:`q_optimizer`, and calls :meth:`setup_policy`.
    """

    pi: SquashedGaussianActor
    q_params: list[torch.nn.Parameter]
    q_optimizer: torch.optim.Optimizer

    def setup_policy(self, lr: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        """The policy's flat parameters and Adam (``betas``: CrossQ's beta1 is 0.5), and alpha: a constant,
        or with ``autotune_alpha`` a learned log alpha (initially ``algo.alpha``) with Adam at ``lr``."""
        self.pi_flat = flatten_(list(self.pi.parameters()))
        self.pi_optimizer = adam([self.pi_flat], lr, betas=betas)
        self.log_alpha = torch.tensor(
            float(np.log(max(self.algo.alpha, 1e-30))),
            device=self.device,
            requires_grad=self.algo.autotune_alpha,
        )
        te = self.algo.target_entropy
        self.target_entropy = -float(self.act_dim) if te is None else te
        self.alpha_optimizer = adam([self.log_alpha], lr) if self.algo.autotune_alpha else None

    @property
    def alpha(self) -> float:
        return self.algo.alpha if self.alpha_optimizer is None else float(self.log_alpha.detach().exp())

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        opts = {"pi": self.pi_optimizer, "q": self.q_optimizer}
        return opts if self.alpha_optimizer is None else {**opts, "alpha": self.alpha_optimizer}

    def extra_state(self) -> dict[str, object]:
        return {**super().extra_state(), "log_alpha": self.log_alpha.detach().cpu()}

    def load_extra_state(self, state: dict[str, object]) -> None:
        super().load_extra_state(state)
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """tanh(mu(obs)) when deterministic, else a sample of the squashed Gaussian; in [-1, 1]."""
        noise = None if deterministic else self.obs_tensor(self.rng.standard_normal(self.act_dim))
        a, _ = self.pi(self.obs_tensor(obs), deterministic=deterministic, with_logprob=False, noise=noise)
        return a.cpu().numpy()

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """A sample of the policy."""
        return self.act(obs, deterministic=False)

    def draws(self, batch: Batch, key: str) -> torch.Tensor:
        """The standard normal draws of the policy's actions for ``batch``'s observations: ``batch[key]``
        when given (``noise`` for s, ``noise2`` for s': the parity tests pre-draw them), else fresh ones
        from the ``learner`` stream."""
        return batch[key] if key in batch else self.noise((batch["obs"].shape[0], self.act_dim))

    def policy_step(
        self, obs: torch.Tensor, noise: torch.Tensor, alpha: float, q_pi: Callable[..., torch.Tensor]
    ) -> Stats:
        """One Adam step of the policy on ``mean(alpha log pi(a~|s) - q_pi(s, a~))`` (``a~`` from ``noise``,
        the critics frozen; a CrossQ policy normalises with this batch's statistics), then with
        ``autotune_alpha`` one step of alpha on ``-mean(log alpha (log pi(a~|s) + target_entropy))``."""
        with self.frozen(self.q_params):
            a, logp = self.pi(obs, noise=noise, train=True)
            loss_pi = (alpha * logp - q_pi(obs, a)).mean()
            self.optimize(self.pi_optimizer, loss_pi)
        stats: Stats = {"LogPi": logp, "LossPi": loss_pi}
        if self.alpha_optimizer is not None:
            loss_alpha = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
            self.optimize(self.alpha_optimizer, loss_alpha)
            stats.update(Alpha=alpha, LossAlpha=loss_alpha)
        return stats


class SACLearner(SoftActorCritic):
    """SAC update; see ``conf/algo/sac.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        kw = self.net_kwargs()
        with self.initialising():
            self.pi = SquashedGaussianActor(self.obs_dim, self.act_dim, **kw).to(self.device)
            self.q1 = QFunction(self.obs_dim, self.act_dim, **kw).to(self.device)
            self.q2 = QFunction(self.obs_dim, self.act_dim, **kw).to(self.device)
        self.sync(self.pi, self.q1, self.q2)
        self.q1_targ, self.q2_targ = self.target(self.q1), self.target(self.q2)
        self.q_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.q_flat, self.q_targ_flat = self.flat_group([self.q1, self.q2], [self.q1_targ, self.q2_targ])
        self.q_optimizer = adam([self.q_flat], self.algo.lr)
        self.setup_policy(self.algo.lr)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"pi": self.pi, "q1": self.q1, "q2": self.q2, "q1_targ": self.q1_targ, "q2_targ": self.q2_targ}

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        alpha, gamma = self.alpha, self.algo.gamma
        q1, q2 = self.q1(batch["obs"], batch["act"]), self.q2(batch["obs"], batch["act"])
        with torch.no_grad():
            a2, logp_a2 = self.pi(batch["obs2"], noise=self.draws(batch, "noise2"))
            q_targ = torch.min(self.q1_targ(batch["obs2"], a2), self.q2_targ(batch["obs2"], a2))
            backup = batch["rew"] + gamma * (1 - batch["done"]) * (q_targ - alpha * logp_a2)
        loss_q = ((q1 - backup) ** 2).mean() + ((q2 - backup) ** 2).mean()
        self.optimize(self.q_optimizer, loss_q)
        stats: Stats = {"LossQ": loss_q, "Q1Vals": q1, "Q2Vals": q2}
        if policy_step:  # always: SAC has no policy delay
            stats.update(
                self.policy_step(
                    batch["obs"],
                    self.draws(batch, "noise"),
                    alpha,
                    lambda o, a: torch.min(self.q1(o, a), self.q2(o, a)),
                )
            )
            self.polyak_update([(self.q_flat, self.q_targ_flat)])
        return stats
