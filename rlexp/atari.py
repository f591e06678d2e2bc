"""Atari and MinAtar: the wrappers of the standard preprocessing that gymnasium does not have.

The Atari preset (``conf/env/atari.yaml``) builds the pipeline of the Nature DQN, as Stable-Baselines3's
AtariWrapper and CleanRL do, from gymnasium's ``AtariPreprocessing`` (up to 30 no-op steps at reset,
frame skip 4 with the maximum of the last two frames, 84x84 grayscale), these wrappers (a lost life ends
an episode, FIRE after a reset where the game needs it), rlexp's ``env.frame_stack: 4`` and
``env.sign_reward: true`` (the learner sees the sign of each reward; the logged returns are the game
scores). An episode of the agent ends at each lost life, but the game goes on: the run logs whole
games (:data:`rlexp.envs.CONTINUES`), and test episodes and test_policy play whole games.

MinAtar (Young & Tian 2019; the package ``minatar``, ids ``MinAtar/<Game>-v0|v1``) gets
:class:`MinAtarObservations`: its boolean channels as uint8 images, and its game's random numbers
drawn from the env's own generator, so that a seeded episode replays exactly (rlexp's exact resume).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlexp.envs import CONTINUES


def _lives(env: gym.Env) -> int:
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``, with ``info[CONTINUES] = True``) while the game goes
    on, as the Nature DQN trained (SB3's EpisodicLifeEnv): the next ``reset()`` continues the game with
    one no-op step instead of restarting it. The game's own end, or a truncation, resets it for real."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = _lives(self.env)
        if 0 < lives < self.lives and not self.game_over:
            terminated, info = True, {**info, CONTINUES: True}
        self.lives = lives
        return obs, float(reward), terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)  # NOOP: on with the next life
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = _lives(self.env)
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then action 2) after every reset, for games that wait for it to start (Breakout's
    ball), as SB3's AtariWrapper does for games whose action 1 is FIRE; for other games (Freeway, say)
    it changes nothing. The info of the reset is kept (a continued game stays one)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
        self.fires = len(meanings) >= 3 and meanings[1] == "FIRE"

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (1, 2) if self.fires else ():
            obs, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


class MinAtarObservations(gym.Wrapper):
    """MinAtar's boolean (10, 10, channels) observations as uint8 0/1 images (what rlexp's image
    pipeline and the ``minatar_cnn`` encoder read), and its game's random numbers seeded from the env's
    own generator at every reset (``reset(seed=s)`` seeds that generator first), so that the generator
    state before a reset, the last action of the episode before (:meth:`carried_state`) and the actions
    since rebuild an episode exactly."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        if not hasattr(env.unwrapped, "game"):
            raise ValueError("MinAtarObservations wraps MinAtar envs (MinAtar/<Game>-v0 or -v1)")
        self.observation_space = spaces.Box(0, 1, env.observation_space.shape, np.uint8)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        base = self.env.unwrapped
        if seed is not None:
            gym.Env.reset(base, seed=seed)  # seeds the env's np_random
        base.game.seed(int(base.np_random.integers(2**31)))  # type: ignore[attr-defined]
        obs, info = self.env.reset(options=options)
        return obs.astype(np.uint8), info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs.astype(np.uint8), float(reward), terminated, truncated, info

    def carried_state(self) -> dict[str, int]:
        """What the game carries into its next episode (:func:`rlexp.envs.carried_state`): its last
        action, which a sticky action (``sticky_action_prob``) repeats and a reset leaves as it is."""
        return {"last_action": int(self.env.unwrapped.game.last_action)}  # type: ignore[attr-defined]

    def set_carried_state(self, state: dict[str, Any]) -> None:
        self.env.unwrapped.game.last_action = int(state["last_action"])  # type: ignore[attr-defined]
