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

The ETA counts the time of the epochs after the off-policy warm-up (``algo.start_steps`` of random
actions, no gradient steps before ``algo.update_after``), which are faster than the rest: until such
an epoch has been timed it is marked provisional, and a run that starts in a long warm-up says so at
once (Atari's is 100,000 steps).
"""

from __future__ import annotations

import math
from time import perf_counter

import rlexp.comm as comm
from rlexp.logger import EpochLogger

PHASES = ("env", "act", "update")
COLUMNS = ("SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm")
PROGRESS_AFTER_S = 20.0  # print progress lines only for runs expected to take longer than this
WARMUP_SHARE = 0.1  # a warm-up shorter than this share of an epoch does not count (DQN's default 100 steps)


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
    :param warmup: env steps (all ranks) of the off-policy warm-up: random actions and no gradient
        steps before them (the larger of ``start_steps`` and ``update_after``; 0: none).
    :param steps_per_epoch: env steps (all ranks) per epoch.
    """

    def __init__(self, epochs: int, first_epoch: int = 0, warmup: int = 0, steps_per_epoch: int = 1) -> None:
        self.epochs, self.first_epoch, self.warmup = epochs, first_epoch, warmup
        self.steps = epochs * steps_per_epoch  # env steps (all ranks) of the whole run
        #: the first epoch (counted from 1) whose steps all come after the warm-up
        self.steady_from = (
            1 if warmup < WARMUP_SHARE * steps_per_epoch else math.ceil(warmup / steps_per_epoch) + 1
        )
        self.steady: list[float] = []  # wall-clock seconds of the epochs after the warm-up timed here
        self.run_start = self.epoch_start = perf_counter()
        self.comm_start = comm.seconds()
        self.phases = {"env": Phase(), "act": Phase(), "update": UpdatePhase()}

    def warmup_note(self) -> str | None:
        """What to say when this process starts inside a warm-up that spans a notable part of its epochs
        (their lines are faster than the later ones'); None otherwise."""
        if self.first_epoch + 1 >= self.steady_from:
            return None
        last = self.steady_from - 1
        head = f"Warm-up until env step {self.warmup:,}: random actions and no gradient steps"
        if last >= self.epochs:  # no whole epoch after it
            if self.warmup >= self.steps:
                return f"{head} (the whole run of {self.epochs} epoch{'s' * (self.epochs != 1)})"
            return f"{head} (the first {self.warmup / self.steps:.0%} of the run's {self.steps:,} steps)"
        which = f"epoch {last}" if last == 1 else f"epochs 1-{last}"
        return (
            f"{head} ({which} of {self.epochs}); the epochs after it are slower, and the ETA counts from them"
        )

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
        if epoch >= self.steady_from:
            self.steady.append(wall)
        self.epoch_start, self.comm_start = now, comm.seconds()
        for phase in self.phases.values():
            phase.spent = 0.0

    def eta(self) -> tuple[float, bool]:
        """(seconds left, provisional): the remaining epochs at the mean time of the epochs after the
        warm-up timed so far; before there is one, at the mean time of all epochs timed, provisional."""
        epoch, _, now = self._last
        left = self.epochs - epoch
        if self.steady:
            return sum(self.steady) / len(self.steady) * left, False
        return (now - self.run_start) / max(epoch - self.first_epoch, 1) * left, True

    def progress(self, logger: EpochLogger) -> None:
        """Print ``epoch 3/50  2,431 SPS  ETA 1m20s`` (rank 0, console only) for runs long enough to need it;
        an ETA measured in the warm-up only says it is provisional."""
        epoch, sps, now = self._last
        eta, provisional = self.eta()
        if epoch < self.epochs and now - self.run_start + eta > PROGRESS_AFTER_S:
            note = (
                f" (provisional: measured in the warm-up, before env step {self.warmup:,})"
                if provisional
                else ""
            )
            logger.log(
                f"epoch {epoch}/{self.epochs}  {sps:,.0f} SPS  ETA {format_duration(eta)}{note}", "cyan"
            )
