"""One training process: ``python -P -m rlexp.worker RUN_DIR [--nodes K] [--allow-env-import]`` (what
mpiexec starts on every rank; ``-P``: the current directory is not on the import path).

A worker reads the resolved config that the launcher wrote to RUN_DIR/config.yaml; it never runs
Hydra and never reads the launcher's argv, so a --multirun sweep is never re-launched by its ranks.
It installs its stop-signal handler before importing anything heavy and reports it to the launcher,
holds the run directory's training lock while it lives, and exits when its launcher is gone.
``--allow-env-import``: the module of a ``module:Env`` env id may come from the current directory
(the launcher passes it for a new run, and for ``resume=`` only when the user allowed it).
``--nodes K``: the ranks must run on K distinct hosts (:func:`check_placement`); a world of another
size or spread stops the run with one line instead of training on silently.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.stopping import Stopped, StopRequest, report_ready, stop_signals

if TYPE_CHECKING:
    from rlexp.schema import RLExpConfig


def prepare_backend(cfg: RLExpConfig) -> None:
    """Environment settings a backend reads when it is first imported; a user's own settings win.

    TensorFlow quiet: log level 3, and the first import runs with file descriptor 2 on /dev/null,
    because TF prints its oneDNN notice before any log level applies. (Turning oneDNN off would
    silence it too, but slows TF's updates on CPU: docs/benchmarks.md.) An import error still raises.
    """
    if cfg.backend.name == "tf" and cfg.backend.quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        if "tensorflow" not in sys.modules:
            sys.stderr.flush()
            saved = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 2)
                import tensorflow  # noqa: F401
            finally:
                os.dup2(saved, 2)
                os.close(saved)
                os.close(devnull)


def run(run_dir: Path, stop: StopRequest, allow_env_import: bool = True, nodes: int | None = None) -> None:
    """Train the experiment recorded in ``run_dir`` as this rank, from its newest checkpoint if any.

    Raises :class:`rlexp.stopping.Stopped` when ``stop`` ended the run early (after a checkpoint).
    ``allow_env_import``: see the module docstring; ``nodes``: the number of hosts the ranks must
    span (None: not checked).
    """
    from rlexp.checkpoint import latest_checkpoint
    from rlexp.config import load_run_config
    from rlexp.logger import EpochLogger
    from rlexp.rundir import training_lock

    cfg = load_run_config(run_dir)
    cfg.allow_env_import = allow_env_import
    with training_lock(run_dir):
        prepare_backend(cfg)
        check_placement(cfg, run_dir, nodes)
        latest = latest_checkpoint(run_dir)
        logger = EpochLogger(
            run_dir,
            exp_name=cfg.exp_name,
            resume_rows=latest[0] if latest else 0,
            tensorboard=cfg.logger.tensorboard,
            console=cfg.logger.console,
            episodes=cfg.logger.episodes,
            wandb=functools.partial(_wandb_writer, cfg, run_dir) if cfg.logger.wandb else None,
        )
        try:
            cfg.algo.loop()(cfg, run_dir, logger, stop)
        finally:
            logger.close()


def _gpus(cfg: RLExpConfig) -> int:
    """The GPUs this rank's backend sees (0 for a CPU run, without asking the backend)."""
    if cfg.backend.device == "cpu":
        return 0
    if cfg.backend.name == "tf":
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_placement(cfg: RLExpConfig, run_dir: Path, nodes: int | None) -> None:
    """Check the world this rank joined (:func:`rlexp.cluster.check_world`: ``comm.procs`` ranks on
    ``nodes`` hosts; rank 0 raises, the others wait for its abort) and record every rank's host, local
    rank and device in the newest provenance file of ``run_dir``."""
    import rlexp.comm as comm
    from rlexp.cluster import check_world, placement, rank_gpu
    from rlexp.provenance import record_placement

    gpu = rank_gpu(cfg.backend.device, _gpus(cfg))
    rows = comm.allgather_objects(placement("cpu" if gpu is None else f"cuda:{gpu}"))
    if comm.proc_id() == 0:
        check_world(len(rows), [row["host"] for row in rows], cfg.comm.procs, nodes)
        record_placement(run_dir, rows)
    comm.barrier()  # a wrong world: the other ranks wait here for rank 0's error to end them all


def _wandb_writer(cfg: RLExpConfig, run_dir: Path) -> Any:
    """The run's W&B writer (rank 0; imports wandb only when called)."""
    from rlexp.config import to_container
    from rlexp.wandblog import WandbWriter

    return WandbWriter(run_dir, cfg.logger, to_container(cfg), name=run_dir.name)


def _ignore_stop_signals() -> None:
    """The rank is ending: a late copy of a stop signal (SLURM signals every process of the job and
    the launcher forwards it too) must not kill it while Python shuts down, which puts a caught
    signal back to its default action (USR2's kills) but leaves an ignored one ignored."""
    for signum in stop_signals():
        signal.signal(signum, signal.SIG_IGN)


def _launcher_rank() -> int:
    """This rank's number as the MPI launcher set it (read without initialising MPI)."""
    for var in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def _abort(code: int) -> None:
    """End this rank; under MPI end all ranks at once so none waits forever in a collective."""
    import rlexp.comm as comm

    if comm.num_procs() > 1:
        from mpi4py import MPI

        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(code)
    sys.exit(code)


def exit_fast() -> None:
    """Spare a program's exit the interpreter's last garbage collection over every object still alive
    (torch's or TensorFlow's modules: ~1 s after "Run finished", measured): they are frozen
    (``gc.freeze``) and freed as their modules are, as before. For a program's last act (the command
    line's, a rank's), once the run's files are written and closed; never in the Python API."""
    import gc

    gc.freeze()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    allow = "--allow-env-import" in argv
    argv = [a for a in argv if a != "--allow-env-import"]
    nodes = None
    if "--nodes" in argv:
        i = argv.index("--nodes")
        value = argv[i + 1] if i + 1 < len(argv) else ""
        nodes = int(value) if value.isdigit() else -1
        del argv[i : i + 2]
    if len(argv) != 1 or nodes == -1:
        print("usage: python -m rlexp.worker RUN_DIR [--nodes K] [--allow-env-import]", file=sys.stderr)
        sys.exit(2)
    run_dir = Path(argv[0])
    rank = _launcher_rank()
    if not run_dir.is_dir():
        import socket

        print(
            f"rlexp: error (rank {rank}): the run directory {run_dir} does not exist on {socket.gethostname()}; "
            "runs over several nodes need a filesystem that every node sees at the same path",
            file=sys.stderr,
        )
        _abort(2)
    try:
        # First thing: a stop signal from now on is a clean stop. The launcher announces the signal and
        # forwards it; a stopped rank keeps ignoring late copies.
        with StopRequest(announce=False, restore=False) as stop:
            report_ready(run_dir, rank)
            from rlexp.mpirun import watch_parent

            watch_parent()
            run(run_dir, stop, allow, nodes)
        _ignore_stop_signals()
        exit_fast()  # the rank's exit, which the launcher waits for, without the last full collection
    except Stopped:
        _ignore_stop_signals()
        sys.exit(0)  # checkpoint written; the launcher, which sent the signal, reports it
    except Exception as exc:
        from rlexp.errors import RLExpError, user_error

        message = str(exc) if isinstance(exc, RLExpError) else user_error(exc)
        if message is None:
            traceback.print_exc()
            _abort(1)
        print(f"rlexp: error (rank {rank}): {message}", file=sys.stderr)
        _abort(getattr(exc, "exit_code", 2))
    except BaseException:
        traceback.print_exc()
        _abort(1)


if __name__ == "__main__":
    main()
