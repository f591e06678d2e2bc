"""Observation and reward normalisation (``env.normalize_obs``, ``env.normalize_reward``), pooled over MPI ranks.

What Stable-Baselines3's VecNormalize and CleanRL's NormalizeObservation/NormalizeReward wrappers do,
kept outside the env so that it fits rlexp's contracts:

- **The same numbers on every rank.** Each env step every rank contributes the observation its policy
  sees next (and its running return); the ranks gather them (one small allgather per step; none with
  one rank) and every rank folds the same values, in rank order, into the same running mean and
  variance. All ranks therefore normalise with identical statistics at every step, as a VecNormalize
  over ``procs`` envs would.
- **Checkpointed.** The statistics (and each env's running discounted return) are part of the
  learner's state: every checkpoint and the best checkpoint hold them, a resumed run continues with
  them (exact resume), and test episodes, test_policy and :meth:`rlexp.api.Policy.act` use them
  frozen (:meth:`Normalizer.frozen_obs`).
- **Raw returns are logged.** Only what the learner sees is normalised; EpRet and TestEpRet stay the
  env's own returns.

Observations: ``clip((o - mean) / sqrt(var + eps), -clip_obs, clip_obs)``, the statistics updated with
every observation the policy acts on (the first one of each episode included, the terminal one not:
VecNormalize's choice). Rewards: ``clip(r / sqrt(var_R + eps), -clip_reward, clip_reward)`` where
``var_R`` is the running variance of the discounted return ``R <- gamma * R + r`` (reset to 0 when an
episode ends); rewards are scaled, never shifted. The off-policy loop stores raw rewards and scales a
sampled batch's (:func:`rlexp.algos.off_policy.normalized`): with n-step returns (DQN's ``algo.n_step``)
the stored reward is the discounted sum of up to n rewards, so it is that sum that is scaled and
clipped to ``clip_reward``, not each reward in it (the scale is the same either way; only the clip,
rarely reached, differs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import rlexp.comm as comm

EPSILON = 1e-8  # added to the variance before the square root (SB3's and gymnasium's value)


class RunningMeanStd:
    """Running mean and variance of arrays of ``shape``, merged batch by batch (Chan et al.'s parallel
    algorithm, as in SB3 and gymnasium). Starts at mean 0, variance 1, a pseudo-count of ``1e-4``.

    :param shape: shape of one sample (() for a scalar such as the running return).
    :param what: what the statistics describe, for messages ("observation", "reward").
    """

    def __init__(self, shape: tuple[int, ...], what: str = "observation") -> None:
        self.mean = np.zeros(shape, np.float64)
        self.var = np.ones(shape, np.float64)
        self.count = 1e-4
        self.what = what

    def update(self, batch: np.ndarray) -> None:
        """Fold ``batch`` (shape (n, *shape)) into the statistics."""
        batch = np.asarray(batch, np.float64)
        b_mean, b_var, b_count = batch.mean(axis=0), batch.var(axis=0), batch.shape[0]
        delta = b_mean - self.mean
        total = self.count + b_count
        # asarray: a 0-d statistic stays an array (numpy's scalar arithmetic would make it a float)
        self.mean = np.asarray(self.mean + delta * b_count / total)
        m2 = self.var * self.count + b_var * b_count + delta**2 * self.count * b_count / total
        self.var = np.asarray(m2 / total)
        self.count = total

    def state_dict(self) -> dict[str, Any]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": float(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s statistics. ValueError (naming these statistics and both shapes)
        when they do not fit ``shape`` or are not finite, or an entry is missing."""
        shape, what = self.mean.shape, f"{self.what} normalisation statistics"
        missing = [k for k in ("mean", "var", "count") if k not in state]
        if missing:
            raise ValueError(f"the {what} lack {', '.join(missing)}")
        mean, var = np.asarray(state["mean"], np.float64), np.asarray(state["var"], np.float64)
        count = np.asarray(state["count"], np.float64)
        if shape == () and mean.shape == var.shape == (1,):
            # rlexp's torch checkpoints before issue 34 stored the 0-d statistics of a normalisation
            # that was off (the reward's, with observations normalised alone) with shape (1,)
            mean, var = mean.reshape(()), var.reshape(())
        for name, value in (("mean", mean), ("variance", var)):
            if value.shape != shape:
                fits = "one number" if shape == () else f"shape {shape}"
                raise ValueError(f"the {what} ({name} of shape {value.shape}) do not fit {fits}")
        if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
            raise ValueError(f"the {what} hold values that are not finite or a negative variance")
        if count.shape != () or not (np.isfinite(count) and count > 0):
            raise ValueError(f"the {what} have a count of {state['count']!r}; it must be one number > 0")
        self.mean, self.var, self.count = mean, var, float(count)


