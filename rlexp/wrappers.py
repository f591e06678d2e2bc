"""rlexp's own gymnasium wrappers, usable by name in ``env.wrappers`` beside gymnasium's (a name that
gymnasium.wrappers does not have is looked up here)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class MaskObservation(gym.ObservationWrapper):
    """Hides the observation entries ``indices`` (they read 0), making a task partially observed: the
    velocity-free variants that RL Baselines3 Zoo benchmarks recurrent policies on (its
    ``MaskVelocityWrapper``; rlexp's presets CartPoleNoVel-v1 with [1, 3], PendulumNoVel-v1 with [2],
    LunarLanderNoVel-v3 with [2, 3, 5]). The observation space keeps its shape.

    :param indices: positions in the flat observation vector, each in range.
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskObservation masks flat Box observations, not {space}")
        n = space.shape[0]
        bad = [i for i in indices if not -n <= int(i) < n]
        if bad:
            raise ValueError(f"indices {bad} are out of range for observations of {n} entries")
        self.mask = np.ones(n, dtype=space.dtype)
        self.mask[list(indices)] = 0

    def observation(self, observation: Any) -> Any:
        return observation * self.mask
