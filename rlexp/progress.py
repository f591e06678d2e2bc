"""A progress bar inside each epoch (``logger.progress``; SB3's ``progress_bar=True``): tqdm's bar of
the epoch's env steps (all ranks), their rate and the epoch's ETA, on rank 0's stdout, closed (and
cleared) before the epoch's row is printed. progress.txt and every other record are unchanged.

``logger.progress=auto`` shows it where a person watches: stdout is a terminal (under mpiexec, the
launcher's stdout: :data:`TERMINAL_VARIABLE`) and ``logger.console`` prints epochs (table or line).
``true`` shows it anyway (a log file then holds its updates), ``false`` never. An epoch whose bar is off
iterates over a plain ``range``: the loops pay nothing per step for it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import rlexp.comm as comm

#: set by the launcher for the ranks it starts under mpiexec: "1" when its stdout is a terminal, else "0"
#: (Open MPI gives the ranks a pseudo-terminal whatever the launcher's stdout is)
TERMINAL_VARIABLE = "RLEXP_TERMINAL"


def stdout_is_terminal() -> bool:
    """Whether the user's stdout is a terminal: this process's, or for an MPI rank its launcher's."""
    given = os.environ.get(TERMINAL_VARIABLE)
    if given is not None:
        return given == "1"
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def progress_wanted(mode: str, console: str) -> bool:
    """Whether ``logger.progress=mode`` (any case of auto/true/false) shows a bar on this rank."""
    mode = mode.lower()
    if comm.proc_id() != 0 or mode == "false":
        return False
    return mode == "true" or (console != "quiet" and stdout_is_terminal())


class EpochProgress:
    """The bar of one rank's epochs (shown on rank 0 only, when :func:`progress_wanted`).

    :param mode: ``logger.progress``.
    :param console: ``logger.console``.
    :param epochs: the run's epochs (the bar says ``epoch 3/50``).
    :param steps_per_iteration: env steps of all ranks per iteration of the loop (procs x num_envs).
    """

    def __init__(self, mode: str, console: str, epochs: int, steps_per_iteration: int) -> None:
        self.enabled = progress_wanted(mode, console)
        self.epochs, self.scale = epochs, steps_per_iteration
        self.bar: Any = None

    def steps(self, epoch: int, iterations: int) -> Iterable[int]:
        """The loop's iterations of ``epoch`` (counted from 1): ``range(iterations)``, through the bar when it is on."""
        if not self.enabled:
            return range(iterations)
        return self._counted(epoch, iterations)

    def _counted(self, epoch: int, iterations: int) -> Iterator[int]:
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(
            total=iterations * self.scale,
            desc=f"epoch {epoch}/{self.epochs}",
            unit=" steps",
            file=sys.stdout,
            leave=False,  # the epoch's row takes its place
            dynamic_ncols=True,
            mininterval=0.5,
        )
        for t in range(iterations):
            yield t
            self.bar.update(self.scale)
        self.bar.set_postfix_str("finishing the epoch (updates, tests)")

    def close(self) -> None:
        """Clear the bar (before the epoch's row is printed, and when the run ends)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
