"""The on-policy loop shared by VPG, TRPO and PPO: collect -> GAE -> update -> log -> checkpoint.

Backend-agnostic: the learner (``AlgoSpec.learner_class``) holds all the math; this loop only sees
numpy arrays. Each rank collects ``steps_per_epoch // procs`` steps per epoch in its own env.

gymnasium semantics: ``terminated`` ends a return (bootstrap value 0); ``truncated`` (time limit) and
the end of an epoch bootstrap with V(s). An episode that is still running when an epoch ends goes on
in the next epoch (Spinning Up reset it and lost the partial episode), so EpRet/EpLen describe whole
episodes only.

Resume: a checkpoint is written after the epochs given by ``save_freq``, after the last epoch, and
after the epoch in which a stop signal arrived (:mod:`rlexp.stopping`). It holds the learner (networks,
optimizers, RNGs) and this loop's state: the epoch, the episode in progress (replayed exactly on
resume, see :class:`rlexp.envs.EpisodeRecorder`) and the elapsed time. A run that starts in a
directory with a checkpoint continues after it and gives the same numbers as if it had not stopped.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlexp import comm
from rlexp.algos import AlgoSpec
from rlexp.buffers import GAEBuffer
from rlexp.checkpoint import restore_checkpoint, save_checkpoint
from rlexp.config import RLExpConfig
from rlexp.envs import EpisodeRecorder, action_dims, make_env
from rlexp.logger import EpochLogger
from rlexp.stopping import Stopped, StopRequest
from rlexp.timing import EpochTimer


def rank_seed(seed: int, rank: int) -> int:
    """The seed of ``rank`` (Spinning Up's seed + 10000 * rank)."""
    return seed + 10000 * rank


def train(cfg: RLExpConfig, spec: AlgoSpec, run_dir: Path, logger: EpochLogger, stop: StopRequest) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``.

    Continues from the newest checkpoint in ``run_dir`` if there is one. Raises :class:`Stopped`
    after checkpointing when ``stop`` was requested before the last epoch.
    """
    algo = cfg.algo
    rank, size = comm.proc_id(), comm.num_procs()
    seed = rank_seed(cfg.seed, rank)
    env = make_env(cfg.env, seed)
    learner = spec.learner_class(cfg.backend.name)(env.observation_space, env.action_space, cfg, seed)
    to_env = spec.env_action(env.action_space)
    local_steps = algo.steps_per_epoch // size
    act_shape, act_dtype = action_dims(env.action_space)
    buf = GAEBuffer(env.observation_space.shape[0], act_shape, act_dtype, local_steps, algo.gamma, algo.lam)

    episode = EpisodeRecorder(env)
    state = restore_checkpoint(learner, run_dir)
    if state is None:
        first_epoch, elapsed, o = 0, 0.0, episode.reset(seed=seed)
    else:
        first_epoch, elapsed = int(state["epoch"]), float(state["time"])
        o = episode.load_state_dict(state["episode"])

    start = time.time() - elapsed
    timer = EpochTimer(algo.epochs, first_epoch)
    for epoch in range(first_epoch, algo.epochs):
        for t in range(local_steps):
            now = timer.now()
            a, v, logp = learner.step(o)
            now = timer.add("act", now)
            o2, r, terminated, truncated, _ = episode.step(to_env(a))
            timer.add("env", now)
            buf.store(o, a, r, v, logp)
            logger.store(VVals=v)
            o = o2
            epoch_ended = t == local_steps - 1
            if terminated or truncated or epoch_ended:
                now = timer.now()
                buf.finish_path(0.0 if terminated else learner.value(o))
                now = timer.add("update", now)
                if terminated or truncated:
                    logger.store(EpRet=episode.ret, EpLen=episode.length)
                    o = episode.reset()
                    timer.add("env", now)

        now, comm_now = timer.now(), comm.seconds()
        logger.store(**learner.update(buf.get()))
        timer.update(now, comm_now)

        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        logger.log_tabular("VVals", with_min_and_max=True)
        logger.log_tabular("TotalEnvInteracts", (epoch + 1) * local_steps * size)
        for key, min_max in spec.stats(algo):
            logger.log_tabular(key, with_min_and_max=min_max, average_only=not min_max)
        logger.log_tabular("Time", time.time() - start)
        timer.log(logger, epoch + 1, local_steps * size)
        logger.dump_tabular()
        timer.progress(logger)

        done = epoch + 1
        stopping = stop.agreed() and done < algo.epochs
        if done % algo.save_freq == 0 or done == algo.epochs or stopping:
            loop_state = {"epoch": done, "time": time.time() - start, "episode": episode.state_dict(o)}
            save_checkpoint(learner, run_dir, done, loop_state, keep=None)
        if stopping:
            env.close()
            raise Stopped(stop.signum or 0, done)
    env.close()
