"""PPO-clip in PyTorch (Spinning Up's ppo_pytorch update, with the KL averaged over ranks).

Per epoch: up to ``train_pi_iters`` full-batch Adam steps on the clipped surrogate
``-mean(min(r*A, clip(r, 1-eps, 1+eps)*A))`` with ``r = pi(a|s) / pi_old(a|s)``, stopping early when
the rank-averaged approximate KL exceeds ``1.5 * target_kl``; then ``train_v_iters`` value steps.
The KL is averaged in the same allreduce as the gradients (one collective per policy step); the
step is taken only when that KL is within bounds, so the parameters follow Spinning Up's schedule.

With ``num_minibatches > 0`` (SB3's and CleanRL's schedule) the update instead makes
``update_epochs`` passes over the epoch's data, each in ``num_minibatches`` shuffled minibatches per
rank; each minibatch takes one step of both optimizers on the joint loss
``surrogate - ent_coef * entropy + vf_coef * value loss``, its gradient averaged over ranks (with the
KL) and clipped to ``max_grad_norm``. The shuffles come from a numpy generator (the ``learner``
stream), so both backends draw the same minibatches.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch.distributions import Distribution

from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.ppo.schedule import annealed, minibatch_indices
from rlexp.algos.vpg.torch import VPGLearner
from rlexp.comm.torch import avg_grads
from rlexp.nn import Sequences
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class PPOLearner(VPGLearner):
    """PPO-clip update; see ``conf/algo/ppo.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.shuffle_rng = seeds.generator("learner")  # minibatch order (checkpointed)
        self.params = [*self.ac.pi.parameters(), *self.ac.v.parameters()]
        self.clip_eps = self.algo.clip_ratio  # this epoch's clip range (annealed with anneal_clip)

    def start_epoch(self, epoch: int) -> None:
        """With ``anneal_lr``: both learning rates at ``1 - epoch / epochs`` of their value; with
        ``anneal_clip``: the clip range likewise."""
        if self.algo.anneal_lr:
            for opt, lr in ((self.pi_optimizer, self.algo.pi_lr), (self.vf_optimizer, self.algo.vf_lr)):
                opt.param_groups[0]["lr"] = annealed(lr, epoch, self.algo.epochs)
        if self.algo.anneal_clip:
            self.clip_eps = annealed(self.algo.clip_ratio, epoch, self.algo.epochs)

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "shuffle_rng": self.shuffle_rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        if "shuffle_rng" in state:  # checkpoints from before minibatches had none (and needed none)
            self.shuffle_rng.bit_generator.state = state["shuffle_rng"]

    def surrogate(self, batch: Batch) -> tuple[Distribution, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(pi, clipped surrogate loss minus the entropy bonus, probability ratio r, approximate KL to
        the batch's policy)."""
        eps = self.clip_eps
        pi, logp = self.ac.pi(batch["obs"], batch["act"])
        ratio = torch.exp(logp - batch["logp"])
        adv = batch["adv"]
        loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv).mean()
        if self.algo.ent_coef:
            entropy = pi.entropy()  # per action dimension for a Gaussian: the bonus takes their sum
            loss = loss - self.algo.ent_coef * (entropy.sum(-1) if entropy.dim() > 1 else entropy).mean()
        with torch.no_grad():
            kl = (batch["logp"] - logp).mean()
        return pi, loss, ratio, kl

    def minibatch(self, batch: Batch, idx: np.ndarray) -> Batch:
        """The rows ``idx`` of ``batch`` (recurrent networks: the sequences ``idx`` and their rows),
        advantages normalised within them when ``adv_norm=minibatch`` (by the unbiased std, as SB3 and
        CleanRL; a one-row minibatch is left as it is)."""
        seqs = batch["obs"]
        if isinstance(seqs, Sequences):
            sub, rows = seqs.select(idx, lambda x, i: x[torch.as_tensor(i, device=x.device)])
            at = torch.as_tensor(rows, device=self.device)
            mb = {k: sub if k == "obs" else v[at] for k, v in batch.items()}
        else:
            at = torch.as_tensor(idx, device=self.device)
            mb = {k: v[at] for k, v in batch.items()}
        if self.algo.adv_norm == "minibatch" and len(mb["adv"]) > 1:
            adv = mb["adv"]
            mb["adv"] = (adv - adv.mean()) / (adv.std() + 1e-8)
        return mb

    def loss_pi(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Clipped surrogate loss and its diagnostics: approx KL, entropy, fraction clipped."""
        eps = self.clip_eps
        pi, loss, ratio, kl = self.surrogate(batch)
        with torch.no_grad():
            info = {
                "kl": kl.item(),
                "ent": pi.entropy().mean().item(),
                "cf": ((ratio > 1 + eps) | (ratio < 1 - eps)).float().mean().item(),
            }
        return loss, info

    def update_networks(self, batch: Batch) -> Stats:
        """One PPO epoch update. Loss, KL and clip fraction are evaluated before and after it.

        Spinning Up logged KL/ClipFrac of the last iteration *before* its step; here they describe
        the policy actually reached, as does DeltaLossPi.
        """
        params = list(self.ac.pi.parameters())
        with torch.no_grad():
            loss_old, info_old = self.loss_pi(batch)
        if self.algo.minibatched:
            return self.update_minibatches(batch, loss_old, info_old)
        target_kl = self.algo.target_kl
        stop_iter = self.algo.train_pi_iters - 1
        for i in range(self.algo.train_pi_iters):
            self.pi_optimizer.zero_grad()
            _, loss, _, kl = self.surrogate(batch)
            loss.backward()
            (kl_avg,) = avg_grads(params, [kl.item()])  # gradients and KL in one allreduce
            if target_kl is not None and kl_avg > 1.5 * target_kl:  # the KL before this step: do not take it
                stop_iter = i
                break
            self.clip_grads(params)
            self.pi_optimizer.step()
        return self.epoch_stats(batch, loss_old, info_old, StopIter=stop_iter)

    def update_minibatches(self, batch: Batch, loss_old: torch.Tensor, info_old: dict[str, float]) -> Stats:
        """``update_epochs`` shuffled passes of ``num_minibatches`` joint steps (see the module's docstring).

        Logged: the policy loss (entropy bonus included) and value loss of the whole batch before and
        after, the entropy before, the KL and clip fraction after, and StopIter, the number of the
        last minibatch step taken (counted over all passes).
        """
        algo = self.algo
        with torch.no_grad():
            v_old = self.loss_v(batch).item()
        step, stop = 0, False
        seqs = batch["obs"]  # recurrent networks: minibatches of whole sequences
        n = seqs.num_sequences() if isinstance(seqs, Sequences) else len(batch["adv"])
        for idx in minibatch_indices(n, algo, self.shuffle_rng):
            mb = self.minibatch(batch, idx)
            for opt in (self.pi_optimizer, self.vf_optimizer):
                opt.zero_grad()
            _, loss_pi, _, kl = self.surrogate(mb)
            loss = loss_pi + algo.vf_coef * self.loss_v(mb)
            loss.backward()
            (kl_avg,) = avg_grads(self.params, [kl.item()])
            if algo.target_kl is not None and kl_avg > 1.5 * algo.target_kl:
                stop = True
                break
            self.clip_grads(self.params)
            self.pi_optimizer.step()
            self.vf_optimizer.step()
            step += 1
        with torch.no_grad():
            loss_new, info_new = self.loss_pi(batch)
            v_new = self.loss_v(batch).item()
        return on_policy_stats(
            (loss_old.item(), loss_new.item()),
            (v_old, v_new),
            Entropy=info_old["ent"],
            KL=info_new["kl"],
            ClipFrac=info_new["cf"],
            StopIter=step if stop else step - 1,
        )
