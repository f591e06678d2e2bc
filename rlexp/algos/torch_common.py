"""What every PyTorch learner shares: threads and device set-up, the on-policy actor-critic base."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp import comm
from rlexp.checkpoint import load_torch, save_torch
from rlexp.comm.torch import avg_grads, sync_params
from rlexp.config import BackendConfig, RLExpConfig
from rlexp.nn.torch import ActorCritic


def setup_torch(cfg: BackendConfig, procs: int) -> torch.device:
    """Set torch's thread count and return the device named by ``cfg.device``."""
    n = cfg.threads_per_rank(procs)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    torch.distributions.Distribution.set_default_validate_args(False)  # argument checks cost ~30% per step
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


class OnPolicyTorchLearner:
    """Actor-critic, value-function training and checkpoints for VPG, TRPO and PPO in PyTorch.

    Subclasses implement ``update(batch) -> stats`` with their policy step, calling
    :meth:`update_v` for the value function.

    :param obs_space: flattened observation space (Box).
    :param act_space: Box or Discrete action space.
    :param cfg: the whole experiment config (algo, network and backend keys are used).
    :param seed: this rank's seed; parameters are then copied from rank 0 so all ranks start equal.
    """

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        self.cfg, self.algo = cfg, cfg.algo
        self.device = setup_torch(cfg.backend, comm.num_procs())
        torch.manual_seed(seed)
        self.discrete = isinstance(act_space, spaces.Discrete)
        obs_dim = int(np.prod(obs_space.shape))
        self.ac = ActorCritic(obs_dim, act_space, cfg.network.hidden_sizes, cfg.network.activation).to(
            self.device
        )
        sync_params(self.ac.parameters())
        self.vf_optimizer = torch.optim.Adam(self.ac.v.parameters(), lr=self.algo.vf_lr)

    # --- acting -------------------------------------------------------------------------------
    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    def step(self, obs: np.ndarray) -> tuple[np.ndarray, float, float]:
        """Sample an action for one observation; return (action, V(obs), log-prob of the action)."""
        a, v, logp = self.ac.step(self._obs(obs))
        return a.cpu().numpy(), v.item(), logp.item()

    def value(self, obs: np.ndarray) -> float:
        """V(obs) for one observation (the bootstrap value of a cut path)."""
        with torch.no_grad():
            return self.ac.v(self._obs(obs)).item()

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """An action for one observation (for evaluation)."""
        return self.ac.act(self._obs(obs), deterministic).cpu().numpy()

    # --- learning -----------------------------------------------------------------------------
    def tensors(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        """The epoch's numpy arrays as tensors on the device (actions as int64 for Discrete)."""
        out = {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}
        out["act"] = out["act"].long() if self.discrete else out["act"].float()
        return out

    def loss_v(self, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean squared error of V(s) against the rewards-to-go."""
        return ((self.ac.v(data["obs"]) - data["ret"]) ** 2).mean()

    def update_v(self, data: dict[str, torch.Tensor]) -> tuple[float, float]:
        """``train_v_iters`` full-batch Adam steps on the value loss; return (loss before, loss after)."""
        params = list(self.ac.v.parameters())
        with torch.no_grad():
            before = self.loss_v(data).item()
        for _ in range(self.algo.train_v_iters):
            self.vf_optimizer.zero_grad(set_to_none=False)
            self.loss_v(data).backward()
            avg_grads(params)
            self.vf_optimizer.step()
        with torch.no_grad():
            after = self.loss_v(data).item()
        return before, after

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, float]:
        raise NotImplementedError

    # --- state --------------------------------------------------------------------------------
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer of the learner by name (subclasses add theirs)."""
        return {"vf": self.vf_optimizer}

    def state_dict(self) -> dict[str, Any]:
        """Networks, optimizer states and torch's RNG state."""
        return {
            "model": self.ac.state_dict(),
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
            "torch_rng": torch.get_rng_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ac.load_state_dict(state["model"])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        torch.set_rng_state(state["torch_rng"])

    def save(self, path: str | os.PathLike, extra: dict[str, Any]) -> None:
        """Write this learner's state plus the loop's ``extra`` state (counters, RNGs) to ``path``."""
        save_torch(
            path,
            {
                "format": 1,
                "algo": self.algo.name,
                "backend": "torch",
                "learner": self.state_dict(),
                "extra": extra,
            },
        )

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore from ``path``; return the loop's extra state."""
        ckpt = load_torch(path, map_location=self.device)
        self.load_state_dict(ckpt["learner"])
        return ckpt["extra"]
