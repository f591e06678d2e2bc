"""Evaluation, the same for both training loops: deterministic test episodes, the checkpoint of the
best score, and ending a run once its score reaches a return.

The keys (in every ``conf/algo/<name>.yaml``; their meaning in words in :class:`Evaluation`):
``test_every`` (evaluate after every ``test_every``-th epoch, 0: never), ``num_test_episodes`` (test
episodes per evaluation, all ranks together) and ``stop_at_return`` (null: never end early).

Test episodes act with the policy's deterministic action (the Gaussian's mean, the most likely
category, DDPG/TD3's action without noise, SAC's tanh of the mean) in a test env of their own,
seeded from the ``test_env`` stream (:mod:`rlexp.seeding`); each starts from a reset that continues
that env's generator, whose state is part of the checkpoint. They draw from no other stream, so
turning evaluation on changes nothing else in a run. Their returns and lengths are the TestEpRet
and TestEpLen columns, pooled over ranks like every statistic; in an epoch without evaluation they
are NaN. The columns are logged whenever ``test_every > 0`` (as Spinning Up's off-policy loop always
did), so a run's progress.txt has the same columns in every row.

The score of an epoch is the pooled mean test return (AverageTestEpRet) after an evaluation, or,
when the policy is not evaluated (``test_every = 0`` or ``num_test_episodes = 0``), the pooled mean
return of the training episodes that ended in the epoch (AverageEpRet; NaN, so no score, when none
ended). Rank 0's score is broadcast, so every rank takes the same decisions:

- after an evaluation whose score beats (strictly) the best so far, rank 0 writes the policy as
  ``checkpoints/best.pt`` (``best.npz`` on TF) and ``checkpoints/best.json`` = ``{"epoch": completed
  epochs, "score": AverageTestEpRet, "actions": "deterministic", "episodes": num_test_episodes}``, each
  atomically. The best score is part of every regular
  checkpoint, so a resumed run replaces best.pt only with a better one than it had when it saved;
- with ``stop_at_return`` set, the first epoch whose score is >= it ends the run: it saves a
  checkpoint that records why (``finished``), closes, and counts as finished (exit status 0); running
  the same job again, or ``resume=`` (even with more ``algo.epochs``), trains no further. With
  ``test_every > 1`` only the evaluation epochs have a score.

Evaluation runs only after epochs that ``test_every`` divides (not additionally after the last one),
so a run of N epochs continued for M more gives the numbers of a run of N + M epochs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import rlexp.comm as comm
from rlexp.algos.learner import Learner
from rlexp.checkpoint import BEST_INFO, CHECKPOINT_DIR, best_checkpoint_path
from rlexp.display import epochs
from rlexp.envs import CONTINUES, make_env, rng_state, set_rng_state
from rlexp.fileio import atomic_write_text
from rlexp.logger import EpochLogger
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds


def test_agent(
    env: Any, learner: Learner, to_env: Callable[[Any], Any], episodes: int, logger: EpochLogger
) -> None:
    """Run ``episodes`` whole episodes with the deterministic policy; store TestEpRet and TestEpLen.
    An episode that ends at a lost life of a game that goes on (:data:`rlexp.envs.CONTINUES`) continues
    after its reset: test episodes are whole games.

    ``to_env`` maps the policy's output to what ``env.step`` takes (:meth:`AlgoConfig.env_action`).
    """
    for _ in range(episodes):
        o, _ = env.reset()
        learner.reset_state(-1)  # recurrent networks: the test episode starts from a zero state
        done, ep_ret, ep_len = False, 0.0, 0
        while not done:
            o, r, terminated, truncated, info = env.step(
                to_env(learner.act(learner.observe(o), deterministic=True))
            )
            ep_ret += float(r)
            ep_len += 1
            done = terminated or truncated
            if terminated and info.get(CONTINUES):  # a lost life: the game (the test episode) goes on
                o, _ = env.reset()
                learner.reset_state(-1)  # as in training: each life an episode of the agent
                done = False
        logger.store(TestEpRet=ep_ret, TestEpLen=ep_len)


class Evaluation:
    """One rank's test episodes, the best score so far and the decision to end the run at a return.

    :param cfg: the run's config. Its ``algo`` keys: ``test_every``, how many epochs apart the
        policy is evaluated (after epochs test_every, 2 * test_every, ...; 0 never evaluates and logs
        no TestEpRet/TestEpLen columns); ``num_test_episodes``, how many deterministic test episodes
        one evaluation plays, all ranks together (rank r plays episodes r, r + procs, ...; 0 plays
        none and leaves the columns NaN); ``stop_at_return``, the score at which the run ends as
        finished (None: it runs all ``epochs``).
    :param run_dir: where rank 0 writes the best checkpoint.
    :param learner: the policy that plays and that the best checkpoint saves.
    :param logger: gets the test episodes and the columns.
    :param seeds: this rank's random streams: the test env draws from ``test_env`` only.
    :param state: the loop state of the checkpoint the run continues from (None: a new run).
    """

    def __init__(
        self,
        cfg: RLExpConfig,
        run_dir: Path,
        learner: Learner,
        logger: EpochLogger,
        seeds: RankSeeds,
        state: dict[str, Any] | None,
    ) -> None:
        algo = cfg.algo
        self.algo, self.run_dir, self.learner, self.logger = algo, run_dir, learner, logger
        self.env: Any = None
        if algo.test_every > 0:
            self.env = make_env(cfg.env, seeds["test_env"], allow_env_import=cfg.allow_env_import)
            self.to_env = algo.env_action(self.env.action_space)
            if state is not None:
                set_rng_state(self.env, state["test_env_rng"])
        self.episodes = len(range(comm.proc_id(), algo.num_test_episodes, comm.num_procs()))  # this rank's
        #: the best evaluation so far: {"epoch": completed epochs, "score": mean test return}, or None
        self.best: dict[str, Any] | None = None if state is None else state.get("best")
        self.tested = False  # whether the policy was evaluated after this epoch
        self.video: Any = None  # rank 0's recordings (logger.video_every), after the test episodes
        if cfg.logger.video_every > 0 and comm.proc_id() == 0:
            from rlexp.video import TrainingVideo

            self.video = TrainingVideo(cfg, run_dir, learner, logger, seeds)
        self.score: float | None = None  # this epoch's score, once its columns are logged

    def test(self, done: int) -> None:
        """After ``done`` completed epochs: play this rank's test episodes if an evaluation is due, and
        record rank 0's video episode if one is due (:mod:`rlexp.video`)."""
        algo = self.algo
        self.tested = algo.evaluates and done % algo.test_every == 0
        if self.tested:
            test_agent(self.env, self.learner, self.to_env, self.episodes, self.logger)
        if self.video is not None:
            self.video.after_epoch(done)

    def log_returns(self) -> None:
        """Log EpRet(mm), TestEpRet(mm), EpLen and TestEpLen (the Test columns when ``test_every > 0``,
        in Spinning Up's off-policy order) and note the epoch's score. A collective."""
        logger, testing = self.logger, self.env is not None
        logger.log_episodes()  # episodes.csv (logger.episodes), before EpRet's values are pooled
        logger.log_tabular("EpRet", with_min_and_max=True)
        if testing:
            logger.log_tabular("TestEpRet", with_min_and_max=True)
        logger.log_tabular("EpLen", average_only=True)
        if testing:
            logger.log_tabular("TestEpLen", average_only=True)
        if self.algo.evaluates:
            self.score = logger.current("AverageTestEpRet") if self.tested else None
        else:
            self.score = logger.current("AverageEpRet")

    def end_epoch(self, done: int) -> str | None:
        """After the row of ``done`` epochs: keep the best checkpoint, and return why the run ends
        here when its score reached ``stop_at_return`` (None: it goes on). The same on every rank."""
        algo, score = self.algo, self.score
        self.score = None
        if score is None or (not self.tested and algo.stop_at_return is None):
            return None  # no score needed this epoch: no collective either (the same on every rank)
        score = float(comm.broadcast_(np.array([score], dtype=np.float64))[0])  # rank 0's, everywhere
        if not math.isfinite(score):
            return None
        if self.tested and (self.best is None or score > self.best["score"]):
            self.best = {"epoch": done, "score": score}
            if comm.proc_id() == 0:
                self.save_best()
        if algo.stop_at_return is None or score < algo.stop_at_return or done >= algo.epochs:
            return None
        column = "AverageTestEpRet" if algo.evaluates else "AverageEpRet"
        reason = (
            f"{column} {score:.6g} reached algo.stop_at_return={algo.stop_at_return:g} after {epochs(done)}"
        )
        self.logger.log(f"Finished early: {reason}")
        return reason

    def save_best(self) -> None:
        """Write the learner as ``checkpoints/best.pt`` (.npz), then ``best.json``, each atomically."""
        assert self.best is not None
        self.learner.save(best_checkpoint_path(self.run_dir, self.learner.CHECKPOINT_SUFFIX), self.best)
        # how the score was measured: test_policy samples by default (Spinning Up's), so say it here
        record = {**self.best, "actions": "deterministic", "episodes": self.algo.num_test_episodes}
        text = json.dumps(record, indent=1) + "\n"
        atomic_write_text(self.run_dir / CHECKPOINT_DIR / BEST_INFO, text)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs to continue: the test env's generator and the best score so far."""
        state: dict[str, Any] = {}
        if self.env is not None:
            state["test_env_rng"] = rng_state(self.env)
        if self.best is not None:
            state["best"] = self.best
        return state

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
        if self.video is not None:
            self.video.close()
