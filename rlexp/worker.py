"""One training process: ``python -m rlexp.worker RUN_DIR`` (what mpiexec starts on every rank).

A worker reads the resolved config that the launcher wrote to RUN_DIR/config.yaml; it never runs
Hydra and never reads the launcher's argv, so a --multirun sweep is never re-launched by its ranks.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from rlexp import comm
from rlexp.checkpoint import latest_checkpoint
from rlexp.config import load_run_config
from rlexp.errors import RLExpError
from rlexp.logger import EpochLogger
from rlexp.schema import RLExpConfig
from rlexp.stopping import Stopped, StopRequest


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


def run(run_dir: Path, stop: StopRequest) -> None:
    """Train the experiment recorded in ``run_dir`` as this rank, from its newest checkpoint if any.

    Raises :class:`rlexp.stopping.Stopped` when ``stop`` ended the run early (after a checkpoint).
    """
    cfg = load_run_config(run_dir)
    prepare_backend(cfg)
    latest = latest_checkpoint(run_dir)
    logger = EpochLogger(
        run_dir,
        exp_name=cfg.exp_name,
        resume_rows=latest[0] if latest else 0,
        tensorboard=cfg.logger.tensorboard,
    )
    try:
        cfg.algo.loop()(cfg, run_dir, logger, stop)
    finally:
        logger.close()


def _abort(code: int) -> None:
    """End this rank; under MPI end all ranks at once so none waits forever in a collective."""
    if comm.num_procs() > 1:
        from mpi4py import MPI

        sys.stdout.flush()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(code)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rlexp.worker RUN_DIR", file=sys.stderr)
        sys.exit(2)
    try:
        # The launcher announces the signal and forwards it; a stopped rank keeps ignoring late copies.
        with StopRequest(announce=False, restore=False) as stop:
            run(Path(argv[0]), stop)
    except Stopped:
        sys.exit(0)  # checkpoint written; the launcher, which sent the signal, reports it
    except RLExpError as exc:
        print(f"rlexp: error (rank {comm.proc_id()}): {exc}", file=sys.stderr)
        _abort(exc.exit_code)
    except BaseException:
        traceback.print_exc()
        _abort(1)


if __name__ == "__main__":
    main()
