"""Experience buffers in numpy, shared by every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.signal

import rlexp.comm as comm


def discount_cumsum(x: np.ndarray, discount: float) -> np.ndarray:
    """``y[t] = sum_k discount**k * x[t+k]`` along axis 0 (a reversed IIR filter, as in rllab)."""
    return scipy.signal.lfilter([1], [1, -discount], x[::-1], axis=0)[::-1]


class GAEBuffer:
    """One epoch of on-policy experience of this rank's envs, with GAE-lambda advantages.

    Each env's steps are stored in its own column, its paths back to back; ``finish_path(last_val,
    env)`` closes that env's current path, bootstrapping with ``last_val`` = V(s_T) when the path was
    cut (time limit or end of epoch) and 0 when the episode really terminated. ``get()`` returns the
    full epoch, env after env (each env's steps in time order), with advantages normalised by their
    mean and std pooled over all ranks.

    :param obs_dim: length of the (flattened) observation vector, or the shape of one observation
        (images: :func:`rlexp.envs.obs_dtype` stores them as uint8).
    :param act_shape: shape of one action: () for Discrete, (n,) for Box.
    :param act_dtype: numpy dtype of one action.
    :param size: steps each env collects per epoch.
    :param gamma: discount factor for rewards-to-go and the TD residuals.
    :param lam: GAE lambda.
    :param obs_dtype: numpy dtype the observations are stored in.
    :param normalize_adv: normalise the epoch's advantages (pooled over ranks) in ``get()``; False
        leaves them raw (PPO normalises per minibatch, or not at all: ``algo.adv_norm``).
    :param num_envs: envs stepped together (``env.num_envs``); :meth:`store` takes one row per env.
    :param value_target: what ``ret`` (the value function's target) holds: ``rewards_to_go``, the
        discounted return from each step (Spinning Up), or ``lambda_return``, the step's GAE advantage
        plus its value at collection time (SB3 and CleanRL; computed before advantages are normalised).
    """

    def __init__(
        self,
        obs_dim: int | tuple[int, ...],
        act_shape: tuple[int, ...],
        act_dtype: Any,
        size: int,
        gamma: float,
        lam: float,
        obs_dtype: Any = np.float32,
        normalize_adv: bool = True,
        num_envs: int = 1,
        value_target: str = "rewards_to_go",
    ) -> None:
        n = num_envs
        self.obs = np.zeros((size, n, *np.atleast_1d(obs_dim)), dtype=obs_dtype)
        self.act = np.zeros((size, n, *act_shape), dtype=act_dtype)
        self.rew = np.zeros((size, n), dtype=np.float32)
        self.val = np.zeros((size, n), dtype=np.float32)
        self.logp = np.zeros((size, n), dtype=np.float32)
        self.adv = np.zeros((size, n), dtype=np.float32)
        self.ret = np.zeros((size, n), dtype=np.float32)
        self.gamma, self.lam, self.normalize_adv = gamma, lam, normalize_adv
        self.lambda_return = value_target == "lambda_return"
        self.ptr, self.size, self.num_envs = 0, size, n
        self.path_start = np.zeros(n, np.int64)

    def store(self, obs: np.ndarray, act: Any, rew: Any, val: Any, logp: Any) -> None:
        """Append one step of every env (one row per env; with one env, that env's values alone)."""
        assert self.ptr < self.size, "GAEBuffer is full"
        i = self.ptr
        self.obs[i], self.act[i], self.rew[i], self.val[i], self.logp[i] = obs, act, rew, val, logp
        self.ptr += 1

    def finish_path(self, last_val: float = 0.0, env: int = 0) -> None:
        """Compute advantages and value targets of ``env``'s path since its last call."""
        path = slice(int(self.path_start[env]), self.ptr)
        rews = np.append(self.rew[path, env], last_val)
        vals = np.append(self.val[path, env], last_val)
        deltas = rews[:-1] + self.gamma * vals[1:] - vals[:-1]
        self.adv[path, env] = discount_cumsum(deltas, self.gamma * self.lam)
        if self.lambda_return:
            self.ret[path, env] = self.adv[path, env] + self.val[path, env]
        else:
            self.ret[path, env] = discount_cumsum(rews, self.gamma)[:-1]
        self.path_start[env] = self.ptr

    def get(self) -> dict[str, np.ndarray]:
        """The full epoch (obs, act, ret, adv, logp, val), env after env, advantages normalised unless
        ``normalize_adv`` is off; empties the buffer."""
        assert self.ptr == self.size, "GAEBuffer.get() before the epoch was full"
        assert (self.path_start == self.ptr).all(), "GAEBuffer.get() with an unfinished path"
        self.ptr = 0
        self.path_start[:] = 0

        def flat(x: np.ndarray) -> np.ndarray:  # (steps, envs, ...) -> (envs x steps, ...), env-major
            return np.ascontiguousarray(x.swapaxes(0, 1)).reshape(-1, *x.shape[2:])

        adv = flat(self.adv)
        if self.normalize_adv:
            mean, std = comm.statistics_scalar(adv)
            adv = (adv - mean) / (std + 1e-8)
        return dict(
            obs=flat(self.obs),
            act=flat(self.act),
            ret=flat(self.ret),
            adv=adv.astype(np.float32),
            logp=flat(self.logp),
            val=flat(self.val),
        )


class ReplayBuffer:
    """FIFO ring of transitions (obs, act, rew, obs2, done) in float32 numpy arrays (image
    observations in uint8, in their shape: a quarter of the memory).

    ``done`` is 1 only when the episode terminated; a time-limit truncation is stored as 0 so the
    target still bootstraps from obs2.

    :param obs_dim: observation length, or the shape of one observation (images).
    :param act_dim: action length.
    :param size: capacity in transitions (of this rank).
    :param obs_dtype: numpy dtype the observations are stored in (:func:`rlexp.envs.obs_dtype`).
    """

    KEYS = ("obs", "obs2", "act", "rew", "done")

    def __init__(
        self, obs_dim: int | tuple[int, ...], act_dim: int, size: int, obs_dtype: Any = np.float32
    ) -> None:
        obs_shape = (size, *np.atleast_1d(obs_dim))
        self.obs = np.zeros(obs_shape, dtype=obs_dtype)
        self.obs2 = np.zeros(obs_shape, dtype=obs_dtype)
        self.act = np.zeros((size, act_dim), dtype=np.float32)
        self.rew = np.zeros(size, dtype=np.float32)
        self.done = np.zeros(size, dtype=np.float32)
        self.ptr, self.size, self.max_size = 0, 0, size

    def store(self, obs: np.ndarray, act: np.ndarray, rew: float, obs2: np.ndarray, done: bool) -> None:
        i = self.ptr
        self.obs[i], self.act[i], self.rew[i], self.obs2[i], self.done[i] = obs, act, rew, obs2, done
        self.ptr = (self.ptr + 1) % self.max_size
        self.size = min(self.size + 1, self.max_size)

    def sample_batch(self, batch_size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement."""
        idx = rng.integers(0, self.size, size=batch_size)
        return {k: getattr(self, k)[idx] for k in self.KEYS}

    def state_dict(self) -> dict[str, Any]:
        """The filled part and the write position (for checkpoints)."""
        return {"ptr": self.ptr, "size": self.size, **{k: getattr(self, k)[: self.size] for k in self.KEYS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state["size"])
        if n > self.max_size:
            raise ValueError(
                f"checkpoint replay buffer holds {n} transitions, more than its capacity {self.max_size}"
            )
        for k in self.KEYS:
            getattr(self, k)[:n] = np.asarray(state[k])
        self.ptr, self.size = int(state["ptr"]), n
