"""TensorBoard event files, written without TensorFlow or PyTorch.

The ``tensorboard`` package's own pieces do the work: its ``RecordWriter`` frames the records (length,
masked CRC32C) and its protobuf classes encode ``Event``/``Summary``. Its higher-level
``EventFileWriter`` is not used because it opens files through ``tensorboard.compat.tf``, which imports
TensorFlow whenever TensorFlow is installed, and a torch run must never import TensorFlow. The file is
a plain local file opened exclusively, so an existing event file is never overwritten.
"""

from __future__ import annotations

import io
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import RLExpError

# TensorBoard reads any file whose name contains "tfevents"; this is the name its writers use.
_NAME = "events.out.tfevents.{time:010d}.{host}.{pid}.{count}"


class TensorBoardWriter:
    """Append scalar summaries to a new event file in ``logdir``.

    :param logdir: the directory to write into (a run directory: the file lies beside progress.txt).
    :param restart_step: for a resumed run, the first step it logs again: a session-start event at
        that step makes TensorBoard discard what earlier files logged from there on (they are
        logged again), so a resumed run shows one curve. None for a new run.
    """

    def __init__(self, logdir: str | os.PathLike, restart_step: int | None = None) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event, self._summary = Event, Summary
        now = time.time()
        # TensorBoard reads a directory's files in name order: a later file (the same second and
        # process too, by the counter at the end) sorts after an earlier one.
        for count in range(1000):
            name = _NAME.format(time=int(now), host=socket.gethostname(), pid=os.getpid(), count=count)
            self.path = Path(logdir) / name
            try:
                file = open(self.path, "xb")  # noqa: SIM115 (closed in close())
                break
            except FileExistsError:
                continue
        else:
            raise RLExpError(f"{logdir} has 1000 event files of this second and process; cannot add one")
        self._writer = RecordWriter(file)
        # TensorBoard expects the first record of a file to name the format version.
        self._write(Event(wall_time=now, step=0, file_version="brain.Event:2"))
        if restart_step is not None:
            start = SessionLog(status=SessionLog.START)
            self._write(Event(wall_time=now, step=int(restart_step), session_log=start))
        self._writer.flush()

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

    def add_animation(self, tag: str, frames: list[Any], step: int, fps: float) -> None:
        """An animated GIF of ``frames`` (height x width x 3, uint8) as the image ``tag`` at ``step``:
        TensorBoard's Images tab plays it (what its own ``add_video`` writes, encoded by Pillow)."""
        from PIL import Image

        images = [Image.fromarray(np.ascontiguousarray(f, dtype=np.uint8)) for f in frames]
        buf = io.BytesIO()
        duration = max(20, round(1000 / fps))  # ms per frame; browsers play faster GIFs at 100 ms
        images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=duration, loop=0)
        height, width = frames[0].shape[:2]
        image = self._summary.Image(
            height=height, width=width, colorspace=3, encoded_image_string=buf.getvalue()
        )
        summary = self._summary(value=[self._summary.Value(tag=tag, image=image)])
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
