"""Spinning Up's Logger and EpochLogger: progress.txt, config.json, a console table per epoch and,
optionally, TensorBoard event files with the same names.

Same file format and column names as Spinning Up, so its plotting habits carry over: progress.txt is
tab-separated with a header row. Only rank 0 prints and writes. Two faults of the original are fixed:
an existing progress.txt is never overwritten (the logger refuses to start), and an epoch in which a
stored key got no value (say, no episode finished) logs NaN instead of crashing.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import rlexp.comm as comm
from rlexp.display import epochs
from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.tblog import TensorBoardWriter

PROGRESS_FILE = "progress.txt"
EPISODES_FILE = "episodes.csv"  # logger.episodes: one line per training episode (Epoch,EpRet,EpLen)
# The columns of logger.console=line, where the run logs them
LINE_COLUMNS = ("Epoch", "TotalEnvInteracts", "AverageEpRet", "AverageTestEpRet", "EpLen", "Time")
_COLORS = dict(gray=30, red=31, green=32, yellow=33, blue=34, magenta=35, cyan=36, white=37, crimson=38)


def use_color(stream: Any = None) -> bool:
    """Colours only on a terminal (never in a SLURM log or a file), unless NO_COLOR is set or
    FORCE_COLOR asks for them anyway."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    stream = sys.stdout if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


def colorize(string: str, color: str, bold: bool = False, highlight: bool = False) -> str:
    """Wrap ``string`` in ANSI color codes (Spinning Up's colorize) when stdout is a terminal."""
    if not use_color():
        return string
    num = _COLORS[color] + (10 if highlight else 0)
    attrs = [str(num)] + (["1"] if bold else [])
    return f"\x1b[{';'.join(attrs)}m{string}\x1b[0m"


