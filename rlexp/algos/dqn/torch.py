"""DQN in PyTorch.

Per gradient step: ``y = R + discount (1 - done) Q_targ(s', a')`` with ``a' = argmax Q_targ(s', .)``,
or ``argmax Q(s', .)`` with ``double_q``; one optimizer step (Adam or centred RMSProp) on the mean
Huber (delta 1) or squared error of ``Q(s, a) - y``, importance-weighted under prioritized replay,
its gradient averaged over ranks and clipped to a global norm of ``max_grad_norm``. The target network
follows at the loop's env steps (:meth:`rlexp.algos.dqn.base.DQNLearnerBase.advance`).

A distributional head replaces the error by its own loss per transition: C51's cross-entropy to the
target distribution projected onto the atoms (:meth:`DQNLearner.c51_losses`), QR-DQN's quantile Huber
loss to the target quantiles (:meth:`DQNLearner.qr_losses`). A noisy network takes fresh draws for the
online and the target network at each step (:meth:`DQNLearner.draws`).

With ``backend.compile`` the step is one function of the flat parameters compiled by ``torch.compile``
(:class:`rlexp.algos.torch_common.CompiledUpdate`): the same losses (:meth:`DQNLearner.errors`) through
functional calls of the networks, autograd's gradient by ``torch.func``, the clip and the optimizer's
rule as tensor arithmetic; the same numbers up to rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from gymnasium import spaces

from rlexp.algos.dqn.base import DQNLearnerBase
from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import (
    FlatLayout,
    OffPolicyTorchLearner,
    Stage,
    adam,
    clip_flat_grad_,
    rmsprop,
)
from rlexp.comm.torch import avg_grads
from rlexp.nn.torch import DiscreteQNetwork, TorchForward, linear_layers, quantile_huber_loss, sigma_layers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds

#: a Q-network as a function of (observations, a noisy network's draws or None): its output
Net = Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]


class DQNLearner(DQNLearnerBase, OffPolicyTorchLearner):
    """DQN update; see ``conf/algo/dqn.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Discrete, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        algo, net = self.algo, cfg.network
        kw = {
            "hidden_sizes": net.hidden_sizes,
            "activation": net.activation,
            "image": self.image,
            "dueling": algo.dueling,
            "atoms": algo.atoms,
            "noisy_sigma0": algo.noisy_sigma0 if algo.noisy else None,
        }
        with self.initialising():
            self.q = DiscreteQNetwork(self.obs_dim, self.n_actions, **kw).to(self.device)
        self.sync(self.q)
        self.q_targ = self.target(self.q)
        self.q_flat, self.q_targ_flat = self.flat_group([self.q], [self.q_targ])
        if algo.optimizer == "rmsprop":
            self.optimizer: torch.optim.Optimizer = rmsprop(
                [self.q_flat], lr=algo.lr, alpha=algo.rms_alpha, eps=algo.optim_eps
            )
        else:
            self.optimizer = adam([self.q_flat], algo.lr, algo.optim_eps)
        #: C51's atoms as a tensor (None for the other heads)
        self.support = (
            None
            if self.support_values is None
            else torch.as_tensor(self.support_values, dtype=torch.float32, device=self.device)
        )
        forward = None if self.image is None else TorchForward(self.q, self.device)
        self.acting = self.numpy_acting(self.q, linear_layers, sigma_layers, forward)

    def compiled_stages(self, policy_step: bool) -> tuple[dict[str, torch.Tensor], list[Stage], None]:
        """One stage: the optimizer's step on :meth:`flat_loss`."""
        self.layout = FlatLayout(self.q)
        stage = Stage("q", self.flat_loss, self.optimizer, "LossQ", self.algo.max_grad_norm)
        return {"q": self.q_flat, "q_targ": self.q_targ_flat}, [stage], None

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"q": self.q, "q_targ": self.q_targ}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.optimizer}

    def tensors(self, batch: Batch) -> Batch:
        out = super().tensors(batch)
        out["act"] = out["act"].long()
        return out

    @torch.no_grad()
    def update_target(self) -> None:
        if self.algo.polyak == 0.0:
            self.q_targ_flat.copy_(self.q_flat)
        else:
            self.polyak_update([(self.q_flat, self.q_targ_flat)])

    def set_lr(self, lr: float) -> None:
        self.optimizer.param_groups[0]["lr"] = lr

    def with_draws(self, batch: Batch, policy_step: bool) -> Batch:
        """``batch`` with a noisy network's standard normal draws for one gradient step: ``noise`` for
        the online network, then ``noise_targ`` for the target network, each ``batch[key]`` when given
        (the parity tests pre-draw them), else fresh from the ``learner`` stream; none without noisy
        networks."""
        if not self.algo.noisy:
            return batch
        draw = lambda key: batch[key] if key in batch else self.noise((self.q.noise_size,))  # noqa: E731
        noise = draw("noise")
        return {**batch, "noise": noise, "noise_targ": draw("noise_targ")}

    def values(self, out: torch.Tensor) -> torch.Tensor:
        """Q-values from the network's output: itself, C51's mean over its atoms, QR-DQN's mean quantile."""
        if self.algo.distributional == "c51":
            return (out.softmax(-1) * self.support).sum(-1)
        return out.mean(-1) if self.algo.distributional == "qr" else out

    @torch.no_grad()
    def next_outputs(
        self,
        batch: Batch,
        noise: torch.Tensor | None = None,
        noise_targ: torch.Tensor | None = None,
        nets: tuple[Net, Net] | None = None,
    ) -> torch.Tensor:
        """The target network's output at s' and the next action ``a'``: its own greedy action, or with
        ``double_q`` the online network's (by their Q-values). ``nets``: the online and the target
        network as functions (the compiled step's), by default :attr:`q` and :attr:`q_targ`."""
        q, q_targ = nets or (self.q, self.q_targ)
        out2_targ = q_targ(batch["obs2"], noise_targ)
        if self.algo.double_q:  # the online network chooses, the target network evaluates
            a2 = self.values(q(batch["obs2"], noise)).argmax(-1)
        else:
            a2 = self.values(out2_targ).argmax(-1)
        return out2_targ[torch.arange(a2.shape[0], device=a2.device), a2]

    @torch.no_grad()
    def targets(
        self,
        batch: Batch,
        noise: torch.Tensor | None = None,
        noise_targ: torch.Tensor | None = None,
        nets: tuple[Net, Net] | None = None,
    ) -> torch.Tensor:
        """``R + discount (1 - done) Q_targ(s', a')``: ``a'`` the target network's greedy action, or with
        ``double_q`` the online network's (``nets`` as :meth:`next_outputs`)."""
        if self.algo.distributional is None and noise is None and noise_targ is None:
            q, q_targ = nets or (self.q, self.q_targ)
            q2_targ = q_targ(batch["obs2"], None)
            if self.algo.double_q:  # the online network chooses, the target network evaluates
                a2 = q(batch["obs2"], None).argmax(-1)
                q2 = q2_targ.gather(1, a2[:, None]).squeeze(1)
            else:
                q2 = q2_targ.max(-1).values
        else:
            q2 = self.next_outputs(batch, noise, noise_targ, nets)
            if q2.ndim == 2:  # QR-DQN's target quantiles: (batch, quantiles)
                shift = batch["discount"] * (1 - batch["done"])
                return batch["rew"][:, None] + shift[:, None] * q2
        return batch["rew"] + batch["discount"] * (1 - batch["done"]) * q2

    @torch.no_grad()
    def projected(self, batch: Batch, probs2: torch.Tensor) -> torch.Tensor:
        """C51's target distribution: the next distribution ``probs2`` (batch, atoms) with its atoms moved
        to ``R + discount (1 - done) z`` and clipped to [v_min, v_max], projected onto the atoms: atom
        j gets ``sum_i probs2_i max(0, 1 - |Tz_i - z_j| / dz)`` (each moved atom split between its two
        neighbours in proportion to its nearness)."""
        assert self.support is not None
        algo = self.algo
        shift = batch["discount"] * (1 - batch["done"])
        tz = (batch["rew"][:, None] + shift[:, None] * self.support).clamp(algo.v_min, algo.v_max)
        dz = (algo.v_max - algo.v_min) / (algo.num_atoms - 1)
        weight = (1 - (tz[:, None, :] - self.support[None, :, None]).abs() / dz).clamp(min=0)
        return (weight * probs2[:, None, :]).sum(-1)

    def c51_losses(
        self, batch: Batch, noise: torch.Tensor | None, noise_targ: torch.Tensor | None, nets: tuple[Net, Net]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(C51's cross-entropy per transition, the Q-value of each taken action)."""
        rows = torch.arange(batch["act"].shape[0], device=self.device)
        log_p = nets[0](batch["obs"], noise)[rows, batch["act"]].log_softmax(-1)
        target = self.projected(batch, self.next_outputs(batch, noise, noise_targ, nets).softmax(-1))
        q = (log_p.detach().exp() * self.support).sum(-1)
        return -(target * log_p).sum(-1), q

    def qr_losses(
        self, batch: Batch, noise: torch.Tensor | None, noise_targ: torch.Tensor | None, nets: tuple[Net, Net]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(QR-DQN's quantile Huber loss per transition, the Q-value of each taken action)."""
        rows = torch.arange(batch["act"].shape[0], device=self.device)
        quantiles = nets[0](batch["obs"], noise)[rows, batch["act"]]
        target = self.targets(batch, noise, noise_targ, nets)
        return quantile_huber_loss(quantiles, target, sum_over_quantiles=True, per_row=True), quantiles.mean(
            -1
        )

    def errors(
        self, batch: Batch, noise: torch.Tensor | None, noise_targ: torch.Tensor | None, nets: tuple[Net, Net]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(each transition's loss, the Q-value of its action, its priority before ``per_eps``) for the
        online and the target network ``nets``: the Huber or squared TD error (priority ``|td|``), or the
        distributional head's loss (priority the loss)."""
        algo = self.algo
        if algo.distributional is not None:
            losses = self.c51_losses if algo.distributional == "c51" else self.qr_losses
            errors, q = losses(batch, noise, noise_targ, nets)
            return errors, q, errors.detach()
        q = nets[0](batch["obs"], noise).gather(1, batch["act"][:, None]).squeeze(1)
        backup = self.targets(batch, noise, noise_targ, nets)
        td = q - backup
        if algo.loss == "huber":
            errors = torch.nn.functional.smooth_l1_loss(q, backup, reduction="none", beta=1.0)
        else:
            errors = td**2
        return errors, q, td.detach().abs()

    def mean_loss(
        self, batch: Batch, errors: torch.Tensor, q: torch.Tensor, priority: torch.Tensor
    ) -> tuple[torch.Tensor, Stats]:
        """The minibatch's loss from :meth:`errors`' three (importance-weighted under prioritized replay)
        and the step's statistics: QVals, and the sampled transitions' new priorities (``Priority``)."""
        stats: Stats = {"QVals": q}
        if "weights" not in batch:
            return errors.mean(), stats
        stats["Priority"] = priority + self.algo.per_eps
        return (errors * batch["weights"]).mean(), stats

    def flat_loss(
        self, groups: dict[str, torch.Tensor], batch: Batch, before: Stats
    ) -> tuple[torch.Tensor, Stats]:
        """The compiled step's loss as a function of the online and the target network's flat parameters
        (``groups["q"]``, ``groups["q_targ"]``); ``batch`` carries the noise draws."""
        (q,), (q_targ,) = self.layout(groups["q"]), self.layout(groups["q_targ"])
        errors, qv, priority = self.errors(batch, batch.get("noise"), batch.get("noise_targ"), (q, q_targ))
        return self.mean_loss(batch, errors, qv.detach(), priority)

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        algo = self.algo
        batch = self.with_draws(batch, policy_step)
        if self.compiles:
            return self.compiled_update(batch, policy_step)
        noise, noise_targ = batch.get("noise"), batch.get("noise_targ")
        loss, stats = self.mean_loss(batch, *self.errors(batch, noise, noise_targ, (self.q, self.q_targ)))
        self.q_flat.grad.zero_()  # the layers' gradients are views of it (flatten_)
        loss.backward()
        avg_grads([self.q_flat])
        if algo.max_grad_norm is not None:
            clip_flat_grad_(self.q_flat, algo.max_grad_norm)
        self.optimizer.step()
        return {"LossQ": loss, **stats}
