"""Checkpoints: complete training state, written atomically, loaded without executing pickled code.

A checkpoint is a nested dict of arrays, numbers, strings, lists and dicts. The torch backend saves
it with ``torch.save`` (``torch.load(path, weights_only=True)`` reads it back with no unpickling of
arbitrary objects; numpy arrays are stored as tensors for that reason) as
``<run_dir>/checkpoints/epoch_<N>.pt``; the TensorFlow backend, which must not import torch, as
``epoch_<N>.npz``: the arrays in a numpy archive read with ``allow_pickle=False`` and the rest as
JSON. N counts completed epochs.
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_bytes

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^epoch_(\d+)\.(pt|npz)$")


def checkpoint_path(run_dir: str | os.PathLike, epoch: int, suffix: str = ".pt") -> Path:
    """Where the checkpoint after ``epoch`` completed epochs lives (.pt: torch, .npz: TensorFlow)."""
    return Path(run_dir) / CHECKPOINT_DIR / f"epoch_{epoch:06d}{suffix}"


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


def _split(obj: Any, arrays: dict[str, np.ndarray]) -> Any:
    """JSON-able skeleton of ``obj`` with every array replaced by a reference into ``arrays``."""
    if isinstance(obj, np.ndarray):
        key = f"a{len(arrays)}"
        arrays[key] = obj
        return {"__array__": key}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {str(k): _split(v, arrays) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_split(v, arrays) for v in obj]
    return obj


def _join(obj: Any, arrays: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return arrays[obj["__array__"]]
        return {k: _join(v, arrays) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_join(v, arrays) for v in obj]
    return obj


def save_npz(path: str | os.PathLike, state: dict[str, Any]) -> None:
    """Save ``state`` as a numpy archive (arrays) plus a JSON skeleton, atomically."""
    arrays: dict[str, np.ndarray] = {}
    meta = json.dumps(_split(state, arrays))
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(meta.encode(), dtype=np.uint8), **arrays)
    atomic_write_bytes(path, buf.getvalue())


def load_npz(path: str | os.PathLike) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_npz` (``allow_pickle=False``). Errors are RLExpError."""
    path = Path(path)
    if not path.is_file():
        raise RLExpError(f"checkpoint {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        return _join(json.loads(arrays.pop("__meta__").tobytes().decode()), arrays)
    except Exception as exc:  # truncated archive, bad JSON ...
        raise RLExpError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
