"""The run directory: claiming it, its records (config.yaml, config.json, overrides, provenance), and
deciding whether a job may start, continue or resume in it.

Guarantees (each tested in tests/test_rundir.py):

- **One job per directory.** A launcher holds ``RUN_DIR/.lock`` (``flock``, exclusive) for the whole
  job and every training process holds ``RUN_DIR/.ranks.lock`` (shared) for its life, so a directory
  is refused while its launcher or any rank of it lives. The lock is taken before anything is
  written. Locks go with their processes: a killed job never leaves one taken.
- **Never touch files rlexp did not write.** A new run starts only in a directory that does not exist
  or is empty; anything else that is not an rlexp run (no config.yaml) is refused in one line before
  anything is written.
- **A failed continuation changes nothing.** Before a job continues a run, everything it will read is
  checked (the config, progress.txt, every rank's file of the checkpoint); only then are config.yaml,
  config.json and provenance.resume<k>.json written.
"""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlexp.checkpoint import check_meta, latest_checkpoint, rank_path, read_checkpoint_meta, verify_checkpoint
from rlexp.config import CONFIG_FILE, load_config, load_run_config, read_run_config, runs_inside, to_container
from rlexp.errors import ConfigError, RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.logger import PROGRESS_FILE, check_progress, colorize, save_config
from rlexp.provenance import collect, write_provenance
from rlexp.schema import RLExpConfig

LOCK_FILE = ".lock"  # held (exclusive) by the launcher of the job that trains in the directory
RANKS_LOCK_FILE = ".ranks.lock"  # held (shared) by every training process of that job
_LOCKS = (LOCK_FILE, RANKS_LOCK_FILE)
# What ``resume=RUN_DIR`` may change; everything else comes from the run's config.yaml.
RESUMABLE_KEYS = (
    "algo.epochs",
    "backend.device",  # a GPU run continues on the CPU or the other way round (exact only on the same device)
    "comm.nodes",
    "comm.hostfile",
    "comm.interface",
    "comm.mpiexec",
    "comm.oversubscribe",
    "comm.extra_args",
    "logger.console",
    "logger.progress",
    "logger.video_every",
)
CONFIG_HEADER = "# Fully resolved config of this run (what every rank trains with). Written by rlexp.\n"


def _entries(run_dir: Path) -> list[str]:
    """What ``run_dir`` holds besides rlexp's lock files (sorted names)."""
    return sorted(p.name for p in run_dir.iterdir() if p.name not in _LOCKS)


def check_place(run_dir: Path) -> None:
    """Before anything is written: ``run_dir`` can be a run directory (absent, a directory holding an
    rlexp run, or an empty directory). Raise RLExpError otherwise."""
    for parent in [run_dir, *run_dir.parents]:
        if parent.exists() and not parent.is_dir():
            raise RLExpError(f"run directory {run_dir}: {parent} is a file, not a directory; choose another")
    if run_dir.is_dir() and not (run_dir / CONFIG_FILE).is_file():
        check_new(run_dir)


def check_new(run_dir: Path) -> None:
    """A new run starts only in an empty directory: anything else there was not written by it."""
    found = _entries(run_dir) if run_dir.is_dir() else []
    if found:
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise RLExpError(
            f"run directory {run_dir} is not empty and holds no rlexp run (no {CONFIG_FILE}; it has {shown}); "
            "rlexp never writes into files it did not make: choose a new or empty hydra.run.dir"
        )


