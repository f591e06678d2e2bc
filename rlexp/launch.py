"""One Hydra job: validate the config, claim the run directory, then train in-process or under mpiexec.

This is the task function of ``python -m rlexp``. Everything a user can get wrong is checked here,
before anything is written or any process started: config types and ranges, the env id, the spaces
the algorithm supports, the backend, and (for ``comm.procs > 1``) the mpiexec executable.

A job whose run directory already holds the same run (a requeued SLURM job, the same
``hydra.run.dir`` again) continues it from its newest checkpoint, or does nothing if it finished (all
its epochs, or early at ``algo.stop_at_return``: :mod:`rlexp.algos.evaluation`);
``resume=RUN_DIR`` does the same for a run named by its directory. A run stopped by SIGINT, SIGTERM,
SIGHUP or the preemption signal saves a checkpoint first (:mod:`rlexp.stopping`). The run directory
(claiming it, its records, what may continue in it) is :mod:`rlexp.rundir`'s; starting the MPI ranks
is :mod:`rlexp.mpirun`'s.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from rlexp.checkpoint import finished_reason, latest_checkpoint
from rlexp.cluster import mpiexec_placement, resolve_nodes, sharing_note
from rlexp.config import CONFIG_FILE, load_config, register_resolvers, task_of
from rlexp.display import epochs
from rlexp.errors import JobFailed, RLExpError, report, user_error
from rlexp.fileio import atomic_write_bytes
from rlexp.logger import colorize
from rlexp.mpirun import find_mpiexec, run_mpi
from rlexp.provenance import collect, write_provenance
from rlexp.rundir import (
    check_new,
    check_place,
    check_resumable,
    claim,
    remove_if_empty,
    resume_config,
    update_run_records,
    write_run_records,
)
from rlexp.schema import RLExpConfig, usable_cores
from rlexp.score import run_score
from rlexp.stopping import Stopped, StopRequest, active_request, hand_over, signal_name

register_resolvers()  # a launcher may run jobs in fresh processes (joblib, SLURM) that import only this module


def validate_experiment(cfg: RLExpConfig, option: str | None = None) -> None:
    """Checks beyond the schema: the algorithm has a learner for the backend, a requested GPU exists,
    W&B can log when asked to, and the env fits the algorithm and the network (image observations need a CNN encoder and are
    not normalised: ``env.normalize_obs`` is for vector observations). ``option``: the ``algo=`` option
    of a new run, which a refused space names (``qrdqn``, not the dqn it runs)."""
    from gymnasium.wrappers import FlattenObservation

    from rlexp.envs import (
        check_first_step,
        check_spaces,
        flattened_image_warning,
        image_observations,
        make_env,
    )
    from rlexp.nn import is_image_space

    algo = cfg.algo
    envs = cfg.comm.procs * cfg.env.num_envs
    if algo.steps_per_epoch % envs:
        taken = algo.steps_per_epoch // envs * envs
        print(
            f"rlexp: warning: algo.steps_per_epoch={algo.steps_per_epoch} is not a multiple of comm.procs x "
            f"env.num_envs = {envs}; each epoch takes {taken} env steps ({taken // envs} of each env)",
            file=sys.stderr,
            flush=True,
        )
    if cfg.backend.name not in algo.BACKENDS:
        raise RLExpError(
            f"backend={cfg.backend.name} has no {algo.NAME} learner; "
            f"available for {algo.NAME}: {', '.join(algo.BACKENDS)}"
        )
    if cfg.backend.name == "torch":
        from rlexp.nn.kernels import override_value

        override_value()  # RLEXP_ONEDNN, the kernel choice's override: a bad value stops here
    if cfg.backend.name == "torch" and cfg.backend.device.startswith("cuda"):
        from rlexp.algos.torch_common import torch_device  # imports torch: only for torch runs

        torch_device(cfg.backend.device)  # TF checks its GPU when the learner starts (setup_tf)
    if cfg.logger.wandb:
        from rlexp.wandblog import check_wandb_ready

        check_wandb_ready()
    if cfg.logger.video_every:
        from rlexp.video import offscreen_rendering

        offscreen_rendering()  # before the env below imports mujoco (it picks its OpenGL then)
    env = make_env(cfg.env, allow_env_import=cfg.resume is None or cfg.allow_env_import)
    try:
        check_spaces(algo, cfg.env.id, env.observation_space, env.action_space, option)
        # as the env gives them, before make_env flattens what is not a uint8 image
        given = env.env.observation_space if isinstance(env, FlattenObservation) else env.observation_space
        image_observations(algo, cfg.network, cfg.env.id, given)
        warning = flattened_image_warning(algo, cfg.network, cfg.env.id, given)
        if warning is not None:
            print(f"rlexp: warning: {warning}", file=sys.stderr, flush=True)
        if cfg.env.normalize_obs and is_image_space(env.observation_space):
            raise RLExpError(
                f"env.normalize_obs=true normalises vector observations, but {cfg.env.id} has image "
                f"observations {env.observation_space} (the network scales them, x/255); use env.normalize_obs=false"
            )
        check_first_step(env, cfg.env.id, cfg.env.kwargs)
        check_memory(cfg, env)
        if cfg.logger.video_every:
            from rlexp.video import check_video

            check_video(cfg, env)
    finally:
        env.close()


def check_memory(cfg: RLExpConfig, env: Any) -> None:
    """An off-policy run's replay buffers (all ranks on this machine) must fit in the memory that is
    available now: numpy would otherwise reserve it lazily and the run die later, out of memory."""
    replay_size = getattr(cfg.algo, "replay_size", None)
    if replay_size is None:
        return
    from rlexp.algos.off_policy import frame_stacked
    from rlexp.buffers import transition_bytes
    from rlexp.envs import action_dims, obs_dtype

    obs_space = env.observation_space
    act_shape, act_dtype = action_dims(env.action_space)
    per_transition = transition_bytes(
        tuple(obs_space.shape) or (1,), obs_dtype(obs_space), act_shape, act_dtype,
        frames=frame_stacked(cfg, obs_space), **cfg.algo.replay_options(),
    )  # fmt: skip
    need = replay_size * per_transition
    available = _available_memory()
    if available is not None and need > available:
        raise RLExpError(
            f"algo.replay_size={replay_size} needs {need / 2**30:.1f} GiB for the replay buffers of {cfg.env.id} "
            f"({per_transition} bytes per transition), but this machine has "
            f"{available / 2**30:.1f} GiB available; use a smaller algo.replay_size"
        )


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def launch(hydra_cfg: DictConfig) -> float | None:
    """The Hydra task function: one experiment from a composed config; returns the run's score
    (:mod:`rlexp.score`), which Hydra hands to the sweeper (an Optuna sweep optimises it).

    A user error ends the job with one line on stderr (naming the job's overrides in a sweep) and
    exit status 2, instead of Hydra's multi-line job failure report.
    """
    hc = HydraConfig.get()
    run_dir = Path(hydra_cfg.get("resume") or hc.runtime.output_dir)
    try:
        choices = group_choices(hc.runtime.choices)
        return run_job(hydra_cfg, run_dir, list(hc.overrides.task), concurrent_jobs(hc), choices)
    except Stopped as exc:
        hand_over(exc.signum)  # under submitit: its handler requeues the job
    except RLExpError as exc:
        sweep = hc.mode == RunMode.MULTIRUN
        context = f"job {hc.job.num} ({' '.join(hc.overrides.task)})" if sweep else ""
        report(exc, context)
        if sweep and local_launcher(hc):  # the sweep goes on and names the job in its summary
            raise JobFailed(f"{context}: {exc}", exc.exit_code) from None
        raise SystemExit(exc.exit_code) from None
    return None


def local_launcher(hc: Any) -> bool:
    """Whether the sweep's jobs run on this machine (Hydra's basic launcher, or the parallel one),
    where a failed job hands its error back to the sweep (:class:`rlexp.errors.JobFailed`). A SLURM
    job instead exits with the error's status and its line in its log."""
    target = str(hc.launcher.get("_target_", ""))
    return "BasicLauncher" in target or "JoblibLauncher" in target


