"""SAC in PyTorch (Spinning Up's sac_pytorch update, plus optional automatic entropy tuning), and what
its relatives TQC and CrossQ share with it (:class:`SoftActorCritic`).

Per gradient step: ``a' ~ pi(.|s')`` from the current policy; target ``y = r + gamma (1 - d)
(min_i Q_targ_i(s', a') - alpha log pi(a'|s'))``; one Adam step on ``MSE(Q1, y) + MSE(Q2, y)``; one
policy step on ``mean(alpha log pi(a~|s) - min_i Q_i(s, a~))`` with reparameterised ``a~`` and the
critics frozen; with ``autotune_alpha`` one step on ``-mean(log alpha (log pi(a~|s) + target_entropy))``;
then the polyak update. The losses are written once on functions of the networks, for the eager step
(the modules) and ``backend.compile``'s (functional calls on the flat parameters, ``CompiledUpdate``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import FlatLayout, OffPolicyTorchLearner, Stage, adam, flatten_
from rlexp.nn.torch import QFunction, SquashedGaussianActor
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds

#: the critics' value of (obs, act) that a policy step maximises
QPi = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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

    def with_draws(self, batch: Batch, policy_step: bool) -> Batch:
        """``batch`` with a gradient step's draws: ``noise2`` (s'), then with ``policy_step`` ``noise`` (s),
        in the order the steps use them."""
        batch = {**batch, "noise2": self.draws(batch, "noise2")}
        return {**batch, "noise": self.draws(batch, "noise")} if policy_step else batch

    def policy_loss(
        self,
        obs: torch.Tensor,
        noise: torch.Tensor,
        alpha: float | torch.Tensor,
        pi: Callable[..., Any],
        q_pi: QPi,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(``mean(alpha log pi(a~|s) - q_pi(s, a~))`` with ``a~`` from ``noise``, ``log pi(a~|s)``); a
        CrossQ policy normalises with this batch's statistics."""
        a, logp = pi(obs, noise=noise, train=True)
        return (alpha * logp - q_pi(obs, a)).mean(), logp

    def alpha_loss(self, log_alpha: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """``-mean(log alpha (log pi(a~|s) + target_entropy))``."""
        return -(log_alpha * (logp.detach() + self.target_entropy)).mean()

    def policy_step(self, obs: torch.Tensor, noise: torch.Tensor, alpha: float, q_pi: QPi) -> Stats:
        """One Adam step of the policy on :meth:`policy_loss` (the critics frozen), then with
        ``autotune_alpha`` one step of alpha on :meth:`alpha_loss`."""
        with self.frozen(self.q_params):
            loss_pi, logp = self.policy_loss(obs, noise, alpha, self.pi, q_pi)
            self.optimize(self.pi_optimizer, loss_pi)
        stats: Stats = {"LogPi": logp, "LossPi": loss_pi}
        if self.alpha_optimizer is not None:
            loss_alpha = self.alpha_loss(self.log_alpha, logp)
            self.optimize(self.alpha_optimizer, loss_alpha)
            stats.update(Alpha=alpha, LossAlpha=loss_alpha)
        return stats

    # --- SAC and TQC: critics with targets, one update written once for the eager and compiled steps
    def critic_modules(self) -> list[torch.nn.Module]:
        """The critics, in the order of :attr:`q_flat`'s layout."""
        raise NotImplementedError

    def critic_targets(self) -> list[torch.nn.Module]:
        """The target critics, in the order of :meth:`critic_modules` (none: CrossQ's)."""
        raise NotImplementedError

    def critic_loss(
        self,
        batch: Batch,
        alpha: float | torch.Tensor,
        pi: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """The critics' loss on ``batch`` (with its draws ``noise2``) and its statistics, for the policy
        ``pi``, the critics and their targets given as functions (the modules, or a compiled step's
        functional calls; ``critics_targ`` empty without targets)."""
        raise NotImplementedError

    def q_pi(self, critics: list[Callable[..., Any]], obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """What the policy step maximises: the critics' estimate of Q(obs, act), here the smaller of two
        (CrossQ's at their running statistics)."""
        return torch.min(critics[0](obs, act), critics[1](obs, act))

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        batch = self.with_draws(batch, policy_step)
        if self.compiles:
            return self.compiled_update(batch, policy_step)
        alpha, critics = self.alpha, self.critic_modules()
        loss_q, stats = self.critic_loss(batch, alpha, self.pi, critics, self.critic_targets())
        self.optimize(self.q_optimizer, loss_q)
        stats["LossQ"] = loss_q
        if policy_step:
            stats.update(
                self.policy_step(batch["obs"], batch["noise"], alpha, lambda o, a: self.q_pi(critics, o, a))
            )
            if self.critic_targets():
                self.polyak_update([(self.q_flat, self.q_targ_flat)])
        return stats

    def compiled_stages(
        self, policy_step: bool
    ) -> tuple[dict[str, torch.Tensor], list[Stage], Callable[[dict[str, torch.Tensor]], None] | None]:
        """The critics' step, then with ``policy_step`` the policy's, alpha's (``autotune_alpha``) and the
        polyak update (with targets): :meth:`update_networks`' steps on the flat parameters; the
        networks' buffers (CrossQ's running statistics) are groups that the stages update."""
        pi_layout, q_layout, polyak = (
            FlatLayout(self.pi, key="pi"),
            FlatLayout(*self.critic_modules(), key="q"),
            self.algo.polyak,
        )
        has_targets = bool(self.critic_targets())
        groups = {
            "q": self.q_flat,
            **({"q_targ": self.q_targ_flat} if has_targets else {}),
            "pi": self.pi_flat,
            "log_alpha": self.log_alpha,
            **pi_layout.buffers(),
            **q_layout.buffers(),
        }

        def alpha(groups: dict[str, torch.Tensor]) -> float | torch.Tensor:
            return groups["log_alpha"].exp() if self.alpha_optimizer is not None else self.algo.alpha

        def critics(
            groups: dict[str, torch.Tensor], batch: Batch, before: Stats
        ) -> tuple[torch.Tensor, Stats]:
            (pi,) = pi_layout(groups["pi"], groups)
            targets = q_layout(groups["q_targ"]) if has_targets else []
            return self.critic_loss(batch, alpha(groups), pi, q_layout(groups["q"], groups), targets)

        def policy(
            groups: dict[str, torch.Tensor], batch: Batch, before: Stats
        ) -> tuple[torch.Tensor, Stats]:
            (pi,), critics = pi_layout(groups["pi"], groups), q_layout(groups["q"], groups)
            q_pi = lambda o, a: self.q_pi(critics, o, a)  # noqa: E731
            loss, logp = self.policy_loss(batch["obs"], batch["noise"], alpha(groups), pi, q_pi)
            return loss, {"LogPi": logp.detach()}

        def entropy(
            groups: dict[str, torch.Tensor], batch: Batch, before: Stats
        ) -> tuple[torch.Tensor, Stats]:
            log_alpha = groups["log_alpha"]
            return self.alpha_loss(log_alpha, before["LogPi"]), {"Alpha": log_alpha.detach().exp()}

        def targets(groups: dict[str, torch.Tensor]) -> None:
            groups["q_targ"].mul_(polyak).add_(groups["q"], alpha=1 - polyak)

        stages = [Stage("q", critics, self.q_optimizer, "LossQ")]
        if not policy_step:
            return groups, stages, None
        stages.append(Stage("pi", policy, self.pi_optimizer, "LossPi"))
        if self.alpha_optimizer is not None:
            stages.append(Stage("log_alpha", entropy, self.alpha_optimizer, "LossAlpha"))
        return groups, stages, targets if has_targets else None


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

    def critic_modules(self) -> list[torch.nn.Module]:
        return [self.q1, self.q2]

    def critic_targets(self) -> list[torch.nn.Module]:
        return [self.q1_targ, self.q2_targ]

    def critic_loss(
        self,
        batch: Batch,
        alpha: float | torch.Tensor,
        pi: Callable[..., Any],
        critics: list[Callable[..., Any]],
        critics_targ: list[Callable[..., Any]],
    ) -> tuple[torch.Tensor, Stats]:
        """``MSE(Q1, y) + MSE(Q2, y)``, ``y`` from the smaller target critic at ``a' ~ pi(.|s')``."""
        (q1, q2), (q1_targ, q2_targ) = critics, critics_targ
        q1v, q2v = q1(batch["obs"], batch["act"]), q2(batch["obs"], batch["act"])
        with torch.no_grad():
            a2, logp_a2 = pi(batch["obs2"], noise=batch["noise2"])
            q_targ = torch.min(q1_targ(batch["obs2"], a2), q2_targ(batch["obs2"], a2))
            backup = batch["rew"] + self.algo.gamma * (1 - batch["done"]) * (q_targ - alpha * logp_a2)
        loss_q = ((q1v - backup) ** 2).mean() + ((q2v - backup) ** 2).mean()
        return loss_q, {"Q1Vals": q1v.detach(), "Q2Vals": q2v.detach()}
