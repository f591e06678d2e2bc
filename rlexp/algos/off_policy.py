"""The off-policy family (DDPG, TD3, SAC, DQN): its config keys, and the loop that trains them all:
step -> store -> update -> test -> log -> checkpoint.

The loop is backend-agnostic: the learner holds the math; the loop only sees numpy arrays. Box
actions are kept in [-1, 1]^n (replay buffer, learner) and mapped to the env's real bounds when
stepping; Discrete actions (DQN) are stored as their index. The algorithm's config says how its
replay is built (:meth:`OffPolicyConfig.replay_options`: n-step returns, priorities); frame stacks
(``env.frame_stack``) of images are stored a frame at a time.

With ``comm.procs = N`` every rank steps its own env (or ``env.num_envs`` envs together) and fills its
own replay buffer:
- ``steps_per_epoch``, ``start_steps`` and ``update_after`` count env steps of all ranks and envs
  together (each rank does its 1/N share); ``TotalEnvInteracts`` counts all ranks;
- ``replay_size`` and ``batch_size`` are global too: each rank keeps ``replay_size // N`` of its own
  transitions and samples ``batch_size // N`` of them per gradient step, and the gradients are
  averaged across ranks, so one gradient step sees a ``batch_size`` minibatch drawn from all ranks;
- ``update_every`` and ``utd_ratio`` count the env steps of one rank (all its envs): each time that
  count t passes a multiple of ``update_every``, all ranks together take a burst of the gradient steps
  owed since the last burst, so that ``floor(k * update_every * utd_ratio)`` steps have been taken after
  k bursts (:func:`gradient_steps`). ``utd_ratio`` is thus gradient steps per env step of one rank,
  and 1/N of that per env step of all N ranks (each step averages N ranks' gradients on a global
  ``batch_size`` minibatch). Spinning Up's default (``utd_ratio = 1``) is a burst of ``update_every``
  steps every ``update_every`` env steps; ``update_every = 1`` with ``utd_ratio = 0.25`` is one step
  every 4 env steps (SB3's ``train_freq=4``), with ``utd_ratio = 4`` four per env step
  (``gradient_steps=4``). Bursts before ``update_after`` are skipped, not made up later, and so are
  those before the replay holds a transition (n-step returns keep up to ``n_step - 1`` steps of each env
  back: ``algo.n_step=3 algo.update_after=0`` starts at each env's third step).
gymnasium's ``terminated`` is the only terminal signal stored; a time-limit truncation bootstraps.

Resume: as in the on-policy loop, a checkpoint after ``save_freq`` epochs, the last epoch and a stop
signal's epoch; it also holds each rank's replay buffer and sampling RNG, the step counter and the
test env's RNG. Every rank writes its own part (see :mod:`rlexp.checkpoint`).

Test episodes (Spinning Up's ``num_test_episodes`` after every epoch: ``algo.test_every = 1``), the
best checkpoint and ``algo.stop_at_return`` are the same as in the on-policy loop:
:mod:`rlexp.algos.evaluation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from omegaconf import MISSING

import rlexp.comm as comm
from rlexp.algos.bookkeeping import Bookkeeping
from rlexp.algos.learner import OffPolicyLearner
from rlexp.buffers import ReplayBuffer
from rlexp.envs import ActionScaler, action_dims, make_vector_env, obs_dtype
from rlexp.errors import check, check_at_least
from rlexp.logger import EpochLogger
from rlexp.nn import is_image_space
from rlexp.normalize import Normalizer
from rlexp.schema import AlgoConfig, RLExpConfig
from rlexp.seeding import RankSeeds
from rlexp.stopping import StopRequest


@dataclass
class OffPolicyConfig(AlgoConfig):
    """Keys of the off-policy family (DDPG, TD3, SAC): replay, exploration, targets.

    It trains with this module's loop, on Box actions with finite bounds.
    """

    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Box,)
    BOUNDED_ACTIONS: ClassVar[bool] = True
    # hidden layers in the heads for images: a linear Q head would be linear in the action
    IMAGE_NETWORK: ClassVar[str] = "nature_cnn_256x256"

    replay_size: int = MISSING
    polyak: float = MISSING
    batch_size: int = MISSING
    start_steps: int = MISSING
    update_after: int = MISSING
    update_every: int = MISSING
    utd_ratio: float = MISSING
    keep_checkpoints: int | None = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        n = self.name
        check(
            self.polyak is None or 0.0 <= self.polyak <= 1.0,  # None: no target networks (CrossQ)
            f"algo.polyak={self.polyak} is out of range for {n}; use 0 <= polyak <= 1",
        )
        check(
            self.replay_size >= procs,
            f"algo.replay_size={self.replay_size} is out of range; use >= comm.procs",
        )
        check(
            self.batch_size >= procs,
            f"algo.batch_size={self.batch_size} is smaller than comm.procs={procs}; every rank samples its share",
        )
        check(
            self.batch_size <= self.replay_size,
            f"algo.batch_size={self.batch_size} is larger than algo.replay_size={self.replay_size}",
        )
        check_at_least(self, start_steps=0, update_after=0, update_every=1)
        check(
            math.isfinite(self.utd_ratio) and self.utd_ratio > 0,
            f"algo.utd_ratio={self.utd_ratio} is out of range; use a number > 0 (gradient steps per env step "
            "of a rank: 0.25 = one every 4 env steps, 4 = four per env step)",
        )
        check(
            self.keep_checkpoints is None or self.keep_checkpoints >= 1,
            f"algo.keep_checkpoints={self.keep_checkpoints} is out of range; use >= 1 or null (keep all)",
        )

    @staticmethod
    def loop() -> Callable[..., None]:
        return train

    @staticmethod
    def env_action(act_space: Any) -> Callable[[Any], Any]:
        """From [-1, 1]^n to the Box's bounds (:class:`ActionScaler`)."""
        return ActionScaler(act_space).to_env

    def replay_options(self) -> dict[str, Any]:
        """Options of this algorithm's :class:`rlexp.buffers.ReplayBuffer` beyond its shapes (none:
        plain one-step transitions, sampled uniformly)."""
        return {}

    def beta(self, steps: int) -> float | None:
        """Prioritized replay's importance-sampling exponent after ``steps`` env steps of all ranks
        (None: no prioritized replay)."""
        return None


