"""Stopping a run cleanly: SIGINT, SIGTERM and the preemption signal end it after the current epoch.

A training process that receives one of these signals does not die on the spot: it finishes the
epoch it is in, writes a checkpoint, and then stops, so that running the same job again (a requeued
SLURM job, or ``python -m rlexp resume=RUN_DIR``) continues exactly where it stopped. A second
Ctrl-C aborts at once.

The preemption signal is submitit's: USR2, or the signal named by ``SUBMITIT_PREEMPT_SIGNAL``. When
the process was started by submitit, its own handler for that signal (which requeues the job) runs
after the checkpoint is written: see :func:`hand_over`.

With MPI, the launcher forwards any of these signals to mpiexec as USR2 (which Open MPI passes on
to every rank; SIGTERM would kill them), and the ranks agree on stopping through one small
allreduce per epoch, so all of them stop after the same epoch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from rlexp import comm


def preempt_signal() -> signal.Signals:
    """submitit's preemption signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL names another)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]


def stop_signals() -> tuple[signal.Signals, ...]:
    return (signal.SIGINT, signal.SIGTERM, preempt_signal())


class Stopped(Exception):
    """The run stopped early on a signal, after writing the checkpoint of ``epoch`` completed epochs."""

    def __init__(self, signum: int, epoch: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name} after epoch {epoch}")
        self.signum, self.epoch = signum, epoch


class StopRequest:
    """Context manager that turns the stop signals into a flag, checked once per epoch.

    :param on_signal: also called with the signal number (the launcher uses it to tell mpiexec).
    :param announce: print one line when a signal arrives.
    :param restore: put the previous handlers back on exit. An MPI rank that stopped keeps this
        handler instead: SLURM signals every process of a job step and mpiexec forwards the signal
        too, so late copies can arrive while the rank exits, and USR2's default action kills.
    """

    def __init__(
        self, on_signal: Callable[[int], None] | None = None, announce: bool = True, restore: bool = True
    ) -> None:
        self.on_signal = on_signal
        self.announce = announce
        self.restore = restore
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            for s in stop_signals():
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.restore:
            for s, handler in self._previous.items():
                signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.signum is not None and signum == signal.SIGINT:
            self.restore = True
            self.__exit__()
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint
        first = self.signum is None
        self.signum = signum
        if first and self.announce:
            print(
                f"rlexp: got {signal.Signals(signum).name}: finishing this epoch and saving a checkpoint "
                "(Ctrl-C again aborts at once)",
                file=sys.stderr,
                flush=True,
            )
        if self.on_signal is not None:
            self.on_signal(signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def agreed(self) -> bool:
        """Whether any rank got a stop signal. A collective: every rank calls it once per epoch."""
        if comm.num_procs() == 1:
            return self.requested
        return comm.mpi_max(1.0 if self.requested else 0.0) > 0


def hand_over(signum: int) -> None:
    """After a stopped run is saved: let the signal's previous handler act, then exit.

    Under submitit the previous handler of the preemption signal requeues the job (and exits); the
    default SIGINT handler raises KeyboardInterrupt. Otherwise exit with status 128 + signum.
    """
    handler = signal.getsignal(signum)
    if callable(handler):
        signal.raise_signal(signum)
    raise SystemExit(128 + signum)
