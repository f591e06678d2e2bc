"""Small environments for tests, registered on import (use env=gym env.id=tests.envs:<id>)."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MultiDiscreteActions(gym.Env):
    """An env whose action space no rlexp algorithm supports."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.MultiDiscrete([3, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 0.0, False, False, {}


class CrashOnRank1(gym.Env):
    """Crashes in step() after 50 steps in all, on MPI rank 1 only: the other rank then waits in a collective."""

    steps = 0
    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        CrashOnRank1.steps += 1
        if CrashOnRank1.steps > 50 and os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
            raise RuntimeError("deliberate crash on rank 1")
        return np.zeros(2, np.float32), 1.0, self.t >= 20, False, {}


class UnboundedActions(MultiDiscreteActions):
    """A Box action space without finite bounds (fine for PPO, not for DDPG/TD3/SAC)."""

    action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)


gym.register("RLExpTest/UnboundedActions-v0", entry_point=UnboundedActions)
gym.register("RLExpTest/MultiDiscrete-v0", entry_point=MultiDiscreteActions)
gym.register("RLExpTest/CrashOnRank1-v0", entry_point=CrashOnRank1)
