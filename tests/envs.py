"""Small environments for tests, registered on import (use env=gym env.id=tests.envs:<id>)."""

from __future__ import annotations

import os
from typing import ClassVar

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


class CrashAfter(gym.Env):
    """Crashes in step() after ``crash_after`` steps in all (0: never): a run that passes its checks
    (one step) and fails while training."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, crash_after: int = 0) -> None:
        self.crash_after, self.steps, self.t = crash_after, 0, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        self.steps += 1
        if self.crash_after and self.steps > self.crash_after:
            raise RuntimeError(f"deliberate crash after {self.crash_after} steps")
        return np.zeros(2, np.float32), float(action), self.t >= 20, False, {}


class ConstantReward(gym.Env):
    """Episodes of 10 steps, each rewarded ``reward`` whatever the action: every episode's return is
    ``10 * reward`` (a run's score known in advance)."""

    observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, reward: float = 0.0) -> None:
        self.reward, self.t = float(reward), 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), self.reward, self.t >= 10, False, {}


class UnboundedActions(MultiDiscreteActions):
    """A Box action space without finite bounds (fine for PPO, not for DDPG/TD3/SAC)."""

    action_space = spaces.Box(-np.inf, np.inf, (2,), np.float32)


class PixelSide(gym.Env):
    """A pixel env that needs no extra package: each observation is a dark image with one bright
    square, in its left or its right half (at a random place); the agent says which half. Reward 1
    for the right answer (Discrete: 0 = left, 1 = right), or with ``continuous`` ``1 - |a - side| / 2``
    for an action a in [-1, 1] (side: -1 left, +1 right). ``length`` steps per episode, a new square
    each step, so a random policy returns about ``length / 2`` and a perfect one ``length``.

    :param size: height and width in pixels (the Nature CNN needs at least 36).
    :param layout: ``hwc`` (gymnasium's), ``chw`` (channels first) or ``hw`` (no channel axis).
    :param channels: colour channels (``hwc`` and ``chw``).
    :param render_mode: ``rgb_array`` renders the current image (grey, RGB), or None.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self,
        size: int = 36,
        layout: str = "hwc",
        channels: int = 3,
        continuous: bool = False,
        length: int = 10,
        render_mode: str | None = None,
    ):
        self.size, self.layout, self.channels, self.length = size, layout, channels, length
        self.render_mode = render_mode
        shape = {"hwc": (size, size, channels), "chw": (channels, size, size), "hw": (size, size)}[layout]
        self.observation_space = spaces.Box(0, 255, shape, np.uint8)
        self.continuous = continuous
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)

    def _draw(self) -> np.ndarray:
        """A new square: its side in ``self.right``; the image in the env's layout."""
        n, half, square = self.size, self.size // 2, 6
        self.right = bool(self.np_random.integers(2))
        row = self.np_random.integers(0, n - square + 1)
        col = self.np_random.integers(0, half - square + 1) + (half if self.right else 0)
        img = np.zeros((n, n), np.uint8)
        img[row : row + square, col : col + square] = 255
        self.frame = np.repeat(img[..., None], 3, axis=-1)
        if self.layout == "hw":
            return img
        stacked = np.repeat(img[None], self.channels, axis=0)
        return stacked if self.layout == "chw" else np.ascontiguousarray(stacked.transpose(1, 2, 0))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        if self.continuous:
            reward = 1.0 - abs(float(np.asarray(action).reshape(-1)[0]) - (1.0 if self.right else -1.0)) / 2
        else:
            reward = float(int(action) == int(self.right))
        self.t += 1
        return self._draw(), reward, self.t >= self.length, False, {}

    def render(self):
        return self.frame if self.render_mode == "rgb_array" else None


class FloatPixelSide(PixelSide):
    """PixelSide with float32 pixels in [0, 1]: shaped like an image, but not the uint8 one rlexp reads
    as an image (an MLP gets it flattened, with a warning)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.observation_space = spaces.Box(0.0, 1.0, self.observation_space.shape, np.float32)

    def _draw(self) -> np.ndarray:
        return super()._draw().astype(np.float32) / 255.0


def pixel_cartpole() -> gym.Env:
    """CartPole seen through its 400x600 RGB frames only: gymnasium's own pixel observations
    (AddRenderObservation; rendering needs pygame, which gymnasium[classic-control] installs)."""
    env = gym.make("CartPole-v1", render_mode="rgb_array")
    return gym.wrappers.AddRenderObservation(env, render_only=True)


gym.register("RLExpTest/PixelSide-v0", entry_point=PixelSide)
gym.register("RLExpTest/FloatPixelSide-v0", entry_point=FloatPixelSide)
gym.register("RLExpTest/PixelCartPole-v0", entry_point=pixel_cartpole)
gym.register("RLExpTest/UnboundedActions-v0", entry_point=UnboundedActions)
gym.register("RLExpTest/MultiDiscrete-v0", entry_point=MultiDiscreteActions)
gym.register("RLExpTest/CrashOnRank1-v0", entry_point=CrashOnRank1)
gym.register("RLExpTest/CrashAfter-v0", entry_point=CrashAfter)
gym.register("RLExpTest/ConstantReward-v0", entry_point=ConstantReward)
