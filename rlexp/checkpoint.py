"""Checkpoints: complete training state, written atomically, loaded without executing pickled code.

A checkpoint is a nested dict of arrays, numbers, strings, lists and dicts. The torch backend saves
it with ``torch.save`` (``torch.load(path, weights_only=True)`` reads it back with no unpickling of
arbitrary objects; numpy arrays are stored as tensors for that reason) as
``<run_dir>/checkpoints/epoch_<N>.pt``; the TensorFlow backend, which must not import torch, as
``epoch_<N>.npz``: the arrays in a numpy archive read with ``allow_pickle=False`` and the rest as
JSON. N counts completed epochs.

With MPI, rank r > 0 writes its own state (its RNGs, env episode, replay buffer) beside it as
``epoch_<N>.rank<r>.pt``; rank 0 writes ``epoch_<N>.pt`` last, so a checkpoint is complete exactly
when that file exists. Each checkpoint records the algorithm, backend, env and network that wrote
it, and loading it into a different run is refused with one line.

When the policy is evaluated (``algo.test_every``), ``best.pt`` (``best.npz``) beside them is the
checkpoint of the best mean test return so far, written by rank 0 only (the networks are the same on
every rank) with ``{"epoch", "score"}`` as its loop state, and ``best.json`` says the same in JSON. It
is never a resume point. A checkpoint whose loop state holds ``finished`` (the reason, a string) ends
its run: the run reached ``algo.stop_at_return`` and nothing continues it (:func:`finished_reason`).

Both formats are zip archives with a CRC-32 per member. torch's reader does not check them, so every
checkpoint is verified before it is loaded (:func:`verify_checkpoint`): a file with flipped bytes or
cut short is refused in one line, never loaded as wrong weights.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_bytes

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^epoch_(\d+)\.(pt|npz)$")
BEST_NAME = "best"  # checkpoints/best.pt or best.npz: the best evaluation score so far
# checkpoints/best.json: {"epoch": completed epochs, "score": mean test return, "actions": "deterministic",
# "episodes": test episodes of the score}
BEST_INFO = "best.json"


def checkpoint_path(run_dir: str | os.PathLike, epoch: int, suffix: str = ".pt") -> Path:
    """Where the checkpoint after ``epoch`` completed epochs lives (.pt: torch, .npz: TensorFlow)."""
    return Path(run_dir) / CHECKPOINT_DIR / f"epoch_{epoch:06d}{suffix}"


def best_checkpoint_path(run_dir: str | os.PathLike, suffix: str = ".pt") -> Path:
    """Where the checkpoint of the best evaluation score lives (.pt: torch, .npz: TensorFlow)."""
    return Path(run_dir) / CHECKPOINT_DIR / f"{BEST_NAME}{suffix}"


def find_best_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The run's best-score checkpoint (either backend's format), or None when it has none."""
    for suffix in (".pt", ".npz"):
        path = best_checkpoint_path(run_dir, suffix)
        if path.is_file():
            return path
    return None


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


def rank_path(path: str | os.PathLike, rank: int) -> Path:
    """The file of ``rank`` in the checkpoint whose rank-0 file is ``path``."""
    path = Path(path)
    return path if rank == 0 else path.with_name(f"{path.stem}.rank{rank}{path.suffix}")


