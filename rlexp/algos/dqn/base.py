"""What the DQN learners of both backends share (no deep-learning library here): epsilon-greedy (or
noisy) acting from the learner's numpy generator, acting's numpy copies of the network, and the
schedules that follow the env steps (epsilon, target updates, the annealed learning rate)."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from rlexp.algos.learner import OffPolicyLearner
from rlexp.nn.acting import Forward, Layers, MLPCopy, NoisyMLPCopy, QActing
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
        #: the gradient steps taken when the target network was last set to a copy of the online one
        #: (it starts as one; None: not known to be one, after a load or a polyak average)
        self.copied_at: int | None = 0
        self.epsilon = self.algo.epsilon(0)
        #: C51's atoms (float64; None for the other heads)
        self.support_values: np.ndarray | None = self.algo.support()

    def numpy_acting(
        self,
        q: Any,
        layers: Callable[[Any], Layers],
        sigmas: Callable[[Any], Layers],
        forward: Forward | None = None,
    ) -> QActing:
        """Acting's :class:`QActing` for the network ``q``: numpy copies of its MLPs (``layers`` reads a
        net's (W, b), ``sigmas`` a noisy net's scales), or ``forward``, the framework's pass of a CNN
        network (called with the noise draws when noisy)."""
        algo, act = self.algo, self.cfg.network.activation

        def part(net: Any, out_act: str = "identity") -> MLPCopy:
            if algo.noisy:
                return NoisyMLPCopy(lambda: layers(net), lambda: sigmas(net), act, out_act)
            return MLPCopy(lambda: layers(net), act, out_act)

        head: dict[str, Any] = {"atoms": algo.atoms, "support": self.support_values}
        if forward is not None:
            return QActing(forward, noise_sizes=[q.noise_size] if algo.noisy else None, **head)
        sizes = q.noise_sizes if algo.noisy else None
        if not algo.dueling:
            return QActing(part(q.q_net), noise_sizes=sizes, **head)
        return QActing(trunk=part(q.trunk, act), v=part(q.v_net), a=part(q.a_net), noise_sizes=sizes, **head)

    def q_values(self, obs: np.ndarray, noise: np.ndarray | None = None) -> np.ndarray:
        """Q(obs, .) for one observation (float64); ``noise``: a noisy network's draws (None: its mean)."""
        return self.acting(obs, noise)

    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """The greedy action (``argmax_a Q(obs, a)``, a noisy network at its mean); not
        ``deterministic``: as :meth:`explore`."""
        if not deterministic:
            return self.explore(obs)
        return np.int64(np.argmax(self.q_values(obs)))

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Epsilon-greedy: a uniformly random action with probability epsilon, else the greedy one; a
        noisy network: the greedy action under fresh draws of its noise (from the acting generator)."""
        if self.algo.noisy:
            noise = self.rng.standard_normal(self.acting.noise_size)
            return np.int64(np.argmax(self.q_values(obs, noise)))
        if self.rng.random() < self.epsilon:
            return np.int64(self.rng.integers(self.n_actions))
        return np.int64(np.argmax(self.q_values(obs)))

    def end_of_epoch_stats(self) -> dict[str, Any]:
        """Epsilon at the end of the epoch (after its last env step), what acting goes on with: one
        value per epoch, also in one without gradient steps."""
        return {"Epsilon": float(self.epsilon)}

    def advance(self, steps: int) -> None:
        """Epsilon (and an annealed learning rate) for ``steps`` env steps (all ranks); a target update
        each time ``steps`` passes a multiple of ``target_update_every`` (the first call only sets the
        count). A copy (``polyak = 0``) is skipped when no gradient step was taken since the last one:
        the target is the online network already (the zoo's CartPole preset copies every 10 env steps
        and takes its gradient steps every 256)."""
        every = self.algo.target_update_every
        if self.steps is not None and steps // every != self.steps // every:
            copy = self.algo.polyak == 0.0
            if not (copy and self.copied_at == self.n_updates):
                self.update_target()
                self.copied_at = self.n_updates if copy else None
        self.steps = steps
        self.epsilon = self.algo.epsilon(steps)
        if self.algo.anneal_lr:
            self.set_lr(self.algo.learning_rate(steps))

    @abstractmethod
    def update_target(self) -> None:
        """targ <- polyak * targ + (1 - polyak) * Q (a copy when polyak = 0)."""

    @abstractmethod
    def set_lr(self, lr: float) -> None:
        """The optimizer's learning rate from now on."""

    def refresh(self) -> None:
        self.acting.refresh()

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "steps": -1 if self.steps is None else self.steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        steps = int(state["steps"])
        self.steps = None if steps < 0 else steps
        self.copied_at = None  # the next target update copies
        self.epsilon = self.algo.epsilon(max(steps, 0))
