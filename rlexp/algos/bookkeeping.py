"""What both training loops do around the algorithm: resume, time, evaluate, log the end of each
epoch, checkpoint, and stop on a signal or at a return.

A loop builds its env and learner, then a :class:`Bookkeeping`, which loads the newest checkpoint of
the run directory into the learner (if there is one), hands the loop its own saved state and builds
the run's :class:`rlexp.algos.evaluation.Evaluation`. Each epoch the loop calls
``book.evaluation.test`` after its updates, logs its own columns (Epoch, EpRet, ...,
TotalEnvInteracts, as in Spinning Up; the episode columns through ``book.evaluation.log_returns``)
and calls :meth:`Bookkeeping.end_epoch`, which logs the rest of the row; when that says a checkpoint
is due, the loop passes its state to :meth:`Bookkeeping.checkpoint`, and it ends once
:attr:`Bookkeeping.finished` says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rlexp.comm as comm
from rlexp.algos.evaluation import Evaluation
from rlexp.algos.learner import Learner
from rlexp.checkpoint import checkpoint_path, latest_checkpoint, prune_checkpoints, rank_path
from rlexp.errors import RLExpError
from rlexp.logger import EpochLogger
from rlexp.progress import EpochProgress
from rlexp.pruning import trial_pruning
from rlexp.schema import RLExpConfig
from rlexp.seeding import RankSeeds
from rlexp.stopping import Stopped, StopRequest
from rlexp.timing import EpochTimer


class Bookkeeping:
    """One rank's run around its loop: the checkpoint it starts from, its clock, its epoch rows and checkpoints.

    :param cfg: the run's config (``algo.epochs``, ``algo.save_freq``, the evaluation keys and the
        learner's statistics).
    :param run_dir: where checkpoints are read and written.
    :param logger: the run's logger.
    :param stop: the stop request, checked (with all ranks) once per epoch.
    :param learner: the learner that checkpoints load into and save from.
    :param envs: closed after the last epoch, or when a stop ends the run.
    :param seeds: this rank's random streams (the evaluation's test env uses ``test_env``).
    :param keep: how many checkpoints to keep (None: all).
    """

    def __init__(
        self,
        cfg: RLExpConfig,
        run_dir: Path,
        logger: EpochLogger,
        stop: StopRequest,
        learner: Learner,
        envs: Sequence[Any],
        seeds: RankSeeds,
        keep: int | None = None,
    ) -> None:
        self.cfg, self.run_dir, self.logger, self.stop = cfg, run_dir, logger, stop
        self.learner, self.envs, self.keep = learner, envs, keep
        self.stopping = False
        #: why the run ended before algo.epochs as finished (it reached algo.stop_at_return), else None
        self.finished: str | None = None
        #: the loop's state from the newest checkpoint (None: a new run), already loaded into the learner
        self.loop_state: dict[str, Any] | None = restore_checkpoint(learner, run_dir)
        #: epochs completed before this process started
        self.first_epoch = 0 if self.loop_state is None else int(self.loop_state["epoch"])
        elapsed = 0.0 if self.loop_state is None else float(self.loop_state["time"])
        self.start = time.time() - elapsed
        # the off-policy warm-up: random actions and no gradient steps (none on-policy)
        warmup = max(getattr(cfg.algo, "start_steps", 0), getattr(cfg.algo, "update_after", 0))
        self.timer = EpochTimer(cfg.algo.epochs, self.first_epoch, warmup, cfg.algo.steps_per_epoch)
        #: the bar inside each epoch (logger.progress): ``for t in book.progress.steps(epoch, env_steps)``
        self.progress = EpochProgress(
            cfg.logger.progress, cfg.logger.console, cfg.algo.epochs, comm.num_procs() * cfg.env.num_envs
        )
        note = self.timer.warmup_note()
        if note is not None:
            logger.log(note, "cyan")
        if self.loop_state is None:  # a new run: what it does not use of its settings, once
            for line in cfg.algo.notes():
                logger.log(line, "cyan")
        #: test episodes, the best checkpoint and the return that ends the run
        self.evaluation = Evaluation(cfg, run_dir, learner, logger, seeds, self.loop_state)
        #: a trial of a pruning Optuna sweep: its reports after every epoch (rlexp.pruning); else None
        self.pruning = trial_pruning(run_dir, cfg.score)

    def end_epoch(self, done: int, env_steps: int) -> bool:
        """Log the learner's statistics, Time and the throughput columns, write the row; return whether
        a checkpoint is due after these ``done`` epochs (``env_steps``: this epoch's, all ranks).

        A checkpoint is due every ``save_freq`` epochs, after the last epoch, after the epoch in
        which any rank got a stop signal, after the epoch whose score reached
        ``algo.stop_at_return`` and after the epoch at which Optuna's pruner pruned the run (a trial of
        a pruning sweep: :mod:`rlexp.pruning`); all ranks agree on each (collectives). A new best
        evaluation score writes the best checkpoint here.
        """
        logger, algo = self.logger, self.cfg.algo
        self.progress.close()  # the row takes the bar's place
        for line in self.learner.log_lines():
            logger.log(line, "cyan")
        logger.store(**self.learner.end_of_epoch_stats())
        for key, min_max in algo.stats():
            logger.log_tabular(key, with_min_and_max=min_max, average_only=not min_max)
        logger.log_tabular("Time", time.time() - self.start)
        self.timer.log(logger, done, env_steps)
        logger.dump_tabular()
        self.timer.progress(logger)
        self.finished = self.evaluation.end_epoch(done)
        if self.finished is None and self.pruning is not None and done < algo.epochs:
            self.finished = self.pruning.after_epoch(done)  # Optuna's pruner ends a hopeless trial
        self.stopping = self.stop.agreed() and done < algo.epochs and self.finished is None
        return done % algo.save_freq == 0 or done == algo.epochs or self.stopping or self.finished is not None

    def checkpoint(self, done: int, loop_state: dict[str, Any]) -> None:
        """Save the learner and ``loop_state`` as the checkpoint after ``done`` epochs (every rank).

        Raises :class:`Stopped` when a stop signal ended the run here. A run that reached
        ``algo.stop_at_return`` records why in this checkpoint (``finished``): nothing continues it.
        """
        state = {
            "epoch": done,
            "time": time.time() - self.start,
            **self.evaluation.state_dict(),
            **loop_state,
        }
        if self.finished is not None:
            state["finished"] = self.finished
        save_checkpoint(self.learner, self.run_dir, done, state, keep=self.keep)
        if self.stopping or self.finished is not None or done == self.cfg.algo.epochs:
            for env in self.envs:
                env.close()
            self.evaluation.close()
        if self.stopping:
            raise Stopped(self.stop.signum or 0, done)


def save_checkpoint(
    learner: Learner, run_dir: Path, epoch: int, loop_state: dict[str, Any], keep: int | None
) -> None:
    """Every rank saves ``learner`` and its ``loop_state``; rank 0 last, then it prunes. A collective."""
    rank, size = comm.proc_id(), comm.num_procs()
    path = checkpoint_path(run_dir, epoch, learner.CHECKPOINT_SUFFIX)
    loop_state = {**loop_state, "world_size": size}
    if rank > 0:
        learner.save(rank_path(path, rank), loop_state)
    comm.barrier()
    if rank == 0:
        learner.save(path, loop_state)
        prune_checkpoints(run_dir, keep)
    comm.barrier()


def restore_checkpoint(learner: Learner, run_dir: Path) -> dict[str, Any] | None:
    """Load this rank's part of the newest checkpoint into ``learner``; return its loop state (None: none)."""
    latest = latest_checkpoint(run_dir)
    if latest is None:
        return None
    rank, size = comm.proc_id(), comm.num_procs()
    path = rank_path(latest[1], rank)
    if not path.is_file():
        raise RLExpError(
            f"checkpoint {latest[1]} has no file for rank {rank} ({path.name}); it was written by fewer ranks"
        )
    loop = learner.load(path)
    if int(loop.get("world_size", 1)) != size:
        raise RLExpError(
            f"checkpoint {latest[1]} was written by {loop.get('world_size')} MPI ranks; "
            f"resume it with comm.procs={loop.get('world_size')}"
        )
    return loop
