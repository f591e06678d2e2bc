"""What the PyTorch learners share: threads and device set-up, state and checkpoints, and the
on-policy (actor-critic + value function) and off-policy (targets, polyak, exploration) bases.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from gymnasium import spaces

from rlexp import comm
from rlexp.checkpoint import check_meta, checkpoint_meta, load_torch, save_torch
from rlexp.comm.torch import avg_grads, sync_params
from rlexp.config import BackendConfig, RLExpConfig
from rlexp.errors import RLExpError
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


class TorchLearner:
    """Base of every PyTorch learner: device, seeding, state dict and checkpoint files.

    Subclasses list their networks in :meth:`modules` and their optimizers in :meth:`optimizers`;
    anything else they must carry across a checkpoint goes in :meth:`extra_state`.

    :param obs_space: flattened observation space (Box).
    :param act_space: the env's action space.
    :param cfg: the whole experiment config (algo, network and backend keys are used).
    :param seed: this rank's seed; parameters are then copied from rank 0 so all ranks start equal.
    """

    CHECKPOINT_SUFFIX = ".pt"

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        self.cfg, self.algo = cfg, cfg.algo
        self.device = setup_torch(cfg.backend, comm.num_procs())
        torch.manual_seed(seed)
        self.obs_dim = int(np.prod(obs_space.shape))

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    def modules(self) -> dict[str, torch.nn.Module]:
        raise NotImplementedError

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    @staticmethod
    def sync(*modules: torch.nn.Module) -> None:
        """Copy rank 0's parameters of ``modules`` to all ranks (before targets are copied from them)."""
        sync_params(p for m in modules for p in m.parameters())

    def state_dict(self) -> dict[str, Any]:
        """Networks (targets included), optimizer states, torch's RNG state and the subclass extras."""
        return {
            "modules": {k: m.state_dict() for k, m in self.modules().items()},
            "optimizers": {k: o.state_dict() for k, o in self.optimizers().items()},
            "torch_rng": torch.get_rng_state(),
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, m in self.modules().items():
            m.load_state_dict(state["modules"][k])
        for k, o in self.optimizers().items():
            o.load_state_dict(state["optimizers"][k])
        torch.set_rng_state(state["torch_rng"])
        self.load_extra_state(state["extra"])

    def save(self, path: str | os.PathLike, loop_state: dict[str, Any]) -> None:
        """Write this learner's state plus the loop's state (counters, RNGs, buffers) to ``path``."""
        save_torch(
            path,
            {"format": 1, **checkpoint_meta(self.cfg), "learner": self.state_dict(), "loop": loop_state},
        )

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore from ``path``; return the loop's state. A checkpoint of another run is an RLExpError."""
        ckpt = load_torch(path, map_location=self.device)
        check_meta(ckpt, self.cfg, path)
        try:
            self.load_state_dict(ckpt["learner"])
        except (KeyError, RuntimeError, ValueError) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RLExpError(f"checkpoint {path} does not fit this run's learner ({msg})") from None
        return ckpt["loop"]


class OnPolicyTorchLearner(TorchLearner):
    """Actor-critic and value-function training for VPG, TRPO and PPO in PyTorch.

    Subclasses implement ``update(batch) -> stats`` with their policy step, calling
    :meth:`update_v` for the value function.
    """

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.discrete = isinstance(act_space, spaces.Discrete)
        net = cfg.network
        self.ac = ActorCritic(self.obs_dim, act_space, net.hidden_sizes, net.activation).to(self.device)
        self.sync(self.ac)
        self.vf_optimizer = torch.optim.Adam(self.ac.v.parameters(), lr=self.algo.vf_lr)

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"ac": self.ac}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"vf": self.vf_optimizer}

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

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        raise NotImplementedError


class OffPolicyTorchLearner(TorchLearner):
    """Shared machinery of DDPG, TD3 and SAC in PyTorch.

    Actions inside the learner live in [-1, 1]^n; the loop maps them to the env's real bounds.
    Subclasses build their networks, :meth:`sync` them, copy targets, make optimizers, and
    implement ``update(batch) -> stats``, ``act`` and ``explore``.
    """

    def __init__(self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seed: int) -> None:
        super().__init__(obs_space, act_space, cfg, seed)
        self.act_dim = int(np.prod(act_space.shape))
        self.rng = np.random.default_rng(seed)  # exploration noise
        self.n_updates = 0

    def net_kwargs(self) -> dict[str, Any]:
        net = self.cfg.network
        return {"hidden_sizes": net.hidden_sizes, "activation": net.activation}

    @staticmethod
    def target(module: torch.nn.Module) -> torch.nn.Module:
        """A frozen copy of ``module`` (a target network)."""
        targ = copy.deepcopy(module)
        for p in targ.parameters():
            p.requires_grad_(False)
        return targ

    @torch.no_grad()
    def polyak_update(self, pairs: Iterable[tuple[torch.nn.Module, torch.nn.Module]]) -> None:
        """targ <- polyak * targ + (1 - polyak) * main, for every (main, target) pair, in place."""
        mains, targs = [], []
        for main, targ in pairs:
            mains += list(main.parameters())
            targs += list(targ.parameters())
        torch._foreach_mul_(targs, self.algo.polyak)
        torch._foreach_add_(targs, mains, alpha=1 - self.algo.polyak)

    @staticmethod
    def frozen(params: list[torch.nn.Parameter], frozen: bool) -> None:
        """Switch gradients of ``params`` off (True) or on again (False)."""
        for p in params:
            p.requires_grad_(not frozen)

    def step_optimizer(
        self, opt: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor]
    ) -> None:
        """zero_grad, backward, average gradients over ranks, step."""
        opt.zero_grad(set_to_none=False)
        loss.backward()
        avg_grads(params)
        opt.step()

    def tensors(self, batch: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(v, device=self.device) for k, v in batch.items()}

    def extra_state(self) -> dict[str, Any]:
        return {"n_updates": self.n_updates, "np_rng": self.rng.bit_generator.state}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.n_updates = int(state["n_updates"])
        self.rng.bit_generator.state = state["np_rng"]

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        raise NotImplementedError

    def explore(self, obs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def update(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        raise NotImplementedError