def in_sweep() -> bool:
    """Whether this process runs a job of a ``--multirun`` sweep (whose summary gives the commands to
    plot and compare its runs)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def group_choices(choices: Any) -> dict[str, str | None]:
    """The preset Hydra chose for each of rlexp's config groups (``{"algo": "rainbow", "env": ...}``),
    from ``hydra.runtime.choices`` without Hydra's own groups (``hydra/...``)."""
    return {
        str(k): None if v is None else str(v) for k, v in choices.items() if not str(k).startswith("hydra/")
    }


def run_job(
    hydra_cfg: DictConfig,
    run_dir: Path,
    overrides: list[str],
    jobs: int = 1,
    choices: dict[str, str | None] | None = None,
) -> float | None:
    """Check the config, claim ``run_dir``, and train the run there (or continue it); return its score.

    ``overrides``: the command line's (recorded in the run's provenance); ``jobs``: how many jobs of a
    sweep run at once on this machine; ``choices``: the preset of each config group
    (:func:`group_choices`), recorded in a new run's provenance.json, where rlexp.plot and
    rlexp.compare tell presets apart by them (``algo=rainbow`` keeps dqn's ``name``). Raises
    :class:`RLExpError` for a user error (an OSError naming a file becomes one) and :class:`Stopped`
    when a stop signal ended the run early, after its checkpoint and a line saying how to continue it.
    """
    try:
        # From the first moment a stop signal is a clean stop: the run (started or not) ends after its
        # current or first epoch with a checkpoint.
        outer = active_request()
        with contextlib.nullcontext(outer) if outer is not None else StopRequest() as stop:
            cfg = _launch(hydra_cfg, run_dir, overrides, jobs, stop, choices or {})
    except Stopped as exc:
        print(
            f"rlexp: stopped by {signal_name(exc.signum)} after {epochs(exc.epoch)}, checkpoint saved; "
            f"continue with: python -m rlexp resume={run_dir}",
            file=sys.stderr,
            flush=True,
        )
        raise
    except (RLExpError, OSError) as exc:
        message = str(exc) if isinstance(exc, RLExpError) else user_error(exc)
        if message is None:
            raise
        remove_if_empty(run_dir)  # made for this job (by Hydra or the API); leave no empty directory behind
        if isinstance(exc, OSError):
            raise RLExpError(message) from None
        raise
    return run_score(run_dir, cfg.score)


