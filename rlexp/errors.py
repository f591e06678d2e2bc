"""Errors a user can cause and fix. They end a command with one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class RLExpError(Exception):
    """A problem in the user's input (config, env id, files): printed as ``rlexp: error: <msg>``."""

    exit_code: int = 2


class ConfigError(RLExpError):
    """A config value that is of the wrong type, out of range, or unknown."""


class WorkerError(RLExpError):
    """The MPI workers of a run exited with a failure status (their own output says why); the
    launcher exits with that status."""

    exit_code = 1


class JobFailed(RLExpError):
    """A job of a sweep on this machine ended with a user error whose line it has printed: the sweep
    counts it as failed, goes on with the other jobs and names it in its summary."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def __reduce__(self) -> tuple[type, tuple[str, int]]:  # keeps exit_code through a process pool
        return JobFailed, (str(self), self.exit_code)


def user_error(exc: BaseException) -> str | None:
    """One line for an error of the machine or the files rather than of rlexp: an OSError that names
    a file (disk full, read-only file system, no permission, an immutable file). None otherwise."""
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"cannot write or read {exc.filename}: {exc.strerror or exc}"
    return None


def report(exc: RLExpError, context: str = "") -> None:
    """Print ``exc`` as the one line ``rlexp: error: [context: ]message`` on stderr."""
    prefix = f"{context}: " if context else ""
    print(f"rlexp: error: {prefix}{exc}", file=sys.stderr, flush=True)


def check(condition: bool, message: str) -> None:
    """Raise :class:`ConfigError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(message)


def check_at_least(group: object, **minimums: float) -> None:
    """Raise :class:`ConfigError` naming the first key of ``group`` (an ``algo`` config) whose value
    is below its minimum: ``check_at_least(cfg, start_steps=0, update_every=1)``."""
    for key, minimum in minimums.items():
        value = getattr(group, key)
        check(value >= minimum, f"algo.{key}={value} is out of range; use >= {minimum}")


def argument_parser(**kwargs: object) -> argparse.ArgumentParser:
    """An ``argparse.ArgumentParser`` whose usage errors (unknown option, bad value) are one line
    ``rlexp: error: <prog>: ...`` and exit status 2, like every other error a user can cause."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            print(f"rlexp: error: {self.prog}: {message} (see --help)", file=sys.stderr, flush=True)
            raise SystemExit(2)

    return _Parser(**kwargs)  # type: ignore[arg-type]