def convert_json(obj: Any) -> Any:
    """Make ``obj`` JSON-serialisable: containers recursively, anything else by name or str()."""
    if isinstance(obj, dict):
        return {str(k): convert_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [convert_json(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if hasattr(obj, "__name__") and "lambda" not in obj.__name__:
        return obj.__name__
    return str(obj)


def save_config(
    output_dir: str | os.PathLike, config: dict[str, Any], exp_name: str | None = None, exclusive: bool = True
) -> None:
    """Write Spinning Up's config.json (sorted keys, indent 4, exp_name added) atomically.

    ``exclusive``: never over an existing one (False only when a resumed run's config changed).
    """
    config = convert_json(config)
    if exp_name is not None:
        config = {**config, "exp_name": exp_name}
    text = json.dumps(config, separators=(",", ":\t"), indent=4, sort_keys=True)
    atomic_write_text(Path(output_dir) / "config.json", text + "\n", exclusive=exclusive)


def check_progress(path: Path, rows: int) -> list[str]:
    """The lines of the progress.txt at ``path`` that a run resumed after ``rows`` epochs keeps (its
    header and first ``rows`` rows), checked to be a whole table; raise RLExpError otherwise.

    Lines after those (the epochs after the checkpoint, or a last line cut off by a crash or a full
    disk) are dropped by the resumed run, which logs those epochs again.
    """
    if not path.is_file():
        if rows == 0:
            return []
        raise RLExpError(
            f"{path} is missing; the run's checkpoint is after {epochs(rows)}, so its log had {rows} rows"
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise RLExpError(f"{path} cannot be read ({exc}); it is damaged") from None
    if not lines:
        if rows == 0:
            return []
        raise RLExpError(f"{path} is empty; the run's checkpoint is after {epochs(rows)}")
    kept = lines[: rows + 1]
    if len(kept) < rows + 1:
        raise RLExpError(f"{path} has {len(lines) - 1} rows, fewer than the {rows} epochs of its checkpoint")
    width = len(kept[0].rstrip("\n").split("\t"))
    for number, line in enumerate(kept, 1):
        fields = len(line.rstrip("\n").split("\t"))
        if not line.endswith("\n") or fields != width:
            raise RLExpError(
                f"{path} line {number} is cut off or damaged ({fields} fields under a {width}-field header); "
                f"the run's checkpoint needs its first {rows} rows whole"
            )
    return kept


def _fmt(val: Any) -> str:
    if isinstance(val, (float, np.floating)):
        return f"{val:8.3g}"
    return str(val)


class Logger:
    """Tabular logger: ``log_tabular(key, val)`` fills a row, ``dump_tabular()`` prints and writes it.

    :param output_dir: run directory; progress.txt goes there (rank 0 only). None: console only.
    :param output_fname: name of the tab-separated log (Spinning Up's ``progress.txt``).
    :param exp_name: experiment name written into config.json.
    :param console: what each epoch prints on stdout: ``table`` (Spinning Up's table of every column),
        ``line`` (one line: epoch, steps, returns, time) or ``quiet`` (nothing).
    :param resume_rows: continue an existing log after its first ``resume_rows`` rows (the epochs of
        the checkpoint a run resumes from); later rows, which the resumed run writes again, are
        dropped. None: a new log, and an existing one is an error.
    :param tensorboard: also write each row as TensorBoard scalars (same names as the columns) to an
        event file beside progress.txt; the step is the row's TotalEnvInteracts, else the row number.
        A resumed log starts a new event file that tells TensorBoard to drop the old file's values
        from the resume point on (they are logged again). Needs ``output_dir``.
    :param wandb: also send each row to Weights & Biases (:class:`rlexp.wandblog.WandbWriter`, made
        by rank 0 only; it is a callable so that other ranks never import wandb). Needs ``output_dir``.
    :param episodes: also write ``episodes.csv`` (:meth:`EpochLogger.log_episodes`): the return and
        length of every training episode, with the Epoch of the row it is counted in. A resumed log
        keeps the lines of the rows it keeps. Needs ``output_dir``.
    """

    def __init__(
        self,
        output_dir: str | os.PathLike | None,
        output_fname: str = PROGRESS_FILE,
        exp_name: str | None = None,
        console: str = "table",
        resume_rows: int | None = None,
        tensorboard: bool = False,
        wandb: Callable[[], Any] | None = None,
        episodes: bool = False,
    ) -> None:
        self.active = comm.proc_id() == 0
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.exp_name = exp_name
        self.console = console if self.active else "quiet"
        self.first_row = True
        self.log_headers: list[str] = []
        self.log_current_row: dict[str, Any] = {}
        self.output_file = None
        self.tb_writer: TensorBoardWriter | None = None
        self.wandb_writer: Any = None
        self.rows = 0
        self.episodes_file = None
        self.episodes = episodes
        last_epoch: str | None = None  # the Epoch of the last row a resumed log keeps
        if self.active and self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            path = self.output_dir / output_fname
            restart_step = None
            if resume_rows is not None and path.exists():
                restart_step, last_epoch = self._continue(path, resume_rows)
            else:
                try:
                    # 'x': never overwrite the progress of an earlier run (Spinning Up opened it with 'w').
                    self.output_file = open(path, "x", encoding="utf-8")  # noqa: SIM115 (closed in close())
                except FileExistsError:
                    raise RLExpError(
                        f"{path} already exists; refusing to overwrite an earlier run's log"
                    ) from None
                if self.console != "quiet":
                    print(colorize(f"Logging data to {path}", "green", bold=True), flush=True)
            if tensorboard:
                self.tb_writer = TensorBoardWriter(self.output_dir, restart_step)
            if wandb is not None:
                self.wandb_writer = wandb()
            if episodes:
                self.episodes_file = _open_episodes(self.output_dir / EPISODES_FILE, last_epoch)

    def _continue(self, path: Path, rows: int) -> tuple[int, str | None]:
        """Open ``path`` for appending after its header and first ``rows`` rows; return the first
        TensorBoard step the resumed run logs again (the last kept TotalEnvInteracts + 1, else ``rows``)
        and the Epoch of the last kept row (None: none kept)."""
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = check_progress(path, rows)
        if not kept:  # the run stopped before its first row: start the log afresh
            self.output_file = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed in close())
            return 0, None
        if len(lines) > len(kept):  # epochs logged after the checkpoint: the resumed run logs them again
            atomic_write_text(path, "".join(kept))
        self.log_headers = kept[0].rstrip("\n").split("\t")
        self.first_row = False
        self.rows = rows
        self.output_file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        if self.console != "quiet":
            dropped = f"; dropped {len(lines) - len(kept)} later rows" if len(lines) > len(kept) else ""
            print(
                colorize(f"Continuing {path} after {epochs(rows)}{dropped}", "green", bold=True), flush=True
            )
        last_row = (
            dict(zip(self.log_headers, kept[-1].rstrip("\n").split("\t"), strict=False)) if rows else {}
        )
        if "TotalEnvInteracts" in last_row:
            try:
                return int(float(last_row["TotalEnvInteracts"])) + 1, last_row.get("Epoch")
            except ValueError:
                pass
        return rows, last_row.get("Epoch")

    def log(self, msg: str, color: str = "green") -> None:
        """Print a colorized message (rank 0 only; nothing with console quiet)."""
        if self.console != "quiet":
            print(colorize(msg, color, bold=True), flush=True)

    def log_tabular(self, key: str, val: Any) -> None:
        """Set ``key`` of the current row. The first row fixes the columns; later rows may not add any."""
        if self.first_row:
            self.log_headers.append(key)
        elif key not in self.log_headers:
            raise KeyError(
                f"Trying to introduce a new key {key} that you didn't include in the first iteration"
            )
        if key in self.log_current_row:
            raise KeyError(f"You already set {key} this iteration. Maybe you forgot to call dump_tabular()")
        self.log_current_row[key] = val

    def current(self, key: str) -> Any:
        """The value of ``key`` in the row being filled (None before it is logged); every rank has it."""
        return self.log_current_row.get(key)

    def save_config(self, config: dict[str, Any]) -> None:
        """Write config.json (rank 0 only); see :func:`save_config`."""
        if self.active and self.output_dir is not None:
            save_config(self.output_dir, config, self.exp_name)

    def dump_tabular(self) -> dict[str, Any]:
        """Print the row as an aligned table, append it to progress.txt, start a new row; return it."""
        row = {k: self.log_current_row.get(k, "") for k in self.log_headers}
        if self.active:
            if self.console == "table":
                width = max(15, *(len(k) for k in self.log_headers))
                line = "-" * (22 + width)
                body = "\n".join(f"| {k:>{width}} | {_fmt(v):>15} |" for k, v in row.items())
                print(f"{line}\n{body}\n{line}", flush=True)
            elif self.console == "line":
                print("  ".join(f"{k} {_fmt(row[k]).strip()}" for k in LINE_COLUMNS if k in row), flush=True)
            if self.output_file is not None:
                out = ""
                if self.first_row:
                    out += "\t".join(self.log_headers) + "\n"
                out += "\t".join(str(v) for v in row.values()) + "\n"
                try:
                    self.output_file.write(out)  # one write per row: a reader never sees half a row
                    self.output_file.flush()
                except OSError as exc:
                    raise RLExpError(f"cannot write {self.output_file.name}: {exc.strerror or exc}") from None
            if self.tb_writer is not None:
                step = row.get("TotalEnvInteracts", self.rows)
                self.tb_writer.add_scalars(row, step if step != "" else self.rows)
            if self.wandb_writer is not None:
                self.wandb_writer.log(row)
        self.rows += 1
        self.log_current_row.clear()
        self.first_row = False
        return row

    def close(self) -> None:
        """Close progress.txt, episodes.csv and the TensorBoard event file."""
        if self.output_file is not None:
            self.output_file.close()
            self.output_file = None
        if self.episodes_file is not None:
            self.episodes_file.close()
            self.episodes_file = None
        if self.tb_writer is not None:
            self.tb_writer.close()
            self.tb_writer = None
        if self.wandb_writer is not None:
            self.wandb_writer.close()
            self.wandb_writer = None


def _open_episodes(path: Path, last_epoch: str | None) -> Any:
    """episodes.csv opened for appending: a new file with its header, or a resumed run's, cut back to
    the lines of the epochs up to ``last_epoch`` (those the resumed progress.txt keeps; None: none)."""
    header = "Epoch,EpRet,EpLen\n"
    if path.exists():
        try:
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        except (OSError, UnicodeDecodeError) as exc:
            raise RLExpError(f"{path} cannot be read ({exc}); it is damaged") from None
        kept = [header]
        if last_epoch is not None:
            keep = float(last_epoch)
            for line in lines[1:]:
                fields = line.rstrip("\n").split(",")
                if not line.endswith("\n") or len(fields) != 3 or float(fields[0]) > keep:
                    break
                kept.append(line)
        if kept != lines:
            atomic_write_text(path, "".join(kept))
        return open(path, "a", encoding="utf-8")
    out = open(path, "x", encoding="utf-8")  # noqa: SIM115 (closed in close())
    out.write(header)
    out.flush()
    return out


class EpochLogger(Logger):
    """Logger that also collects values during an epoch and logs their statistics pooled over ranks.

    ``store(LossPi=0.3, EpRet=[...])`` appends; ``log_tabular("EpRet", with_min_and_max=True)``
    writes AverageEpRet, StdEpRet, MaxEpRet, MinEpRet. Every rank must call ``log_tabular`` for the
    same keys in the same order (the statistics are MPI collectives).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epoch_dict: dict[str, list[Any]] = {}

    def store(self, **kwargs: Any) -> None:
        """Append one value (or an array of values) per key to this epoch's lists."""
        for k, v in kwargs.items():
            self.epoch_dict.setdefault(k, []).append(v)

    def log_episodes(self) -> None:
        """With ``episodes``: append every rank's training episodes of this epoch (the stored EpRet and
        EpLen, rank after rank) to episodes.csv, tagged with the row's Epoch. A collective then."""
        if not self.episodes:
            return
        mine = (self._peek("EpRet").tolist(), self._peek("EpLen").tolist())
        everyone = comm.allgather_objects(mine)
        if self.episodes_file is None:
            return
        epoch = self.log_current_row.get("Epoch", self.rows)
        out = "".join(
            f"{epoch},{ret!r},{int(length)}\n"
            for rets, lengths in everyone
            for ret, length in zip(rets, lengths, strict=True)
        )
        try:
            self.episodes_file.write(out)  # one write per epoch
            self.episodes_file.flush()
        except OSError as exc:
            raise RLExpError(f"cannot write {self.episodes_file.name}: {exc.strerror or exc}") from None

    def _peek(self, key: str) -> np.ndarray:
        """The values stored under ``key`` this epoch, left in place."""
        vals = self.epoch_dict.get(key, [])
        if not vals:
            return np.zeros(0)
        return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in vals])

    def _values(self, key: str) -> np.ndarray:
        vals = self.epoch_dict.pop(key, [])
        if not vals:
            return np.zeros(0)
        if all(np.ndim(v) == 0 for v in vals):
            return np.asarray(vals, dtype=np.float64)
        return np.concatenate([np.ravel(np.asarray(v, dtype=np.float64)) for v in vals])

    def log_tabular(  # type: ignore[override]
        self, key: str, val: Any = None, with_min_and_max: bool = False, average_only: bool = False
    ) -> None:
        """Log ``val`` under ``key``, or, without ``val``, the pooled statistics of the stored values."""
        if val is not None:
            super().log_tabular(key, val)
            return
        stats = comm.statistics_scalar(self._values(key), with_min_and_max=with_min_and_max)
        super().log_tabular(key if average_only else "Average" + key, stats[0])
        if not average_only:
            super().log_tabular("Std" + key, stats[1])
        if with_min_and_max:
            super().log_tabular("Max" + key, stats[3])
            super().log_tabular("Min" + key, stats[2])
