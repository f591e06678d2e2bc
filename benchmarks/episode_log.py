"""A gymnasium wrapper for benchmarks: appends every finished episode's return and length to the CSV
file named by the RLEXP_EPISODE_LOG environment variable (CleanRL's protocol needs the last 100
training episodes, which progress.txt only summarises per epoch). Used as
``env.wrappers=['episode_log:EpisodeLog']`` with ``benchmarks/`` on PYTHONPATH."""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym


class EpisodeLog(gym.Wrapper):
    """Records (return, length) of each episode that ends, one CSV line per episode."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.path = os.environ.get("RLEXP_EPISODE_LOG")
        self.ret, self.length = 0.0, 0

    def reset(self, **kwargs: Any) -> Any:
        self.ret, self.length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.ret += float(reward)
        self.length += 1
        if (terminated or truncated) and self.path:
            with open(self.path, "a") as f:
                f.write(f"{self.ret},{self.length}\n")
        return obs, reward, terminated, truncated, info