def concurrent_jobs(hc: Any) -> int:
    """How many jobs of this sweep run at once on this machine (Hydra's joblib launcher), else 1."""
    launcher = hc.launcher
    if hc.mode != RunMode.MULTIRUN or "JoblibLauncher" not in str(launcher.get("_target_", "")):
        return 1
    n = int(launcher.get("n_jobs") or 1)
    return usable_cores() if n < 0 else max(1, n)


def _launch(
    hydra_cfg: DictConfig,
    run_dir: Path,
    overrides: list[str],
    jobs: int,
    stop: StopRequest,
    choices: dict[str, str | None],
) -> RLExpConfig:
    cfg = load_config(hydra_cfg)
    if cfg.resume is not None:
        cfg = resume_config(cfg, overrides)
    if jobs > 1 and cfg.backend.threads is None:
        cfg.backend.threads = cfg.backend.threads_per_rank(cfg.comm.procs * jobs)
    validate_experiment(cfg, None if cfg.resume is not None else choices.get("algo"))
    nodes = resolve_nodes(cfg.comm)  # the nodes asked for exist (fail before the run dir is written)
    if cfg.comm.procs > 1:
        mpiexec_placement(cfg.comm, nodes, find_mpiexec(cfg.comm))  # its paths can be passed on
    check_place(run_dir)  # before anything is written there
    if (note := sharing_note(cfg.comm, nodes, jobs)) is not None:
        print(note, flush=True)
    if cfg.dry_run:
        dry_run(
            cfg,
            run_dir,
            choices.get("algo"),
            task_of(choices.get("env"), cfg.env.id, cfg.env.wrappers, overrides),
        )
        return cfg
    with claim(run_dir):  # first: nothing is written into a directory another job holds
        if (run_dir / CONFIG_FILE).exists():  # always so with resume= (resume_config read it)
            _continue(cfg, run_dir, overrides, stop)
        else:
            check_new(run_dir)
            write_run_records(cfg, run_dir, overrides, choices)
            _train(cfg, run_dir, stop)
    return cfg


