"""Throughput of a run: env steps per second and where each epoch's wall-clock time went.

Both training loops time four phases with ``time.perf_counter`` (no device synchronisation is
added: on a GPU the time of queued kernels shows up in the phase that first waits for them):

- ``env``: ``env.step`` and ``env.reset`` (the simulator);
- ``act``: choosing actions (the learner's forward pass, or the random warm-up actions);
- ``update``: learning (replay sampling or GAE, the learner's gradient steps);
- ``comm``: time inside MPI collectives (gradient allreduce, pooled statistics), from :mod:`rlexp.comm`.

The update's MPI time is taken out of it and counted as ``comm``. What is left (logging, checkpoints,
test episodes, buffer writes) is the rest of the epoch. Each epoch logs, after Spinning Up's
columns, ``SPS`` (env steps of all ranks per second of this epoch's wall-clock time) and
``FracEnv``, ``FracAct``, ``FracUpdate``, ``FracComm`` (rank 0's shares of the epoch's wall-clock
time, each in [0, 1]). Rank 0 prints a progress line with an ETA after each epoch.
"""

from __future__ import annotations

from time import perf_counter

import rlexp.comm as comm
from rlexp.logger import EpochLogger

PHASES = ("env", "act", "update")
COLUMNS = ("SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm")
PROGRESS_AFTER_S = 20.0  # print progress lines only for runs expected to take longer than this


def format_duration(seconds: float) -> str:
    """``1h02m``, ``3m20s`` or ``45s``."""
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Phase:
    """One phase of :class:`EpochTimer`: ``with timer.phase("env"): ...`` adds the block's wall-clock
    time to :attr:`spent`. Built once per phase and reused."""

    __slots__ = ("spent", "start")

    def __init__(self) -> None:
        self.spent = self.start = 0.0

    def __enter__(self) -> None:
        self.start = perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.spent += perf_counter() - self.start


class UpdatePhase(Phase):
    """The ``update`` phase: its MPI time (gradient allreduce, pooled statistics) is left out of it
    (it is ``comm``'s)."""

    __slots__ = ("comm_start",)

    def __enter__(self) -> None:
        self.start, self.comm_start = perf_counter(), comm.seconds()

    def __exit__(self, *exc: object) -> None:
        self.spent += perf_counter() - self.start - (comm.seconds() - self.comm_start)


class EpochTimer:
    """Accumulates the time of each phase within an epoch and logs the throughput columns.

    In a loop: ``with timer.phase("act"): a = learner.step(o)``. Phases do not nest.

    :param epochs: the run's number of epochs (for the ETA).
    :param first_epoch: epochs already done before this process started (a resumed run), so that
        the ETA is computed from the epochs this process has timed.
    """

    def __init__(self, epochs: int, first_epoch: int = 0) -> None:
        self.epochs, self.first_epoch = epochs, first_epoch
        self.run_start = self.epoch_start = perf_counter()
        self.comm_start = comm.seconds()
        self.phases = {"env": Phase(), "act": Phase(), "update": UpdatePhase()}

    def phase(self, name: str) -> Phase:
        """The context manager that times ``name`` (one of :data:`PHASES`)."""
        return self.phases[name]

    @property
    def spent(self) -> dict[str, float]:
        """Seconds spent in each phase so far this epoch."""
        return {name: phase.spent for name, phase in self.phases.items()}

    def log(self, logger: EpochLogger, epoch: int, env_steps: int) -> None:
        """Log SPS and the Frac* columns of this epoch (``env_steps``: all ranks), start the next epoch.

        Call it right before ``logger.dump_tabular()``; then :meth:`progress` after it.
        """
        now = perf_counter()
        wall = max(now - self.epoch_start, 1e-9)
        comm_s = comm.seconds() - self.comm_start
        logger.log_tabular("SPS", env_steps / wall)
        spent = self.spent
        logger.log_tabular("FracEnv", spent["env"] / wall)
        logger.log_tabular("FracAct", spent["act"] / wall)
        logger.log_tabular("FracUpdate", spent["update"] / wall)
        logger.log_tabular("FracComm", comm_s / wall)
        self._last = (epoch, env_steps / wall, now)
        self.epoch_start, self.comm_start = now, comm.seconds()
        for phase in self.phases.values():
            phase.spent = 0.0

    def progress(self, logger: EpochLogger) -> None:
        """Print ``epoch 3/50  2,431 SPS  ETA 1m20s`` (rank 0, console only) for runs long enough to need it."""
        epoch, sps, now = self._last
        elapsed = now - self.run_start
        eta = elapsed / max(epoch - self.first_epoch, 1) * (self.epochs - epoch)
        if epoch < self.epochs and elapsed + eta > PROGRESS_AFTER_S:
            logger.log(f"epoch {epoch}/{self.epochs}  {sps:,.0f} SPS  ETA {format_duration(eta)}", "cyan")
