"""The on-policy family (VPG, TRPO, PPO): its config keys, and the loop that trains them all:
collect -> GAE -> update -> test (when due) -> log -> checkpoint.

The loop is backend-agnostic: the learner holds all the math; the loop only sees numpy arrays. Each
rank steps its own ``env.num_envs`` envs together (:class:`rlexp.envs.VectorEpisodes`, one env by
default), each of them ``steps_per_epoch // (procs * num_envs)`` steps per epoch.

gymnasium semantics: ``terminated`` ends a return (bootstrap value 0); ``truncated`` (time limit) and
the end of an epoch bootstrap with V(s). An episode that is still running when an epoch ends goes on
in the next epoch (Spinning Up reset it and lost the partial episode), so EpRet/EpLen describe whole
episodes only.

Resume: a checkpoint is written after the epochs given by ``save_freq``, after the last epoch, and
after the epoch in which a stop signal arrived (:mod:`rlexp.stopping`). It holds the learner (networks,
optimizers, RNGs) and this loop's state: the epoch, each env's episode in progress (replayed exactly on
resume, see :class:`rlexp.envs.RecordedEpisode`) and the elapsed time. A run that starts in a
directory with a checkpoint continues after it and gives the same numbers as if it had not stopped.

Evaluation (deterministic test episodes every ``algo.test_every`` epochs, off by default here: 0), the
best checkpoint and ``algo.stop_at_return`` are the same as in the off-policy loop:
:mod:`rlexp.algos.evaluation`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from omegaconf import MISSING

import rlexp.comm as comm
from rlexp.algos.bookkeeping import Bookkeeping
from rlexp.algos.learner import OnPolicyLearner
from rlexp.buffers import GAEBuffer
from rlexp.envs import ActionAdapter, action_dims, make_vector_env, obs_dtype
from rlexp.errors import check
from rlexp.logger import EpochLogger
from rlexp.schema import AlgoConfig, RLExpConfig, Stat
from rlexp.seeding import RankSeeds
from rlexp.stopping import StopRequest

# algo.value_target: the value function's regression target
VALUE_TARGETS = ("rewards_to_go", "lambda_return")
# Spinning Up's statistics of every on-policy update (rlexp.algos.learner.on_policy_stats)
ON_POLICY_STATS: tuple[Stat, ...] = (
    ("LossPi", False),
    ("LossV", False),
    ("DeltaLossPi", False),
    ("DeltaLossV", False),
)


@dataclass
class OnPolicyConfig(AlgoConfig):
    """Keys of the on-policy family (VPG, TRPO, PPO): GAE and value-function training.

    It trains with this module's loop, on Box or Discrete actions.
    """

    ACTION_SPACES: ClassVar[tuple[type, ...]] = (spaces.Box, spaces.Discrete)
    RECURRENT: ClassVar[bool] = True  # the loop trains recurrent networks on sequences (network.recurrent)

    lam: float = MISSING
    value_target: str | None = MISSING
    vf_lr: float = MISSING
    train_v_iters: int = MISSING
    log_std_init: float = MISSING
    use_sde: bool = MISSING
    sde_sample_freq: int = MISSING
    ortho_init: bool = MISSING
    adam_eps: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(0.0 <= self.lam <= 1.0, f"algo.lam={self.lam} is out of range; use 0 <= lam <= 1")
        check(
            self.value_target is None or self.value_target in VALUE_TARGETS,
            f"algo.value_target={self.value_target!r} is unknown; choose one of: {', '.join(VALUE_TARGETS)} "
            "or null",
        )
        check(self.train_v_iters >= 0, f"algo.train_v_iters={self.train_v_iters} is out of range; use >= 0")
        check(
            math.isfinite(self.log_std_init),
            f"algo.log_std_init={self.log_std_init} is out of range; use a finite number",
        )
        check(
            self.sde_sample_freq == -1 or self.sde_sample_freq >= 1,
            f"algo.sde_sample_freq={self.sde_sample_freq} is out of range; use >= 1 (env steps of each env between "
            "two draws of gSDE's exploration matrices) or -1 (one draw per epoch)",
        )
        check(
            math.isfinite(self.adam_eps) and self.adam_eps > 0,
            f"algo.adam_eps={self.adam_eps} is out of range; use a number > 0",
        )

    @property
    def minibatched(self) -> bool:
        """Whether updates run in shuffled minibatches (PPO's ``num_minibatches > 0``)."""
        return False

    @property
    def value_targets(self) -> str:
        """What the value function is trained on (``value_target``, null resolved): the lambda-return in
        minibatch mode (as SB3 and CleanRL), else Spinning Up's rewards-to-go."""
        if self.value_target is not None:
            return self.value_target
        return "lambda_return" if self.minibatched else "rewards_to_go"

    @property
    def epoch_adv_norm(self) -> bool:
        """Whether the epoch's advantages are normalised as a whole, pooled over ranks (Spinning Up;
        PPO's ``adv_norm`` may move that into its minibatches or turn it off)."""
        return True

    @staticmethod
    def loop() -> Callable[..., None]:
        return train

    @staticmethod
    def env_action(act_space: Any) -> Callable[[Any], Any]:
        """Clipped to the Box's bounds, or an int of the Discrete space (:class:`ActionAdapter`)."""
        return ActionAdapter(act_space)


def recurrent_layout(cfg: RLExpConfig) -> tuple[dict[str, int], int, int]:
    """How a recurrent run's states are laid out in the buffer: (parts per network, size, seq_len)."""
    net = cfg.network
    parts = 2 if net.recurrent == "lstm" else 1  # h and c, or h
    layout = {"pi": parts, **({"v": parts} if net.recurrent_critic == "separate" else {})}
    return layout, net.recurrent_size, net.seq_len


def train(cfg: RLExpConfig, run_dir: Path, logger: EpochLogger, stop: StopRequest) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``.

    Continues from the newest checkpoint in ``run_dir`` if there is one. Raises
    :class:`rlexp.stopping.Stopped` after checkpointing when ``stop`` was requested before the last epoch.
    """
    algo: OnPolicyConfig = cfg.algo
    size, n = comm.num_procs(), cfg.env.num_envs
    seeds = RankSeeds(cfg.seed, comm.proc_id())
    envs = make_vector_env(
        cfg.env, [seeds.indexed("action_space", i) for i in range(n)], cfg.allow_env_import
    )
    learner: OnPolicyLearner = algo.learner_class(cfg.backend.name)(
        envs.observation_space, envs.action_space, cfg, seeds
    )
    to_env = ActionAdapter(envs.action_space)
    env_steps = algo.steps_per_epoch // (size * n)  # steps of each env per epoch
    obs_space = envs.observation_space
    act_shape, act_dtype = action_dims(envs.action_space)
    recurrent = learner.recurrent  # memory: a state per env, stored with each step, reset per episode
    buf = GAEBuffer(
        obs_space.shape,
        act_shape,
        act_dtype,
        env_steps,
        algo.gamma,
        algo.lam,
        obs_dtype(obs_space),
        normalize_adv=algo.epoch_adv_norm,
        num_envs=n,
        value_target=algo.value_targets,
        recurrent=recurrent_layout(cfg) if recurrent else None,
    )
    norm = learner.normalizer  # observation/reward normalisation (a no-op unless env.normalize_*)
    # this step's actions, values and log-probabilities, one row per env (filled in place), and the
    # epoch's values in the order they were taken (logged as VVals)
    a, v, logp = np.zeros((n, *act_shape), act_dtype), np.zeros(n), np.zeros(n)
    vvals = np.zeros(env_steps * n)

    book = Bookkeeping(cfg, run_dir, logger, stop, learner, envs=[envs], seeds=seeds)
    state = book.loop_state
    # recurrent networks: each env's state before its next step, and whether that step starts an episode
    rnn_states, starts = (
        (np.zeros((n, learner.acting.state(0).size), np.float32), np.ones(n, np.bool_))
        if recurrent
        else (None, None)
    )
    if state is None:
        raw = envs.reset([seeds.indexed("env", i) for i in range(n)])
        o = norm.obs(raw)
    else:  # the statistics in the checkpoint already hold these observations
        raw = envs.load_state_dict(state["episode"])
        o = norm.frozen_obs(raw)
        if recurrent:
            for i, flat in enumerate(np.asarray(state["recurrent_states"])):
                learner.acting.set_state(i, flat)
            starts = np.asarray(state["starts"], np.bool_).copy()
    timer = book.timer
    # gSDE: fresh exploration matrices at each epoch's start (so checkpoints need none) and every
    # sde_sample_freq steps of each env; 0: no gSDE
    sde_every = (
        0 if learner.acting.sde is None else algo.sde_sample_freq if algo.sde_sample_freq > 0 else env_steps
    )
    for epoch in range(book.first_epoch, algo.epochs):
        learner.start_epoch(epoch)
        for t in book.progress.steps(epoch + 1, env_steps):  # range(env_steps), or through the bar
            if sde_every and t % sde_every == 0:
                learner.resample_noise()
            with timer.phase("act"):  # each env's observation in turn, from the one acting generator
                if recurrent:
                    for i in range(n):
                        rnn_states[i] = learner.acting.state(i)  # before the step: the sequences start there
                for i in range(n):
                    a[i], v[i], logp[i] = learner.step(o[i], i)
            with timer.phase("env"):
                raw, r, terminated, truncated = envs.step(to_env.batch(a))
            ended = terminated | truncated
            buf.store(o, a, norm.reward(r, ended), v, logp, rnn_states, starts)
            vvals[t * n : (t + 1) * n] = v
            if recurrent:
                starts = ended.copy()  # an ended env's next step starts its next episode
            if envs.any_ended:
                episodes = envs.episodes()
                for i in np.flatnonzero(ended):
                    with timer.phase("update"):
                        buf.finish_path(
                            0.0 if terminated[i] else learner.value(norm.frozen_obs(raw[i]), i), i
                        )
                    if episodes[i] is not None:  # None: a lost life, the game goes on
                        logger.store(EpRet=episodes[i][0], EpLen=episodes[i][1])
                    learner.reset_state(i)  # memory: a new episode starts from a zero state
                with timer.phase("env"):
                    raw = envs.reset_ended(ended, raw)
            o = norm.obs(raw)  # the next observations (a new episode's first after an end)
            if t == env_steps - 1:  # the epoch ends: cut the running paths
                with timer.phase("update"):
                    for i in np.flatnonzero(~ended):
                        buf.finish_path(learner.value(o[i], i), i)
        logger.store(VVals=vvals.copy())
        with timer.phase("update"):
            logger.store(**learner.update(buf.get()))
        book.evaluation.test(epoch + 1)

        logger.log_tabular("Epoch", epoch)
        book.evaluation.log_returns()  # EpRet, EpLen (and TestEpRet, TestEpLen when evaluating)
        logger.log_tabular("VVals", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * env_steps * n * size)
        if book.end_epoch(epoch + 1, env_steps * n * size):
            loop_state: dict[str, Any] = {"episode": envs.state_dict(raw)}
            if recurrent:  # each env's memory (float64, as acting keeps it) and its next step's start flag
                loop_state["recurrent_states"] = np.stack(
                    [learner.acting.state(i, np.float64) for i in range(n)]
                )
                loop_state["starts"] = starts
            book.checkpoint(epoch + 1, loop_state)
        if book.finished:
            break