def _try_lock(path: Path, mode: int) -> Any:
    """``path`` opened and flock'ed with ``mode`` (non-blocking), or None when another process holds it."""
    f = open(path, "a+")  # noqa: SIM115 (the caller closes it)
    try:
        fcntl.flock(f, mode | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


@contextlib.contextmanager
def claim(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for this job: refused (one line) while another job's launcher or ranks live.

    Creates the directory if needed; taken before anything else is written into it. If the job fails
    before writing anything, the lock files and the directory it made are removed again.
    """
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RLExpError(f"cannot create run directory {run_dir}: {exc.strerror}") from None
    lock = _try_lock(run_dir / LOCK_FILE, fcntl.LOCK_EX)
    if lock is None:
        raise RLExpError(f"{run_dir} is in use by another rlexp process; wait for it to end")
    try:
        ranks = _try_lock(run_dir / RANKS_LOCK_FILE, fcntl.LOCK_EX)
        if ranks is None:
            raise RLExpError(
                f"{run_dir} is in use by training processes of an earlier job that are still ending; "
                "try again in a few seconds"
            )
        ranks.close()  # free: only checked here; the training processes take it shared
        yield
    except BaseException:
        if not _entries(run_dir):  # nothing but our locks: leave no trace (still holding the lock)
            for name in _LOCKS:
                (run_dir / name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                run_dir.rmdir()
        raise
    finally:
        lock.close()


@contextlib.contextmanager
def training_lock(run_dir: Path) -> Iterator[None]:
    """Held by every training process (each rank) while it lives: see :func:`claim`."""
    lock = _try_lock(run_dir / RANKS_LOCK_FILE, fcntl.LOCK_SH)
    if lock is None:
        raise RLExpError(f"{run_dir} is being claimed by another rlexp job; this rank does not train in it")
    try:
        yield
    finally:
        lock.close()


def in_use(run_dir: Path) -> bool:
    """Whether a job holds ``run_dir`` now (its launcher or any rank of it lives): what :func:`claim`
    would refuse. Takes and releases the locks at once; creates no file."""
    for name in _LOCKS:
        if (run_dir / name).is_file():
            lock = _try_lock(run_dir / name, fcntl.LOCK_EX)
            if lock is None:
                return True
            lock.close()
    return False


def remove_if_empty(run_dir: Path) -> None:
    """After a job ended with an error: remove ``run_dir`` if it is empty (Hydra makes it before the
    job starts); anything in it, another job's lock file included, stays."""
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def write_run_records(
    cfg: RLExpConfig, run_dir: Path, overrides: list[str], choices: dict[str, str | None] | None = None
) -> None:
    """The records of a new run: the resolved config (config.yaml), the overrides, Spinning Up's
    config.json and provenance.json (command line, the preset of each config group in ``choices``,
    git commit, package versions, machine, seeds).

    Every file is written exclusively (never over an existing one). config.yaml comes first: a job
    killed after it leaves a run that the same command continues. If a file cannot be written, the
    ones written before it are removed again.
    """
    resolved = to_container(cfg)
    written: list[Path] = []
    try:
        for path, text in (
            (run_dir / CONFIG_FILE, CONFIG_HEADER + OmegaConf.to_yaml(resolved)),
            (run_dir / "overrides.yaml", OmegaConf.to_yaml(list(overrides))),
        ):
            atomic_write_text(path, text, exclusive=True)
            written.append(path)
        save_config(run_dir, resolved, cfg.exp_name)
        written.append(run_dir / "config.json")
        written.append(write_provenance(run_dir, collect(cfg, overrides, choices=choices)))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise


def first_difference(old: Any, new: Any, prefix: str = "") -> str | None:
    """The dotted key at which two config containers first differ, with both values (None: equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            diff = first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if diff is not None:
                return diff
        return None
    return None if old == new else f"{prefix.rstrip('.')}: {old!r} there, {new!r} now"


def stored_config(run_dir: Path) -> DictConfig:
    """The config.yaml of the run in ``run_dir`` (parsed only: nothing in it is imported)."""
    # (Hydra has made a missing directory by now, as the run directory: removed again after the error)
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        raise RLExpError(
            f"resume={run_dir}: no such run (the directory is missing or empty); give the directory of an rlexp run"
        )
    if not (run_dir / CONFIG_FILE).is_file():
        raise RLExpError(
            f"resume={run_dir}: no {CONFIG_FILE} there; give the directory of an rlexp run{runs_inside(run_dir)}"
        )
    return read_run_config(run_dir)


def resume_config(cfg: RLExpConfig, overrides: list[str]) -> RLExpConfig:
    """The config to continue ``cfg.resume`` with: its own, plus the RESUMABLE_KEYS given now."""
    run_dir = Path(str(cfg.resume))
    stored = stored_config(run_dir)
    epochs = OmegaConf.select(stored, "algo.epochs")
    current = OmegaConf.structured(cfg)
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in ("resume", "allow_env_import", "dry_run"):
            continue
        if key not in RESUMABLE_KEYS:
            raise RLExpError(
                f"resume={run_dir} continues that run with its own config; {override} cannot be changed "
                f"(only {', '.join(RESUMABLE_KEYS)})"
            )
        OmegaConf.update(stored, key, OmegaConf.select(current, key), force_add=True)
    stored.resume = str(run_dir)
    stored.allow_env_import = cfg.allow_env_import
    stored.dry_run = cfg.dry_run
    try:
        resumed = load_config(stored)
    except ConfigError as exc:
        raise ConfigError(f"{run_dir / CONFIG_FILE}: {exc}") from None
    schedule = resumed.algo.epochs_schedule()
    if schedule is not None and resumed.algo.epochs != epochs:
        raise RLExpError(
            f"resume={run_dir} algo.epochs={resumed.algo.epochs}: that run's schedule spans its own "
            f"algo.epochs={epochs} ({schedule}), so its epochs so far differ from those of a run of "
            f"{resumed.algo.epochs}; continue it with its {epochs} epochs, or start a new run"
        )
    return resumed


def check_resumable(cfg: RLExpConfig, run_dir: Path) -> None:
    """Raise RLExpError unless ``run_dir`` holds the same run as ``cfg`` and everything a continuation
    reads is intact: progress.txt and every rank's file of the newest checkpoint (if any)."""
    old = to_container(load_run_config(run_dir))
    new = to_container(cfg)
    for key in ["resume", "allow_env_import", "dry_run", *(RESUMABLE_KEYS if cfg.resume is not None else ())]:
        for container in (old, new):
            *parents, leaf = key.split(".")
            for part in parents:
                container = container[part]
            container.pop(leaf, None)
    diff = first_difference(old, new)
    if diff is not None:
        raise RLExpError(
            f"{run_dir} already holds a different run ({diff}); choose another hydra.run.dir, "
            f"or continue that run with resume={run_dir}"
        )
    latest = latest_checkpoint(run_dir)
    if latest is None:
        if cfg.resume is not None:
            raise RLExpError(
                f"resume={run_dir}: no checkpoint in {run_dir / 'checkpoints'} (a run saves one every "
                "algo.save_freq epochs and when stopped by a signal); nothing to resume"
            )
        check_progress(run_dir / PROGRESS_FILE, 0)
        return
    epoch, path = latest
    if epoch > cfg.algo.epochs:
        raise RLExpError(f"algo.epochs={cfg.algo.epochs} but {run_dir} already has {epoch} epochs")
    for rank in range(cfg.comm.procs):
        file = rank_path(path, rank)
        if not file.is_file():
            raise RLExpError(
                f"checkpoint {path} has no file for rank {rank}; it was written by fewer MPI ranks"
            )
        verify_checkpoint(file)
    check_meta(read_checkpoint_meta(path), cfg, path)
    check_progress(run_dir / PROGRESS_FILE, epoch)


def update_run_records(cfg: RLExpConfig, run_dir: Path) -> None:
    """After ``resume=`` changed one of RESUMABLE_KEYS: rewrite config.yaml and config.json (atomically)."""
    stored = to_container(load_run_config(run_dir))
    resolved = {**to_container(cfg), "resume": None, "allow_env_import": False}
    if stored == resolved:
        return
    diff = first_difference(stored, resolved)
    atomic_write_text(run_dir / CONFIG_FILE, CONFIG_HEADER + OmegaConf.to_yaml(resolved))
    save_config(run_dir, resolved, cfg.exp_name, exclusive=False)
    print(colorize(f"Updated {run_dir / CONFIG_FILE}: {diff}", "green", bold=True), flush=True)
