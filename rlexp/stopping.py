"""Stopping a run cleanly: SIGINT, SIGTERM, SIGHUP and the preemption signal end it after the current
epoch.

A training process that receives one of these signals does not die on the spot: it finishes the
epoch it is in, writes a checkpoint, and then stops, so that running the same job again (a requeued
SLURM job, or ``python -m rlexp resume=RUN_DIR``) continues exactly where it stopped. A second
Ctrl-C aborts at once. SIGHUP (the terminal closed, the ssh session dropped) is a stop like SIGTERM;
the process's output then goes to /dev/null where it went to the lost terminal.

The preemption signal is submitit's: USR2, or the signal named by ``SUBMITIT_PREEMPT_SIGNAL``. When
the process was started by submitit, its own handler for that signal (which requeues the job) runs
after the checkpoint is written: see :func:`hand_over`.

With MPI, the launcher forwards any of these signals to mpiexec as USR2 (which Open MPI passes on
to every rank; SIGTERM would kill them), and the ranks agree on stopping through one small
allreduce per epoch, so all of them stop after the same epoch. A rank installs its handler first
thing and reports it (:func:`report_ready`); the launcher forwards a signal only once every rank has,
since USR2's default action would kill a rank still starting.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

# Where each MPI rank reports that it handles stop signals: RUN_DIR/.ranks/ready.<rank>.
READY_DIR = ".ranks"
_ACTIVE: list[StopRequest] = []  # the StopRequests in force, innermost last


def preempt_signal() -> signal.Signals:
    """submitit's preemption signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL names another)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]


def stop_signals() -> tuple[signal.Signals, ...]:
    return (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, preempt_signal())


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; a number no signal has as ``signal 99``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Stopped(Exception):
    """The run stopped early on a signal, after writing the checkpoint of ``epoch`` completed epochs."""

    def __init__(self, signum: int, epoch: int) -> None:
        super().__init__(f"stopped by {signal_name(signum)} after {epoch} epochs")
        self.signum, self.epoch = signum, epoch


def ready_path(run_dir: Path, rank: int) -> Path:
    """The file by which ``rank`` reports that it handles stop signals."""
    return run_dir / READY_DIR / f"ready.{rank}"


def report_ready(run_dir: Path, rank: int) -> None:
    """Called by each MPI rank once its stop-signal handler is in place."""
    path = ready_path(run_dir, rank)
    path.parent.mkdir(exist_ok=True)
    path.touch()


def all_ready(run_dir: Path, procs: int) -> bool:
    """Whether every one of ``procs`` ranks has reported (see :func:`report_ready`)."""
    return all(ready_path(run_dir, rank).exists() for rank in range(procs))


def _silence_lost_terminal() -> None:
    """After SIGHUP: point stdout/stderr that went to a terminal at /dev/null (writes to a hung-up
    terminal fail, and would end the process before its checkpoint)."""
    devnull = None
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            if not os.isatty(fd):
                continue
        except (OSError, ValueError):  # already closed
            continue
        if devnull is None:
            devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
    if devnull is not None:
        os.close(devnull)


def active_request() -> StopRequest | None:
    """The innermost StopRequest in force in this process, if any (``python -m rlexp`` installs one
    before it loads Hydra, so that a signal during start-up is a clean stop too)."""
    return _ACTIVE[-1] if _ACTIVE else None


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
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
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
        if signum == signal.SIGHUP:
            _silence_lost_terminal()
        if first and self.announce:
            print(
                f"rlexp: got {signal_name(signum)}: finishing this epoch and saving a checkpoint "
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
        import rlexp.comm as comm  # imported late: a rank installs its handler before anything heavy

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
