"""The learner interface: what the loops, checkpoints and test_policy may call, and what of it does
not depend on the backend (written once here, not once per backend).

A learner holds an algorithm's networks, optimizers and random generators, and its math:
``update(batch)`` takes one numpy batch (an epoch of on-policy data, or an off-policy minibatch) and
returns the statistics to log. Its backend base (:mod:`rlexp.algos.torch_common`,
:mod:`rlexp.algos.tf_common`) supplies the library-specific parts: building tensors, the state of
networks and optimizers, the checkpoint file format. Each algorithm then writes its update once per
backend (``rlexp/algos/<name>/torch.py`` and ``tf.py``), with the same shape on both sides.

Class layout, for a backend B: ``Learner`` <- ``BLearner`` (B's base) and ``OnPolicyLearner`` /
``OffPolicyLearner`` (this module) <- ``OnPolicyBLearner`` / ``OffPolicyBLearner`` <- the algorithm.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces

from rlexp.checkpoint import check_meta, checkpoint_meta
from rlexp.envs import image_observations
from rlexp.errors import RLExpError
from rlexp.nn import Image
from rlexp.nn.acting import ActorCriticActing, RecurrentActing
from rlexp.normalize import Normalizer
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds

Batch = dict[str, Any]  # named arrays of one update (numpy in, tensors inside the learner)
Stats = dict[str, Any]  # statistic name -> a number or an array of values


class Learner(ABC):
    """Base of every learner.

    :param obs_space: the observation space as :func:`rlexp.envs.make_env` gives it: a flat Box, or
        images (a uint8 Box of rank 2 or 3) when ``network.encoder`` is a CNN (:attr:`image`).
    :param act_space: the env's action space.
    :param cfg: the whole experiment config (algo, network and backend keys are used).
    :param seeds: this rank's random streams: ``init`` builds the networks (which are then copied
        from rank 0, so that all ranks start equal), ``acting`` draws actions or exploration noise
        (:attr:`rng`), ``learner`` the randomness inside updates.
    """

    #: file suffix of this backend's checkpoints
    CHECKPOINT_SUFFIX: ClassVar[str]
    #: the key of the library's random generator state in :meth:`state_dict`
    RNG_KEY: ClassVar[str]
    #: what the library raises for a state that does not fit the networks
    LOAD_ERRORS: ClassVar[tuple[type[Exception], ...]]

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Space, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        self.cfg, self.algo = cfg, cfg.algo
        self.obs_dim = int(np.prod(obs_space.shape))
        #: the layout of image observations that the networks' CNN encoders read; None: flat ones
        self.image: Image | None = image_observations(cfg.algo, cfg.network, cfg.env.id, obs_space)
        self.rng = seeds.generator("acting")
        env = cfg.env
        #: the observation and reward normalisation (env.normalize_obs/normalize_reward); its
        #: statistics are part of this learner's state, so every checkpoint holds them
        self.normalizer = Normalizer(
            tuple(obs_space.shape),
            env.normalize_obs,
            env.normalize_reward,
            env.clip_obs,
            env.clip_reward,
            env.norm_gamma if env.norm_gamma is not None else cfg.algo.gamma,
            env.sign_reward,
        )

    # --- what the loops and test_policy call ---------------------------------------------------
    @abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """An action for one observation, as the policy outputs it (the loop maps it to the env)."""

    @abstractmethod
    def update(self, batch: Batch) -> Stats:
        """One update on ``batch`` (numpy arrays); returns the statistics to log."""

    def reset_state(self, env: int) -> None:  # noqa: B027 (a hook: recurrent networks only)
        """A new episode in env ``env`` (``-1``: the one :meth:`act` plays): recurrent networks start
        from a zero state; nothing to do for the others."""

    def refresh(self) -> None:  # noqa: B027 (a hook: most learners have a copy to re-take, some none)
        """Re-take the numpy copy of the weights that acting uses, after the parameters changed
        (see :mod:`rlexp.nn.acting`); learners that act with the library itself have none."""

    def log_lines(self) -> list[str]:
        """Lines for the run's console since the last call, once each (torch's ``backend.compile``: how
        long its compilation took); none for most learners."""
        return []

    def end_of_epoch_stats(self) -> Stats:
        """Statistics of the learner's state at the end of an epoch, logged once per epoch (DQN's
        Epsilon); those of its updates come from :meth:`update`. None for most learners."""
        return {}

    # --- what each backend supplies -----------------------------------------------------------------
    @abstractmethod
    def tensors(self, batch: Batch) -> Batch:
        """``batch``'s numpy arrays as the library's tensors."""

    @abstractmethod
    def library_state(self) -> dict[str, Any]:
        """Networks (``modules``), optimizer states (``optimizers``) and the library's generator (:attr:`RNG_KEY`)."""

    @abstractmethod
    def load_library_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`library_state` returned."""

    @abstractmethod
    def write_file(self, path: str | os.PathLike, state: dict[str, Any]) -> None:
        """Write a checkpoint atomically, in this backend's format."""

    @abstractmethod
    def read_file(self, path: str | os.PathLike) -> dict[str, Any]:
        """Read a checkpoint written by :meth:`write_file`, without unpickling code (errors are RLExpError)."""

    # --- checkpoints, the same on every backend ---------------------------------------------------
    def observe(self, obs: np.ndarray) -> np.ndarray:
        """An env observation as the policy takes it: normalised with the frozen statistics when
        ``env.normalize_obs`` (test episodes, test_policy, the Python API), else unchanged."""
        return self.normalizer.frozen_obs(obs)

    def extra_state(self) -> dict[str, Any]:
        """State beside the library's: the numpy acting generator, the normalisation statistics (when
        normalising), and whatever subclasses add."""
        state: dict[str, Any] = {"np_rng": self.rng.bit_generator.state}
        if self.normalizer.enabled:
            state["normalizer"] = self.normalizer.state_dict()
        return state

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["np_rng"]
        if self.normalizer.enabled:
            if "normalizer" not in state:
                raise ValueError("the checkpoint has no normalisation statistics, but this run normalises")
            self.normalizer.load_state_dict(state["normalizer"])

    def state_dict(self) -> dict[str, Any]:
        """All of the learner's state: networks (targets included), optimizers, generators, counters."""
        return {**self.library_state(), "extra": self.extra_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.load_library_state(state)
        self.load_extra_state(state["extra"])
        self.refresh()

    def save(self, path: str | os.PathLike, loop_state: dict[str, Any]) -> None:
        """Write this learner's state plus the loop's state (counters, RNGs, buffers) to ``path``."""
        self.write_file(
            path, {"format": 1, **checkpoint_meta(self.cfg), "learner": self.state_dict(), "loop": loop_state}
        )

    def load(self, path: str | os.PathLike) -> dict[str, Any]:
        """Restore from ``path``; return the loop's state. A checkpoint of another run, or one that
        does not fit this learner, is an RLExpError."""
        ckpt = self.read_file(path)
        check_meta(ckpt, self.cfg, path)
        try:
            self.load_state_dict(ckpt["learner"])
        except (KeyError, ValueError, TypeError, *self.LOAD_ERRORS) as exc:
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RLExpError(f"checkpoint {path} does not fit this run's learner ({msg})") from None
        return ckpt["loop"]


class OnPolicyLearner(Learner):
    """VPG, TRPO and PPO: an actor-critic that acts in numpy on a copy of its weights.

    Acting (one observation per env step) runs in :class:`rlexp.nn.acting.ActorCriticActing`, which
    the backend base builds as :attr:`acting`; the copy is re-taken after every update and load.
    """

    acting: ActorCriticActing

    @property
    def recurrent(self) -> bool:
        """Whether the networks have memory (``network.recurrent``): acting keeps a state per env."""
        return isinstance(self.acting, RecurrentActing)

    def step(self, obs: np.ndarray, env: int = 0) -> tuple[np.ndarray, float, float]:
        """Sample an action for one observation of env ``env`` (recurrent networks: from that env's
        state, which moves on); return (action, V(obs), log-prob of the action)."""
        return self.acting.step(obs, env)

    def value(self, obs: np.ndarray, env: int = 0) -> float:
        """V(obs) for one observation (the bootstrap value of a cut path; recurrent: after env
        ``env``'s state, which stays as it is)."""
        if isinstance(self.acting, RecurrentActing):
            return self.acting.value(obs, env)
        return self.acting.value(obs)

    def reset_state(self, env: int) -> None:
        """A new episode in env ``env`` (``-1``: the state that :meth:`act` keeps): its recurrent
        state back to zero. Nothing for feed-forward networks."""
        if isinstance(self.acting, RecurrentActing):
            self.acting.reset(env)

    def act(self, obs: np.ndarray, deterministic: bool = False) -> np.ndarray:
        """A sample, or with ``deterministic`` the mean (Box) / the most likely action (Discrete)."""
        return self.acting.act(obs, deterministic)

    def refresh(self) -> None:
        self.acting.refresh()

    def start_epoch(self, epoch: int) -> None:
        """Called before the collection of epoch ``epoch`` (0-based) of ``algo.epochs``."""

    def resample_noise(self) -> None:
        """gSDE (``algo.use_sde``): fresh exploration matrices for every env of the rank."""
        assert self.acting.sde is not None
        self.acting.sde.resample()

    def update(self, batch: Batch) -> Stats:
        stats = self.update_networks(self.tensors(batch))
        self.refresh()
        return stats

    @abstractmethod
    def update_networks(self, batch: Batch) -> Stats:
        """The algorithm's update of an epoch's ``batch`` (tensors); returns its statistics as numbers."""


def on_policy_stats(loss_pi: tuple[float, float], loss_v: tuple[float, float], **more: float) -> Stats:
    """Spinning Up's on-policy statistics from (loss before, loss after) of the policy and of V."""
    return {
        "LossPi": loss_pi[0],
        "LossV": loss_v[0],
        "DeltaLossPi": loss_pi[1] - loss_pi[0],
        "DeltaLossV": loss_v[1] - loss_v[0],
        **more,
    }


class OffPolicyLearner(Learner):
    """DDPG, TD3, SAC and DQN: actions in [-1, 1]^n (the loop maps them to the env's bounds) or a
    Discrete action's index, a counter of gradient steps, and the policy's delay.

    Each gradient step updates the critics; every ``policy_delay``-th one (TD3; 1 otherwise) also the
    policy and the target networks. :meth:`update_networks` gets that decision as ``policy_step``.
    """

    def __init__(
        self, obs_space: spaces.Box, act_space: spaces.Box, cfg: RLExpConfig, seeds: RankSeeds
    ) -> None:
        super().__init__(obs_space, act_space, cfg, seeds)
        self.act_dim = int(np.prod(act_space.shape))
        self.n_updates = 0
        self.policy_delay = 1

    @abstractmethod
    def act(self, obs: np.ndarray, deterministic: bool = True) -> np.ndarray:
        """The policy's action in [-1, 1]: its mean, or (SAC, not deterministic) a sample."""

    @abstractmethod
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """The action to take while training: the policy's, with exploration noise."""

    def choose_compile(self, planned_steps: int) -> tuple[bool | None, str | None]:
        """Called by the loop once before the first step, on every rank (a collective): a backend whose
        gradient step may run compiled or not (torch's ``backend.compile``) settles it for this run,
        ``planned_steps`` being the gradient steps each rank takes in the whole run. Returns (the choice,
        a line for the console or None); (None, None) where the backend has no such choice."""
        return None, None

    def advance(self, steps: int) -> None:  # a hook: DQN's schedules; none for the others
        """Called by the loop after every env step with the env steps so far, all ranks and envs
        together (and once before the first, with those of the checkpoint it continues from)."""

    def update(self, batch: Batch) -> Stats:
        policy_step = self.n_updates % self.policy_delay == 0
        stats = self.compute_update(self.tensors(batch), policy_step)
        self.n_updates += 1
        self.refresh()
        return self.to_numpy(stats)

    def update_burst(self, sample: Callable[[], Batch], steps: int) -> list[Stats]:
        """``steps`` gradient steps in a row (one burst of the off-policy loop), each on the next minibatch
        that ``sample()`` draws (numpy; minibatches that do not depend on the steps before them, i.e.
        not prioritized); the statistics of each step. Here one :meth:`update` per minibatch; a backend
        may draw several up front and run their steps as one compiled call (TensorFlow's
        ``backend.compile_bursts``), which gives the same numbers."""
        return [self.update(sample()) for _ in range(steps)]

    def compute_update(self, batch: Batch, policy_step: bool) -> Stats:
        """Run :meth:`update_networks` (TensorFlow: its compiled graph)."""
        return self.update_networks(batch, policy_step)

    @abstractmethod
    def update_networks(self, batch: Batch, policy_step: bool) -> Stats:
        """One gradient step of the critics and, with ``policy_step``, of the policy and the targets;
        returns the statistics as tensors."""

    @abstractmethod
    def to_numpy(self, stats: Stats) -> Stats:
        """Statistics as Python floats (scalars) and numpy arrays."""

    def extra_state(self) -> dict[str, Any]:
        return {"n_updates": self.n_updates, **super().extra_state()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        self.n_updates = int(state["n_updates"])
