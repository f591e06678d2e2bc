"""What the DQN learners of both backends share (no deep-learning library here): epsilon-greedy acting
from the learner's numpy generator, and the schedules that follow the env steps (epsilon, target
updates)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np
from gymnasium import spaces

from rlexp.algos.learner import OffPolicyLearner
from rlexp.nn.acting import QActing
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


class DQNLearnerBase(OffPolicyLearner):
    """Acting and schedules of a DQN learner; the backend learner builds the networks (``q``, ``q_targ``),
    :attr:`acting` (Q-values in numpy) and the update, and implements :meth:`update_target`."""

    acting: QActing

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Discrete, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.n_actions = int(act_space.n)
        self.steps: int | None = None  # env steps of all ranks at the last advance()
        self.epsilon = self.algo.epsilon(0)

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """Q(obs, .) for one observation (float64)."""
        return self.acting(obs)

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """The greedy action (``argmax_a Q(obs, a)``); not ``deterministic``: epsilon-greedy at the
        run's current epsilon."""
        if not deterministic:
            return self.explore(obs)
        return np.int64(np.argmax(self.q_values(obs)))

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy: a uniformly random action with probability epsilon, else the greedy one."""
        if self.rng.random() < self.epsilon:
            return np.int64(self.rng.integers(self.n_actions))
        return np.int64(np.argmax(self.q_values(obs)))

    def end_of_epoch_stats(self) -> dict[str, Any]:
        """Epsilon at the end of the epoch (after its last env step), what acting goes on with: one
        value per epoch, also in one without gradient steps."""
        return {"Epsilon": float(self.epsilon)}

    def advance(self, steps: int) -> None:
        """Epsilon for ``steps`` env steps (all ranks); a target update each time ``steps`` passes a
        multiple of ``target_update_every`` (the first call only sets the count)."""
        every = self.algo.target_update_every
        if self.steps is not None and steps // every != self.steps // every:
            self.update_target()
        self.steps = steps
        self.epsilon = self.algo.epsilon(steps)

    @abstractmethod
    def update_target(self) -> None:
        """targ <- polyak * targ + (1 - polyak) * Q (a copy when polyak = 0)."""

    def refresh(self) -> None:
        self.acting.refresh()

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "steps": -1 if self.steps is None else self.steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        steps = int(state["steps"])
        self.steps = None if steps < 0 else steps
        self.epsilon = self.algo.epsilon(max(steps, 0))
