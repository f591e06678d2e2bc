"""Atomic file writes (a reader sees the old file or the new one, never half of one), and keeping
the current directory off the import path."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rlexp.errors import RLExpError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory.

    With ``exclusive=True`` an existing ``path`` is never replaced: the call fails with
    :class:`RLExpError` and leaves that file untouched (the link step is atomic too).
    """
    with atomic_output(path, exclusive=exclusive) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike, text: str, *, exclusive: bool = False) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"), exclusive=exclusive)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, *, exclusive: bool = False) -> Iterator[Path]:
    """For files written by another program or library (a video encoder): yield a temporary path in
    ``path``'s directory; when the block ends without an error, move it to ``path`` in one step.

    On an error the temporary file is removed and ``path`` is untouched; an OSError (full disk,
    read-only file system, ...) becomes an RLExpError naming ``path``. ``exclusive`` as in
    :func:`atomic_write_bytes`.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    except FileExistsError:
        raise RLExpError(f"cannot write {path}: a part of that path is a file, not a directory") from None
    except OSError as exc:
        raise RLExpError(f"cannot write {path}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise RLExpError(f"{path} already exists; refusing to overwrite it") from None
        else:
            os.replace(tmp, path)
    except OSError as exc:  # full disk, read-only file system, no permission, an immutable file ...
        raise RLExpError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if tmp.exists():
            tmp.unlink()


def is_current_dir(entry: str) -> bool:
    """Whether a ``sys.path`` entry is the current directory (``python -m`` puts it first)."""
    return entry in ("", ".") or os.path.abspath(entry) == os.getcwd()


def drop_current_dir() -> None:
    """Import nothing more from the current directory: it may be a downloaded run directory whose
    .py files would run (``python -P`` does this from the start)."""
    sys.path[:] = [entry for entry in sys.path if not is_current_dir(entry)]
