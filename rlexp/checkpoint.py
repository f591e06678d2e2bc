"""Checkpoints: complete training state, written atomically, loaded without executing pickled code.

A checkpoint is a nested dict of tensors, numbers, strings, lists and dicts saved with
``torch.save``; ``torch.load(path, weights_only=True)`` reads it back with no unpickling of
arbitrary objects (numpy arrays are stored as tensors for that reason). The file is
``<run_dir>/checkpoints/epoch_<N>.pt`` where N counts completed epochs.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_bytes

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^epoch_(\d+)\.pt$")


def checkpoint_path(run_dir: str | os.PathLike, epoch: int) -> Path:
    """Where the checkpoint after ``epoch`` completed epochs lives."""
    return Path(run_dir) / CHECKPOINT_DIR / f"epoch_{epoch:06d}.pt"


def list_checkpoints(run_dir: str | os.PathLike) -> dict[int, Path]:
    """Completed-epoch count -> path, for every checkpoint of a run."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    found = {}
    if folder.is_dir():
        for p in folder.iterdir():
            m = _NAME.match(p.name)
            if m:
                found[int(m.group(1))] = p
    return dict(sorted(found.items()))


def _to_torch(obj: Any) -> Any:
    import torch

    if isinstance(obj, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(obj))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_torch(v) for v in obj)
    return obj


def save_torch(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Save ``state`` (numpy arrays become tensors) to ``path`` atomically."""
    import torch

    buf = io.BytesIO()
    torch.save(_to_torch(state), buf)
    atomic_write_bytes(path, buf.getvalue())


def load_torch(path: str | os.PathLike, map_location: Any = "cpu") -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``). A missing or corrupt file is an RLExpError."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise RLExpError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # truncated zip, wrong format, disallowed global ...
        raise RLExpError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
