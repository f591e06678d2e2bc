"""Console wording shared by the commands, whether this process can show a window (plot --show,
test_policy's rendering), and the labelled output of a sweep's jobs that run at once."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import TextIO


def epochs(n: int) -> str:
    """``1 epoch`` / ``N epochs``: how messages count completed epochs (progress.txt numbers its rows
    from Epoch 0, so after 3 epochs its last row is Epoch 2)."""
    return f"{n} epoch" if n == 1 else f"{n} epochs"


def has_display() -> bool:
    """Whether a window can be shown (macOS and Windows always; elsewhere an X or Wayland display)."""
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


class LinePrefix(io.TextIOBase):
    """A text stream that writes each complete line to ``stream`` with ``prefix`` in front of it, so
    that the lines of jobs running at once say which job they come from (``[job 3] ...``).

    Text is held until it ends a line (``print(table)`` writes the table, then its newline), then
    goes out in one write of the underlying stream, so another job's lines do not land inside an
    epoch table; :meth:`flush` passes on the complete lines held, :meth:`close` the rest.
    """

    def __init__(self, stream: TextIO, prefix: str) -> None:
        super().__init__()
        self.stream, self.prefix = stream, prefix
        self._held = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._held += text
        if self._held.endswith("\n"):
            self._emit(self._held)
            self._held = ""
        return len(text)

    def _emit(self, text: str) -> None:
        """``text`` (whole lines) with the prefix before each line, in one write."""
        if text:
            self.stream.write("".join(f"{self.prefix}{line}\n" for line in text[:-1].split("\n")))
            self.stream.flush()

    def flush(self) -> None:
        done, newline, partial = self._held.rpartition("\n")
        self._emit(done + newline)
        self._held = partial
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def close(self) -> None:
        """Write what is held, a last line without its end included (the stream itself stays open)."""
        if self._held:
            self._emit(self._held if self._held.endswith("\n") else self._held + "\n")
            self._held = ""


@contextlib.contextmanager
def prefixed_output(prefix: str) -> Iterator[None]:
    """Within the block, every line this process prints to stdout and stderr starts with ``prefix``
    (:class:`LinePrefix`; the MPI ranks' lines too: :func:`rlexp.mpirun.run_mpi` passes them on)."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = LinePrefix(out, prefix), LinePrefix(err, prefix)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.close()
        sys.stdout, sys.stderr = out, err


def line_prefix(stream: TextIO) -> str | None:
    """The prefix ``stream`` puts before each line (a :class:`LinePrefix`), else None."""
    return stream.prefix if isinstance(stream, LinePrefix) else None
