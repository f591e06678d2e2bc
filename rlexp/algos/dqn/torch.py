"""DQN in PyTorch.

Per gradient step: ``y = R + discount (1 - done) Q_targ(s', a')`` with ``a' = argmax Q_targ(s', .)``,
or ``argmax Q(s', .)`` with ``double_q``; one optimizer step (Adam or centred RMSProp) on the mean
Huber (delta 1) or squared error of ``Q(s, a) - y``, importance-weighted under prioritized replay,
its gradient averaged over ranks and clipped to a global norm of ``max_grad_norm``. The target network
follows at the loop's env steps (:meth:`rlexp.algos.dqn.base.DQNLearnerBase.advance`).
"""

from __future__ import annotations

import torch
from gymnasium import spaces

from rlexp.algos.dqn.base import DQNLearnerBase
from rlexp.algos.learner import Batch, Stats
from rlexp.algos.torch_common import OffPolicyTorchLearner, adam, rmsprop
from rlexp.comm.torch import avg_grads
from rlexp.nn.acting import MLPCopy, QActing
from rlexp.nn.torch import DiscreteQNetwork, TorchForward, linear_layers
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DQNLearner(DQNLearnerBase, OffPolicyTorchLearner):
    """DQN update; see ``conf/algo/dqn.yaml`` for the hyperparameters."""

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Discrete, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        algo, net = self.algo, cfg.network
        kw = {"hidden_sizes": net.hidden_sizes, "activation": net.activation, "image": self.image}
        with self.initialising():
            self.q = DiscreteQNetwork(self.obs_dim, self.n_actions, dueling=algo.dueling, **kw).to(
                self.device
            )
        self.sync(self.q)
        self.q_targ = self.target(self.q)
        self.q_flat, self.q_targ_flat = self.flat_group([self.q], [self.q_targ])
        if algo.optimizer == "rmsprop":
            self.optimizer: torch.optim.Optimizer = rmsprop(
                [self.q_flat], lr=algo.lr, alpha=algo.rms_alpha, eps=algo.optim_eps
            )
        else:
            self.optimizer = adam([self.q_flat], algo.lr, algo.optim_eps)
        q = self.q
        if self.image is not None:
            self.acting = QActing(TorchForward(q, self.device))
        elif not algo.dueling:
            self.acting = QActing(MLPCopy(lambda: linear_layers(q.q_net), net.activation))
        else:
            act = net.activation
            self.acting = QActing(
                trunk=MLPCopy(lambda: linear_layers(q.trunk), act, act),
                v=MLPCopy(lambda: linear_layers(q.v_net), act),
                a=MLPCopy(lambda: linear_layers(q.a_net), act),
            )

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

    @torch.no_grad()
    def targets(self, batch: Batch) -> torch.Tensor:
        """``R + discount (1 - done) Q_targ(s', a')``: ``a'`` the target network's greedy action, or with
        ``double_q`` the online network's."""
        q2_targ = self.q_targ(batch["obs2"])
        if self.algo.double_q:  # the online network chooses, the target network evaluates
            a2 = self.q(batch["obs2"]).argmax(-1)
            q2 = q2_targ.gather(1, a2[:, None]).squeeze(1)
        else:
            q2 = q2_targ.max(-1).values
        return batch["rew"] + batch["discount"] * (1 - batch["done"]) * q2

    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        algo = self.algo
        q = self.q(batch["obs"]).gather(1, batch["act"][:, None]).squeeze(1)
        backup = self.targets(batch)
        td = q - backup
        if algo.loss == "huber":
            errors = torch.nn.functional.smooth_l1_loss(q, backup, reduction="none", beta=1.0)
        else:
            errors = td**2
        loss = (errors * batch["weights"]).mean() if "weights" in batch else errors.mean()
        self.optimizer.zero_grad(set_to_none=False)
        loss.backward()
        avg_grads([self.q_flat])
        if algo.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_([self.q_flat], algo.max_grad_norm)
        self.optimizer.step()
        stats: Stats = {"LossQ": loss, "QVals": q}
        if "weights" in batch:  # prioritized replay: the sampled transitions' new priorities
            stats["Priority"] = td.detach().abs() + algo.per_eps
        return stats