def dry_run(cfg: RLExpConfig, run_dir: Path, option: str | None = None, task: str | None = None) -> None:
    """``dry_run=true``, after every check of a new run or a continuation (those of :func:`_launch` and,
    for a directory that holds a run, :func:`rlexp.rundir.check_resumable`): one line saying what would
    run, and nothing written (the directory Hydra made for the job is removed again when empty).
    ``option``: the ``algo=`` option of a new run, named beside the algorithm it runs (``rainbow (dqn)``);
    ``task``: its task, named before its env id when an env preset names it (``PendulumNoVel-v1``).
    A new run's notes on settings it would not use as given come first."""
    net = cfg.network
    continues = (run_dir / CONFIG_FILE).exists()  # the command line's options are not the run's then
    algo = cfg.algo.name if continues or option in (None, cfg.algo.name) else f"{option} ({cfg.algo.name})"
    own_task = not continues and task not in (None, cfg.env.id)  # a preset's own task: say its id too
    env = f"{task} (env.id {cfg.env.id}, " if own_task else f"{cfg.env.id} ("
    layers = f" {list(net.hidden_sizes)}" if net.hidden_sizes else ""  # an encoder alone: no [] after it
    network = f"network {net.encoder}{layers} {net.activation}"
    critic_sizes = getattr(cfg.algo, "critic_hidden_sizes", None)  # CrossQ: critics of their own width
    critics = list(net.hidden_sizes) if critic_sizes is None else critic_sizes(net.hidden_sizes)
    if critics != list(net.hidden_sizes):
        network += f", critics {critics}"
    what = (
        f"{algo} on {env}{network}, "
        f"{cfg.backend.name} on {cfg.backend.device}, {cfg.comm.procs} process{'es' * (cfg.comm.procs > 1)} "
        f"x {cfg.env.num_envs} env{'s' * (cfg.env.num_envs > 1)}, seed {cfg.seed})"
    )
    steps = cfg.algo.epochs * cfg.algo.steps_per_epoch
    if continues:
        check_resumable(cfg, run_dir)
        latest = latest_checkpoint(run_dir)
        done = 0 if latest is None else latest[0]
        reason = None if latest is None else finished_reason(latest[1])
        if done == cfg.algo.epochs or reason is not None:
            plan = (
                f"{run_dir} has finished ({reason})"
                if reason
                else f"{run_dir} has finished its {epochs(done)}"
            )
            plan += "; nothing would run"
        else:
            plan = f"would continue {what} in {run_dir} from {epochs(done)} to {cfg.algo.epochs}"
    else:
        remove_if_empty(run_dir)  # made by Hydra for this job
        for note in cfg.algo.notes():  # what the run would print before its first epoch
            print(note, flush=True)
        plan = (
            f"would train {what} for {epochs(cfg.algo.epochs)} x {cfg.algo.steps_per_epoch} env steps "
            f"= {steps:,} steps in {run_dir}"
        )
    print(f"Dry run: the checks passed; {plan}; nothing was written", flush=True)


def _continue(cfg: RLExpConfig, run_dir: Path, overrides: list[str], stop: StopRequest) -> None:
    """Train on in a directory that holds a run: the same run again (a requeued job), or ``resume=``.

    Everything is checked before anything is written, and if the ranks fail before they saved a new
    checkpoint (a checkpoint whose learner state does not fit, say), config.yaml and config.json are
    put back and this job's provenance record removed: a failed continuation changes nothing.
    ``overrides``: this job's command-line overrides, recorded in its provenance.resume<k>.json.
    """
    check_resumable(cfg, run_dir)
    latest = latest_checkpoint(run_dir)
    if latest is not None and latest[0] == cfg.algo.epochs:
        print(colorize(f"{run_dir} has finished its {latest[0]} epochs; nothing to do", "green", bold=True))
        return
    reason = None if latest is None else finished_reason(latest[1])
    if reason is not None:
        print(colorize(f"{run_dir} has finished early ({reason}); nothing to do", "green", bold=True))
        return
    records = {
        name: (run_dir / name).read_bytes()
        for name in (CONFIG_FILE, "config.json")
        if (run_dir / name).is_file()
    }
    if cfg.resume is not None:
        update_run_records(cfg, run_dir)
    provenance = write_provenance(run_dir, collect(cfg, overrides), latest[0] if latest else 0)
    where = (
        f"after {epochs(latest[0])}" if latest else "from the start (it stopped before its first checkpoint)"
    )
    print(colorize(f"Continuing {run_dir} {where}", "green", bold=True), flush=True)
    try:
        _train(cfg, run_dir, stop)
    except (RLExpError, KeyboardInterrupt):
        if latest_checkpoint(run_dir) == latest:  # nothing new was saved: undo this job's records
            for name, data in records.items():
                atomic_write_bytes(run_dir / name, data)
            provenance.unlink(missing_ok=True)
        raise


def _train(cfg: RLExpConfig, run_dir: Path, stop: StopRequest) -> None:
    import rlexp.worker as worker

    allow_env_import = cfg.resume is None or cfg.allow_env_import
    if cfg.comm.procs == 1:
        worker.run(run_dir, stop, allow_env_import)
    else:
        run_mpi(cfg, run_dir, stop, allow_env_import)
    signum = stop.signum
    latest = latest_checkpoint(run_dir)
    reason = None
    if latest is not None and latest[0] < cfg.algo.epochs:  # it reached algo.stop_at_return, or a signal
        reason = finished_reason(latest[1])
        if reason is None and signum is not None:
            raise Stopped(signum, latest[0])
    print(colorize(f"Run finished: {run_dir}", "green", bold=True))
    if reason is not None:
        print(f"  early:       {reason}")
    if not in_sweep():  # a sweep ends with the commands for all its runs
        print(f"  plot it:     python -m rlexp.plot {run_dir}")
        print(f"  watch it:    python -m rlexp.test_policy {run_dir}")
