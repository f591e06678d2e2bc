"""TensorBoard event files, written without TensorFlow or PyTorch.

The ``tensorboard`` package's own pieces do the work: its ``RecordWriter`` frames the records (length,
masked CRC32C) and its protobuf classes encode ``Event``/``Summary``. Its higher-level
``EventFileWriter`` is not used because it opens files through ``tensorboard.compat.tf``, which imports
TensorFlow whenever TensorFlow is installed, and a torch run must never import TensorFlow. The file is
a plain local file opened exclusively, so an existing event file is never overwritten.
"""

from __future__ import annotations

import math
import os
import socket
import time
from pathlib import Path
from typing import Any

# TensorBoard reads any file whose name contains "tfevents"; this is the name its writers use.
_NAME = "events.out.tfevents.{time:010d}.{host}.{pid}.0"


class TensorBoardWriter:
    """Append scalar summaries to a new event file in ``logdir``.

    :param logdir: the directory to write into (a run directory: the file lies beside progress.txt).
    """

    def __init__(self, logdir: str | os.PathLike) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        now = time.time()
        name = _NAME.format(time=int(now), host=socket.gethostname(), pid=os.getpid())
        self.path = Path(logdir) / name
        self._writer = RecordWriter(open(self.path, "xb"))  # noqa: SIM115 (closed in close())
        # TensorBoard expects the first record of a file to name the format version.
        self._write(Event(wall_time=now, step=0, file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def add_scalars(self, values: dict[str, Any], step: int) -> None:
        """One event at ``step`` holding every value of ``values`` that is a finite number (tag = key)."""
        summary = self._summary(
            value=[
                self._summary.Value(tag=key, simple_value=float(v))
                for key, v in values.items()
                if _is_number(v) and math.isfinite(float(v))
            ]
        )
        self._write(self._event(wall_time=time.time(), step=int(step), summary=summary))
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        if not self._writer.closed:
            self._writer.close()


def _is_number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, (str, bytes))
