"""The off-policy loop shared by DDPG, TD3 and SAC: step -> store -> update -> test -> log -> checkpoint.

Backend-agnostic: the learner holds the math; this loop only sees numpy arrays. Actions are kept in
[-1, 1]^n (replay buffer, learner) and mapped to the env's real bounds when stepping.

With ``comm.procs = N`` every rank steps its own env and fills its own replay buffer:
- ``steps_per_epoch``, ``start_steps`` and ``update_after`` count env steps of all ranks together
  (each rank does its 1/N share); ``TotalEnvInteracts`` counts all ranks;
- ``replay_size`` and ``batch_size`` are global too: each rank keeps ``replay_size // N`` of its own
  transitions and samples ``batch_size // N`` of them per gradient step, and the gradients are
  averaged across ranks, so one gradient step sees a ``batch_size`` minibatch drawn from all ranks;
- ``update_every`` counts the env steps of one rank; each burst is ``update_every`` gradient steps
  taken by all ranks together. The update-to-data ratio is therefore one gradient step per env step
  of one rank (Spinning Up's 1:1 when N = 1), i.e. 1/N gradient steps per global env step.
gymnasium's ``terminated`` is the only terminal signal stored; a time-limit truncation bootstraps.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rlexp import comm
from rlexp.algos import AlgoSpec
from rlexp.algos.on_policy import rank_seed
from rlexp.buffers import ReplayBuffer
from rlexp.checkpoint import checkpoint_path, list_checkpoints
from rlexp.config import RLExpConfig
from rlexp.envs import ActionScaler, make_env
from rlexp.logger import EpochLogger
from rlexp.timing import EpochTimer


def test_agent(env: Any, learner: Any, scaler: ActionScaler, episodes: int, logger: EpochLogger) -> None:
    """Run ``episodes`` episodes with the deterministic policy; store TestEpRet and TestEpLen."""
    for _ in range(episodes):
        o, _ = env.reset()
        done, ep_ret, ep_len = False, 0.0, 0
        while not done:
            o, r, terminated, truncated, _ = env.step(scaler.to_env(learner.act(o, deterministic=True)))
            ep_ret += float(r)
            ep_len += 1
            done = terminated or truncated
        logger.store(TestEpRet=ep_ret, TestEpLen=ep_len)


def train(cfg: RLExpConfig, spec: AlgoSpec, run_dir: Path, logger: EpochLogger) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``."""
    algo = cfg.algo
    rank, size = comm.proc_id(), comm.num_procs()
    seed = rank_seed(cfg.seed, rank)
    env, test_env = make_env(cfg.env, seed), make_env(cfg.env, seed + 5000)
    learner = spec.learner_class(cfg.backend.name)(env.observation_space, env.action_space, cfg, seed)
    scaler = ActionScaler(env.action_space)
    rng = np.random.default_rng(seed)  # replay sampling
    local_steps = algo.steps_per_epoch // size
    start_steps, update_after = algo.start_steps // size, algo.update_after // size
    batch_size = algo.batch_size // size
    replay = ReplayBuffer(env.observation_space.shape[0], learner.act_dim, algo.replay_size // size)
    test_episodes = len(range(rank, algo.num_test_episodes, size))  # this rank's share

    start = time.time()
    timer = EpochTimer(algo.epochs)
    o, _ = env.reset(seed=seed)
    ep_ret, ep_len, t = 0.0, 0, 0
    for epoch in range(1, algo.epochs + 1):
        for _ in range(local_steps):
            now = timer.now()
            a = scaler.normalize(env.action_space.sample()) if t < start_steps else learner.explore(o)
            now = timer.add("act", now)
            o2, r, terminated, truncated, _ = env.step(scaler.to_env(a))
            timer.add("env", now)
            ep_ret += float(r)
            ep_len += 1
            replay.store(o, a, r, o2, terminated)
            o = o2
            if terminated or truncated:
                logger.store(EpRet=ep_ret, EpLen=ep_len)
                now = timer.now()
                o, _ = env.reset()
                timer.add("env", now)
                ep_ret, ep_len = 0.0, 0
            t += 1
            if t >= update_after and t % algo.update_every == 0:
                now, comm_now = timer.now(), comm.seconds()
                for _ in range(algo.update_every):
                    logger.store(**learner.update(replay.sample_batch(batch_size, rng)))
                timer.update(now, comm_now)

        if epoch % algo.save_freq == 0 or epoch == algo.epochs:
            if rank == 0:
                learner.save(
                    checkpoint_path(run_dir, epoch, learner.CHECKPOINT_SUFFIX),
                    {
                        "epoch": epoch,
                        "t": t,
                        "replay": replay.state_dict(),
                        "replay_rng": rng.bit_generator.state,
                    },
                )
                prune_checkpoints(run_dir, algo.keep_checkpoints)
            comm.barrier()
        test_agent(test_env, learner, scaler, test_episodes, logger)

        logger.log_tabular("Epoch", epoch)
        logger.log_tabular("EpRet", with_min_and_max=True)
        logger.log_tabular("TestEpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        logger.log_tabular("TestEpLen", average_only=True)
        logger.log_tabular("TotalEnvInteracts", t * size)
        for key, min_max in spec.stats(algo):
            logger.log_tabular(key, with_min_and_max=min_max, average_only=not min_max)
        logger.log_tabular("Time", time.time() - start)
        timer.log(logger, epoch, local_steps * size)
        logger.dump_tabular()
        timer.progress(logger)
    env.close()
    test_env.close()


def prune_checkpoints(run_dir: Path, keep: int | None) -> None:
    """Delete all but the newest ``keep`` checkpoints (None keeps all)."""
    if keep is None:
        return
    ckpts = list_checkpoints(run_dir)
    for epoch in list(ckpts)[:-keep]:
        ckpts[epoch].unlink()
