"""The on-policy loop shared by VPG, TRPO and PPO: collect -> GAE -> update -> log -> checkpoint.

Backend-agnostic: the learner (``AlgoSpec.learner_class``) holds all the math; this loop only sees
numpy arrays. Each rank collects ``steps_per_epoch // procs`` steps per epoch in its own env.

gymnasium semantics: ``terminated`` ends a return (bootstrap value 0); ``truncated`` (time limit) and
the end of an epoch bootstrap with V(s). An episode that is still running when an epoch ends goes on
in the next epoch (Spinning Up reset it and lost the partial episode), so EpRet/EpLen describe whole
episodes only.
"""

from __future__ import annotations

import time
from pathlib import Path

from rlexp import comm
from rlexp.algos import AlgoSpec
from rlexp.buffers import GAEBuffer
from rlexp.checkpoint import checkpoint_path
from rlexp.config import RLExpConfig
from rlexp.envs import action_dims, make_env
from rlexp.logger import EpochLogger
from rlexp.timing import EpochTimer


def rank_seed(seed: int, rank: int) -> int:
    """The seed of ``rank`` (Spinning Up's seed + 10000 * rank)."""
    return seed + 10000 * rank


def train(cfg: RLExpConfig, spec: AlgoSpec, run_dir: Path, logger: EpochLogger) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``."""
    algo = cfg.algo
    rank, size = comm.proc_id(), comm.num_procs()
    seed = rank_seed(cfg.seed, rank)
    env = make_env(cfg.env, seed)
    learner = spec.learner_class(cfg.backend.name)(env.observation_space, env.action_space, cfg, seed)
    to_env = spec.env_action(env.action_space)
    local_steps = algo.steps_per_epoch // size
    act_shape, act_dtype = action_dims(env.action_space)
    buf = GAEBuffer(env.observation_space.shape[0], act_shape, act_dtype, local_steps, algo.gamma, algo.lam)

    start = time.time()
    timer = EpochTimer(algo.epochs)
    o, _ = env.reset(seed=seed)
    ep_ret, ep_len = 0.0, 0
    for epoch in range(algo.epochs):
        for t in range(local_steps):
            now = timer.now()
            a, v, logp = learner.step(o)
            now = timer.add("act", now)
            o2, r, terminated, truncated, _ = env.step(to_env(a))
            timer.add("env", now)
            ep_ret += float(r)
            ep_len += 1
            buf.store(o, a, r, v, logp)
            logger.store(VVals=v)
            o = o2
            epoch_ended = t == local_steps - 1
            if terminated or truncated or epoch_ended:
                now = timer.now()
                buf.finish_path(0.0 if terminated else learner.value(o))
                now = timer.add("update", now)
                if terminated or truncated:
                    logger.store(EpRet=ep_ret, EpLen=ep_len)
                    o, _ = env.reset()
                    timer.add("env", now)
                    ep_ret, ep_len = 0.0, 0

        now, comm_now = timer.now(), comm.seconds()
        logger.store(**learner.update(buf.get()))
        timer.update(now, comm_now)

        if (epoch + 1) % algo.save_freq == 0 or epoch + 1 == algo.epochs:
            if rank == 0:
                learner.save(
                    checkpoint_path(run_dir, epoch + 1, learner.CHECKPOINT_SUFFIX), {"epoch": epoch + 1}
                )
            comm.barrier()

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
    env.close()