class DiscreteActions:
    """The loop's view of a Discrete action space: actions are stored and stepped as their index."""

    def to_env(self, a: np.ndarray) -> np.ndarray:
        return a

    def normalize(self, a: np.ndarray) -> np.ndarray:
        return a


def frame_stacked(cfg: RLExpConfig, obs_space: Any) -> bool:
    """Whether observations are image stacks of ``env.frame_stack`` frames (stored a frame at a time)."""
    k = cfg.env.frame_stack
    return k > 1 and is_image_space(obs_space) and obs_space.shape[0] == k


def gradient_steps(t: int, update_every: int, utd_ratio: Fraction) -> int:
    """Gradient steps owed once a rank has taken ``t`` env steps (all its envs): ``utd_ratio`` per env
    step, counted at the bursts, i.e. at the multiples of ``update_every`` that ``t`` has passed.
    Exact (a Fraction, no float rounding), so the schedule depends on ``t`` alone: a resumed run takes
    the same steps at the same env steps."""
    return math.floor(t // update_every * update_every * utd_ratio)


def planned_gradient_steps(algo: OffPolicyConfig, procs: int, num_envs: int) -> int:
    """The gradient steps each of ``procs`` ranks takes in a whole run of ``algo.epochs`` epochs (up to the
    few that n-step returns hold back at the start): what decides torch's ``backend.compile=null``."""
    t_end = algo.epochs * (algo.steps_per_epoch // (procs * num_envs)) * num_envs  # a rank's env steps
    utd = Fraction(repr(algo.utd_ratio))
    start = algo.update_after // procs
    return max(
        0, gradient_steps(t_end, algo.update_every, utd) - gradient_steps(start, algo.update_every, utd)
    )


def normalized(batch: dict[str, Any], norm: Normalizer) -> dict[str, Any]:
    """A replay batch of raw transitions as the learner sees them: observations normalised and rewards
    scaled with the current statistics (SB3's VecNormalize with an off-policy algorithm). A transition's
    reward is what the replay stored: with n-step returns the discounted sum of its rewards, which is
    scaled and clipped as one number (``env.clip_reward`` bounds the sum, not each reward)."""
    if norm.normalize_obs:
        batch["obs"], batch["obs2"] = norm.frozen_obs(batch["obs"]), norm.frozen_obs(batch["obs2"])
    if norm.normalize_reward:
        batch["rew"] = norm.scale_rewards(batch["rew"])
    return batch


def train(cfg: RLExpConfig, run_dir: Path, logger: EpochLogger, stop: StopRequest) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``.

    Continues from the newest checkpoint in ``run_dir`` if there is one. Raises
    :class:`rlexp.stopping.Stopped` after checkpointing when ``stop`` was requested before the last epoch.
    """
    algo: OffPolicyConfig = cfg.algo
    rank, size, n = comm.proc_id(), comm.num_procs(), cfg.env.num_envs
    seeds = RankSeeds(cfg.seed, rank)
    envs = make_vector_env(
        cfg.env, [seeds.indexed("action_space", i) for i in range(n)], cfg.allow_env_import
    )
    learner: OffPolicyLearner = algo.learner_class(cfg.backend.name)(
        envs.observation_space, envs.action_space, cfg, seeds
    )
    act_space = envs.action_space
    codec = ActionScaler(act_space) if isinstance(act_space, spaces.Box) else DiscreteActions()
    act_shape, act_dtype = action_dims(act_space)
    rng = seeds.generator("replay")
    env_steps = algo.steps_per_epoch // (size * n)  # steps of each env per epoch
    start_steps, update_after = algo.start_steps // size, algo.update_after // size
    utd = Fraction(repr(algo.utd_ratio))  # 0.3 is 3/10, not the nearest binary float
    batch_size = algo.batch_size // size
    obs_space = envs.observation_space
    replay = ReplayBuffer(
        obs_space.shape,
        act_shape,
        algo.replay_size // size,
        obs_dtype(obs_space),
        act_dtype=act_dtype,
        num_envs=n,
        frames=frame_stacked(cfg, obs_space),
        **algo.replay_options(),
    )

    # The first burst also waits until the replay surely holds a transition to sample: n-step returns
    # hold back up to n_step - 1 steps of each env. A function of t alone, so every rank agrees and a
    # resumed run takes the same steps; without n-step returns it is update_after (t >= 1 at any burst).
    first_update = max(update_after, replay.held_back + 1)

    book = Bookkeeping(
        cfg, run_dir, logger, stop, learner, envs=[envs], seeds=seeds, keep=algo.keep_checkpoints
    )
    _, note = learner.choose_compile(planned_gradient_steps(algo, size, n))  # torch's backend.compile=null
    if note is not None:
        logger.log(note, "cyan")
    norm = learner.normalizer  # observation/reward normalisation (a no-op unless env.normalize_*)
    state = book.loop_state
    if state is None:
        t, raw = 0, envs.reset([seeds.indexed("env", i) for i in range(n)])
        o = norm.obs(raw)
    else:  # the statistics in the checkpoint already hold these observations
        t = int(state["t"])
        replay.load_state_dict(state["replay"])
        rng.bit_generator.state = state["replay_rng"]
        raw = envs.load_state_dict(state["episode"])
        o = norm.frozen_obs(raw)
    learner.advance(t * size)  # the schedules of env steps (DQN's epsilon and target updates)
    timer = book.timer
    for epoch in range(book.first_epoch + 1, algo.epochs + 1):
        for _ in book.progress.steps(epoch, env_steps):  # range(env_steps), or through the bar
            with timer.phase("act"):
                if t < start_steps:
                    a = codec.normalize(envs.sample_actions())
                else:
                    a = np.stack([learner.explore(o[i]) for i in range(n)])
            with timer.phase("env"):
                o2, r, terminated, truncated = envs.step(codec.to_env(a))
            ended = terminated | truncated
            norm.reward(r, ended)  # the running returns' statistics; rewards are scaled when sampled
            replay.add(raw, a, norm.train_reward(r), o2, terminated, truncated)
            raw = o2
            if envs.any_ended:
                episodes = envs.episodes()
                for i in np.flatnonzero(ended):
                    if episodes[i] is not None:  # None: a lost life, the game goes on
                        logger.store(EpRet=episodes[i][0], EpLen=episodes[i][1])
                with timer.phase("env"):
                    raw = envs.reset_ended(ended, o2)
            o = norm.obs(raw)
            t, before = t + n, t
            learner.advance(t * size)
            # a burst each time t passes a multiple of update_every: the gradient steps owed since the last
            if t >= first_update and t // algo.update_every != before // algo.update_every:
                steps = gradient_steps(t, algo.update_every, utd) - gradient_steps(
                    before, algo.update_every, utd
                )
                beta = algo.beta(t * size)  # prioritized replay's importance-sampling exponent
                with timer.phase("update"):
                    if beta is None:  # uniform replay: the burst's minibatches do not depend on its steps
                        sample = lambda: normalized(replay.sample_batch(batch_size, rng), norm)  # noqa: E731
                        for stats in learner.update_burst(sample, steps):
                            logger.store(**stats)
                    else:
                        for _ in range(steps):
                            batch = replay.sample_batch(batch_size, rng, beta)
                            indices = batch.pop("indices", None)
                            stats = learner.update(normalized(batch, norm))
                            if indices is not None:  # prioritized replay: the learner's new priorities
                                replay.update_priorities(indices, stats.pop("Priority"))
                            logger.store(**stats)

        book.evaluation.test(epoch)

        logger.log_tabular("Epoch", epoch)
        book.evaluation.log_returns()  # EpRet, TestEpRet, EpLen, TestEpLen
        logger.log_tabular("TotalEnvInteracts", t * size)
        if book.end_epoch(epoch, env_steps * n * size):
            loop_state = {
                "t": t,
                "replay": replay.state_dict(),
                "replay_rng": rng.bit_generator.state,
                "episode": envs.state_dict(raw),
            }
            book.checkpoint(epoch, loop_state)
        if book.finished:
            break
