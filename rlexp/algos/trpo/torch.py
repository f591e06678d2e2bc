"""TRPO and natural policy gradient in PyTorch (Spinning Up had TRPO only in TF1).

Per epoch: the surrogate ``L = -mean(r * A)`` with ``r = pi(a|s) / pi_old(a|s)``, its gradient g,
and Fisher-vector products ``Hv`` from the Hessian of the mean KL(pi_old || pi) plus ``damping * v``
(both averaged over ranks). Conjugate gradient solves ``H x = g``; the full step is
``alpha * x`` with ``alpha = sqrt(2 delta / x^T H x)``. ``variant=trpo`` backtracks on
``backtrack_coeff**j`` until KL <= delta and L improved, else keeps the old parameters;
``variant=npg`` takes the full step. Then ``train_v_iters`` value steps.
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from torch.distributions import Categorical, Distribution, Normal, kl_divergence

import rlexp.comm as comm
from rlexp.algos.learner import Batch, Stats, on_policy_stats
from rlexp.algos.torch_common import OnPolicyTorchLearner
from rlexp.algos.trpo.natural_gradient import EPS, conjugate_gradient, line_search
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


def _detached(pi: Distribution) -> Distribution:
    if isinstance(pi, Categorical):
        return Categorical(logits=pi.logits.detach())
    return Normal(pi.mean.detach(), pi.stddev.detach())


class TRPOLearner(OnPolicyTorchLearner):
    """TRPO / NPG update; see ``conf/algo/trpo.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.params = list(self.ac.pi.parameters())

    def _flat_grad(self, y: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
        grads = torch.autograd.grad(y, self.params, create_graph=create_graph)
        return torch.cat([g.reshape(-1) for g in grads])

    def _mpi_avg(self, x: torch.Tensor) -> torch.Tensor:
        if comm.num_procs() == 1:
            return x
        return torch.as_tensor(comm.mpi_avg(x.detach().cpu().numpy()), dtype=x.dtype, device=x.device)

    def _kl(self, obs: torch.Tensor, old: Distribution) -> torch.Tensor:
        kl = kl_divergence(old, self.ac.pi.distribution(obs))
        return (kl if isinstance(old, Categorical) else kl.sum(-1)).mean()

    def _surrogate(self, batch: Batch) -> torch.Tensor:
        _, logp = self.ac.pi(batch["obs"], batch["act"])
        return -(torch.exp(logp - batch["logp"]) * batch["adv"]).mean()

    @torch.no_grad()
    def _set_flat(self, flat: torch.Tensor) -> None:
        """The policy's parameters set to ``flat``, in place: each keeps its own storage (not a view of
        ``flat``, as ``vector_to_parameters`` would make it), so a checkpoint loads into the same layout
        and the loaded policy computes bit for bit what the saved one did."""
        offset = 0
        for p in self.params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n

    def update_networks(self, batch: Batch) -> Stats:
        obs, algo = batch["obs"], self.algo
        with torch.no_grad():
            old = _detached(self.ac.pi.distribution(obs))
        loss_old = self._surrogate(batch)
        g = self._mpi_avg(self._flat_grad(loss_old))
        loss_old = comm.mpi_avg(loss_old.item())

        def hvp(v: torch.Tensor) -> torch.Tensor:
            # differentiated twice: not through cuDNN's recurrent kernels, which have no double backward
            with torch.backends.cudnn.flags(enabled=False):
                grad_kl = self._flat_grad(self._kl(obs, old), create_graph=True)
            return self._mpi_avg(self._flat_grad(grad_kl @ v)) + algo.damping_coeff * v

        x = conjugate_gradient(hvp, g, algo.cg_iters)
        alpha = torch.sqrt(2 * algo.delta / (x @ hvp(x) + EPS))
        old_params = torch.nn.utils.parameters_to_vector(self.params).detach().clone()

        def set_and_eval(step: float) -> tuple[float, float]:
            self._set_flat(old_params - step * alpha * x)
            with torch.no_grad():
                return comm.mpi_avg(self._kl(obs, old).item()), comm.mpi_avg(self._surrogate(batch).item())

        kl, loss_new, backtrack = line_search(
            set_and_eval, lambda: self._set_flat(old_params), loss_old, algo
        )
        stats = on_policy_stats((loss_old, loss_new), self.update_v(batch), KL=kl)
        return stats if algo.variant == "npg" else {**stats, "BacktrackIters": backtrack}