class Normalizer:
    """This rank's observation and reward normalisation (both optional), with statistics pooled over ranks.

    :param obs_shape: shape of one observation as the env (after ``env.wrappers``) returns it.
    :param normalize_obs: normalise observations (else :meth:`obs` returns them as float32, unchanged).
    :param normalize_reward: scale rewards by the running std of the discounted return.
    :param clip_obs: bound of the normalised observations (+-).
    :param clip_reward: bound of the scaled rewards (+-).
    :param gamma: discount of the running return whose variance scales the rewards (``env.norm_gamma``,
        by default the algorithm's ``gamma``).
    :param sign_reward: learn from the sign of each reward (``env.sign_reward``), before any scaling.
    """

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        normalize_obs: bool,
        normalize_reward: bool,
        clip_obs: float,
        clip_reward: float,
        gamma: float,
        sign_reward: bool = False,
    ) -> None:
        self.normalize_obs, self.normalize_reward, self.sign_reward = (
            normalize_obs,
            normalize_reward,
            sign_reward,
        )
        self.clip_obs, self.clip_reward, self.gamma = clip_obs, clip_reward, gamma
        self.obs_rms = RunningMeanStd(obs_shape, "observation")
        self.ret_rms = RunningMeanStd((), "reward")
        #: this rank's running discounted return of each env's episode in progress (a float with one env)
        self.ret: Any = 0.0

    @property
    def enabled(self) -> bool:
        return self.normalize_obs or self.normalize_reward

    def frozen_obs(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` normalised with the current statistics, which stay as they are (test episodes,
        test_policy, bootstrap values of terminal observations). A rank-local call."""
        if not self.normalize_obs:
            return obs
        out = (np.asarray(obs, np.float64) - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + EPSILON)
        return np.clip(out, -self.clip_obs, self.clip_obs).astype(np.float32)

    def obs(self, obs: np.ndarray) -> np.ndarray:
        """Fold every rank's ``obs`` (the observations its policy acts on next: one, or one row per env
        of a vector env) into the statistics, then return this rank's normalised. A collective when
        observations are normalised: every rank calls it once per env step."""
        if not self.normalize_obs:
            return obs
        shape = self.obs_rms.mean.shape
        self.obs_rms.update(comm.allgather(np.asarray(obs, np.float64)).reshape(-1, *shape))
        return self.frozen_obs(obs)

    def train_reward(self, reward: Any) -> Any:
        """The reward the learner learns from, before any scaling: its sign with ``sign_reward``."""
        return np.sign(reward) if self.sign_reward else reward

    def reward(self, reward: Any, episode_ended: Any) -> Any:
        """Update the running returns with ``reward`` (every rank's, pooled; its sign with
        ``sign_reward``) and return the scaled rewards; ``episode_ended``: the step ended the episode
        (its running return restarts at 0). One env's float and bool, or one entry per env of a vector
        env. A collective when rewards are normalised: every rank calls it once per env step."""
        if self.sign_reward:
            reward = np.sign(reward)
        if not self.normalize_reward:
            return reward
        self.ret = self.ret * self.gamma + np.asarray(reward, np.float64)
        self.ret_rms.update(comm.allgather(np.asarray(self.ret, np.float64)).reshape(-1))
        scaled = np.clip(reward / np.sqrt(self.ret_rms.var + EPSILON), -self.clip_reward, self.clip_reward)
        if np.ndim(reward) == 0:
            self.ret = 0.0 if episode_ended else float(self.ret)
            return float(scaled)
        self.ret = np.where(episode_ended, 0.0, self.ret)
        return scaled

    def scale_rewards(self, rewards: np.ndarray) -> np.ndarray:
        """Rewards scaled with the current statistics, which stay as they are (sampled replay batches)."""
        if not self.normalize_reward:
            return rewards
        scaled = rewards / np.sqrt(self.ret_rms.var + EPSILON)
        return np.clip(scaled, -self.clip_reward, self.clip_reward).astype(np.float32)

    def state_dict(self) -> dict[str, Any]:
        """The statistics and this rank's running return (for checkpoints)."""
        return {
            "obs": self.obs_rms.state_dict(),
            "ret": self.ret_rms.state_dict(),
            "running_return": self.ret,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s statistics and running return. ValueError naming the statistics
        that do not fit (or are missing)."""
        for key, rms in (("obs", self.obs_rms), ("ret", self.ret_rms)):
            if not isinstance(state.get(key), dict):
                raise ValueError(f"the checkpoint has no {rms.what} normalisation statistics")
            rms.load_state_dict(state[key])
        if "running_return" not in state:
            raise ValueError("the checkpoint has no running return of the reward normalisation")
        ret = np.asarray(state["running_return"], np.float64)
        if ret.ndim > 1 or not np.isfinite(ret).all():
            raise ValueError(
                f"the running return of the reward normalisation (shape {ret.shape}) is not one finite "
                "number per env"
            )
        self.ret = float(ret) if ret.ndim == 0 else ret