def latest_checkpoint(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """(completed epochs, rank-0 path) of the newest complete checkpoint, or None."""
    ckpts = list_checkpoints(run_dir)
    return next(reversed(ckpts.items())) if ckpts else None


def delete_checkpoint(path: str | os.PathLike) -> None:
    """Remove a checkpoint: its rank-0 file first (it is no longer complete), then the other ranks'."""
    path = Path(path)
    path.unlink(missing_ok=True)
    for p in path.parent.glob(f"{path.stem}.rank*{path.suffix}"):
        p.unlink(missing_ok=True)


def prune_checkpoints(run_dir: str | os.PathLike, keep: int | None) -> None:
    """Delete all but the newest ``keep`` checkpoints (None keeps all)."""
    if keep is None:
        return
    for path in list(list_checkpoints(run_dir).values())[:-keep]:
        delete_checkpoint(path)


def checkpoint_meta(cfg: Any) -> dict[str, str]:
    """What identifies the networks and data of a run; stored in and checked against checkpoints.

    The network is named by its MLP (hidden sizes, activation), after its encoder when that is not
    ``mlp`` (so checkpoints of MLP runs keep the name they had before encoders existed).
    """
    net = cfg.network
    encoder = "" if net.encoder == "mlp" else f"{net.encoder} "
    return {
        "algo": cfg.algo.name,
        "backend": cfg.backend.name,
        "env": cfg.env.id,
        "network": f"{encoder}{list(net.hidden_sizes)} {net.activation}",
    }


def check_meta(ckpt: dict[str, Any], cfg: Any, path: str | os.PathLike) -> None:
    """Raise RLExpError unless the checkpoint ``ckpt`` read from ``path`` was written by a run like ``cfg``."""
    want = checkpoint_meta(cfg)
    have = {k: ckpt.get(k, want[k]) for k in want}  # keys missing from older checkpoints are not checked
    if have != want:
        desc = "algo={algo} backend={backend} env={env} network={network}"
        raise RLExpError(
            f"checkpoint {path} was written by {desc.format(**have)}; this run is {desc.format(**want)}"
        )


def read_checkpoint_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The identifying keys of a checkpoint (see :func:`checkpoint_meta`), read without loading its data.

    Checks that the file is readable: a truncated or corrupt checkpoint is an RLExpError.
    """
    return {k: v for k, v in _read_outline(path).items() if k not in ("learner", "loop")}


def finished_reason(path: str | os.PathLike) -> str | None:
    """Why the run of the checkpoint at ``path`` ended before ``algo.epochs`` as finished (it reached
    ``algo.stop_at_return``), or None when it did not. Reads neither its arrays nor, to check it,
    the whole file (a run's last checkpoint can hold gigabytes of replay buffer): call it on a
    checkpoint that was just written or verified."""
    reason = _read_outline(path, verify=False).get("loop", {}).get("finished")
    return None if reason is None else str(reason)


def _read_outline(path: str | os.PathLike, verify: bool = True) -> dict[str, Any]:
    """A checkpoint without its arrays' contents (npz: the JSON skeleton; torch: tensors mapped, not
    read), after checking that the file is whole (``verify``). Errors are RLExpError."""
    path = Path(path)
    if not path.is_file():
        raise RLExpError(f"checkpoint {path} does not exist")
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(data["__meta__"].tobytes().decode())
                names = set(data.files)
            if names != {"__meta__", *_array_keys(meta)}:
                raise ValueError("arrays missing")
        except Exception as exc:
            raise RLExpError(
                f"checkpoint {path} cannot be read ({type(exc).__name__}: {exc}){_older_hint(path)}"
            ) from None
        return meta
    if verify:
        verify_checkpoint(path)
    return load_torch(path, map_location="cpu", mmap=True)


def verify_checkpoint(path: str | os.PathLike) -> None:
    """Raise RLExpError unless the checkpoint at ``path`` is whole: a readable zip archive whose
    every member matches its CRC-32 (reads the whole file once)."""
    path = Path(path)
    if not path.is_file():
        raise RLExpError(f"checkpoint {path} does not exist")
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        raise RLExpError(
            f"checkpoint {path} cannot be read: it is truncated or damaged ({exc}){_older_hint(path)}"
        ) from None
    if bad is not None:
        raise RLExpError(
            f"checkpoint {path} cannot be read: it is damaged (its part {bad!r} fails the CRC check)"
            f"{_older_hint(path)}"
        )


def _older_hint(path: Path) -> str:
    """For an error about the damaged checkpoint ``path`` of a run: the run's checkpoint before it, and
    how to go on from there (resume and rlexp.load take the newest; test_policy --itr picks one)."""
    m = _NAME.match(path.name)
    if path.parent.name != CHECKPOINT_DIR or m is None:
        return ""
    older = [(e, p) for e, p in list_checkpoints(path.parent.parent).items() if e < int(m.group(1))]
    if not older:
        return ""
    epoch, before = older[-1]
    return (
        f"; the checkpoint before it is {before.name}: move {path.name} out of {path.parent} to resume or"
        f" load from that one (test_policy --itr {epoch} reads it as it is)"
    )


def _array_keys(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        if set(obj) == {"__array__"}:
            return [obj["__array__"]]
        return [k for v in obj.values() for k in _array_keys(v)]
    if isinstance(obj, list):
        return [k for v in obj for k in _array_keys(v)]
    return []


def _to_torch(obj: Any) -> Any:
    import torch

    if isinstance(obj, np.ndarray):
        # asarray(order="C"), not ascontiguousarray: that makes a 0-d array 1-d, so a 0-d statistic
        # came back from the file with another shape (issue 34)
        return torch.from_numpy(np.asarray(obj, order="C"))
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


def load_torch(path: str | os.PathLike, map_location: Any = "cpu", mmap: bool = False) -> dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``). A missing or corrupt file is an RLExpError.

    ``mmap``: map the tensors instead of reading them (cheap when only the metadata is needed).
    """
    import torch

    path = Path(path)
    if not mmap:
        verify_checkpoint(path)
    elif not path.is_file():
        raise RLExpError(f"checkpoint {path} does not exist")
    try:
        return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except Exception as exc:  # truncated zip, wrong format, disallowed global ...
        if "weights_only" in str(exc) or "Weights only" in str(exc):
            why = "it holds objects other than tensors and plain data, and rlexp never unpickles code"
        else:
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        raise RLExpError(f"checkpoint {path} cannot be read ({why})") from None


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
    verify_checkpoint(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        return _join(json.loads(arrays.pop("__meta__").tobytes().decode()), arrays)
    except Exception as exc:  # truncated archive, bad JSON ...
        raise RLExpError(
            f"checkpoint {path} cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0]})"
        ) from None
