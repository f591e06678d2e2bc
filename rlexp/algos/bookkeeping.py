"""What both training loops do around the algorithm: resume, time, log the end of each epoch,
checkpoint, and stop on a signal.

A loop builds its env and learner, then a :class:`Bookkeeping`, which loads the newest checkpoint of
the run directory into the learner (if there is one) and hands the loop its own saved state. Each
epoch the loop logs its own columns (Epoch, EpRet, ..., TotalEnvInteracts, as in Spinning Up) and
calls :meth:`Bookkeeping.end_epoch`, which logs the rest of the row; when that says a checkpoint is
due, the loop passes its state to :meth:`Bookkeeping.checkpoint`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import rlexp.comm as comm
from rlexp.algos.learner import Learner
from rlexp.checkpoint import checkpoint_path, latest_checkpoint, prune_checkpoints, rank_path
from rlexp.errors import RLExpError
from rlexp.logger import EpochLogger
from rlexp.schema import RLExpConfig
from rlexp.stopping import Stopped, StopRequest
from rlexp.timing import EpochTimer


class Bookkeeping:
    """One rank's run around its loop: the checkpoint it starts from, its clock, its epoch rows and checkpoints.

    :param cfg: the run's config (``algo.epochs``, ``algo.save_freq`` and the learner's statistics).
    :param run_dir: where checkpoints are read and written.
    :param logger: the run's logger.
    :param stop: the stop request, checked (with all ranks) once per epoch.
    :param learner: the learner that checkpoints load into and save from.
    :param envs: closed after the last epoch, or when a stop ends the run.
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
        keep: int | None = None,
    ) -> None:
        self.cfg, self.run_dir, self.logger, self.stop = cfg, run_dir, logger, stop
        self.learner, self.envs, self.keep = learner, envs, keep
        self.stopping = False
        #: the loop's state from the newest checkpoint (None: a new run), already loaded into the learner
        self.loop_state: dict[str, Any] | None = restore_checkpoint(learner, run_dir)
        #: epochs completed before this process started
        self.first_epoch = 0 if self.loop_state is None else int(self.loop_state["epoch"])
        elapsed = 0.0 if self.loop_state is None else float(self.loop_state["time"])
        self.start = time.time() - elapsed
        self.timer = EpochTimer(cfg.algo.epochs, self.first_epoch)

    def end_epoch(self, done: int, env_steps: int) -> bool:
        """Log the learner's statistics, Time and the throughput columns, write the row; return whether
        a checkpoint is due after these ``done`` epochs (``env_steps``: this epoch's, all ranks).

        A checkpoint is due every ``save_freq`` epochs, after the last epoch, and after the epoch in
        which any rank got a stop signal (all ranks agree on that: a collective).
        """
        logger, algo = self.logger, self.cfg.algo
        for key, min_max in algo.stats():
            logger.log_tabular(key, with_min_and_max=min_max, average_only=not min_max)
        logger.log_tabular("Time", time.time() - self.start)
        self.timer.log(logger, done, env_steps)
        logger.dump_tabular()
        self.timer.progress(logger)
        self.stopping = self.stop.agreed() and done < algo.epochs
        return done % algo.save_freq == 0 or done == algo.epochs or self.stopping

    def checkpoint(self, done: int, loop_state: dict[str, Any]) -> None:
        """Save the learner and ``loop_state`` as the checkpoint after ``done`` epochs (every rank).

        Raises :class:`Stopped` when a stop signal ended the run here.
        """
        state = {"epoch": done, "time": time.time() - self.start, **loop_state}
        save_checkpoint(self.learner, self.run_dir, done, state, keep=self.keep)
        if self.stopping or done == self.cfg.algo.epochs:
            for env in self.envs:
                env.close()
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
