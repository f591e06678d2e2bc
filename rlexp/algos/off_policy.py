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

Resume: as in the on-policy loop, a checkpoint after ``save_freq`` epochs, the last epoch and a stop
signal's epoch; it also holds each rank's replay buffer and sampling RNG, the step counter and the
test env's RNG. Every rank writes its own part (see :mod:`rlexp.checkpoint`).
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
from rlexp.checkpoint import restore_checkpoint, save_checkpoint
from rlexp.config import RLExpConfig
from rlexp.envs import ActionScaler, EpisodeRecorder, make_env, rng_state, set_rng_state
from rlexp.logger import EpochLogger
from rlexp.stopping import Stopped, StopRequest
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


def train(cfg: RLExpConfig, spec: AlgoSpec, run_dir: Path, logger: EpochLogger, stop: StopRequest) -> None:
    """Train ``cfg.algo`` for ``cfg.algo.epochs`` epochs, logging to ``logger`` and checkpointing in ``run_dir``.

    Continues from the newest checkpoint in ``run_dir`` if there is one. Raises :class:`Stopped`
    after checkpointing when ``stop`` was requested before the last epoch.
    """
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

    episode = EpisodeRecorder(env)
    state = restore_checkpoint(learner, run_dir)
    if state is None:
        first_epoch, elapsed, t, o = 0, 0.0, 0, episode.reset(seed=seed)
    else:
        first_epoch, elapsed, t = int(state["epoch"]), float(state["time"]), int(state["t"])
        replay.load_state_dict(state["replay"])
        rng.bit_generator.state = state["replay_rng"]
        set_rng_state(test_env, state["test_env_rng"])
        o = episode.load_state_dict(state["episode"])

    start = time.time() - elapsed
    timer = EpochTimer(algo.epochs, first_epoch)
    for epoch in range(first_epoch + 1, algo.epochs + 1):
        for _ in range(local_steps):
            now = timer.now()
            a = scaler.normalize(env.action_space.sample()) if t < start_steps else learner.explore(o)
            now = timer.add("act", now)
            o2, r, terminated, truncated, _ = episode.step(scaler.to_env(a))
            timer.add("env", now)
            replay.store(o, a, r, o2, terminated)
            o = o2
            if terminated or truncated:
                logger.store(EpRet=episode.ret, EpLen=episode.length)
                now = timer.now()
                o = episode.reset()
                timer.add("env", now)
            t += 1
            if t >= update_after and t % algo.update_every == 0:
                now, comm_now = timer.now(), comm.seconds()
                for _ in range(algo.update_every):
                    logger.store(**learner.update(replay.sample_batch(batch_size, rng)))
                timer.update(now, comm_now)

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

        stopping = stop.agreed() and epoch < algo.epochs
        if epoch % algo.save_freq == 0 or epoch == algo.epochs or stopping:
            loop_state = {
                "epoch": epoch,
                "time": time.time() - start,
                "t": t,
                "replay": replay.state_dict(),
                "replay_rng": rng.bit_generator.state,
                "test_env_rng": rng_state(test_env),
                "episode": episode.state_dict(o),
            }
            save_checkpoint(learner, run_dir, epoch, loop_state, keep=algo.keep_checkpoints)
        if stopping:
            env.close()
            test_env.close()
            raise Stopped(stop.signum or 0, epoch)
    env.close()
    test_env.close()
