"""The sweeper of ``python -m rlexp --multirun``: Hydra's basic sweeper, checked and named.

It lives in the ``hydra_plugins`` namespace because Hydra instantiates plugins from there only.

Spinning Up's ExperimentGrid checked nothing before launching and named each variant by the values
that varied. This sweeper does both on top of Hydra's cartesian-product sweeper:

- every job's config is composed and validated (types, ranges, env id, spaces, backend, mpiexec)
  before the launcher starts any job, so a bad value in one combination stops the whole sweep with
  one line naming the value and the job, and nothing is written or submitted;
- job directories are named by the swept keys only (``3_algo.lr=0.001,seed=1``): the keys that all
  jobs share are left out of ``hydra.job.override_dirname``;
- a job that fails with a user error (its one line printed) does not stop the others; the sweep ends
  with its directory, how many runs finished and failed, and the commands to plot and compare them,
  and exits with the failed job's status.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import HydraContext
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.errors import RLExpError

EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"


class RLExpSweeper(BasicSweeper):
    """Hydra's BasicSweeper that validates all jobs first and names job directories by the swept keys.

    :param max_batch_size: how many jobs to hand to the launcher at once (None: all).
    :param params: sweeps given in a config rather than on the command line, ``{key: "v1,v2"}``.
    """

    def __init__(self, max_batch_size: int | None = None, params: dict[str, str] | None = None) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        overrides = parser.parse_overrides([*self._parse_config(), *arguments])
        self._name_by_swept_keys([o.key_or_group for o in overrides if one_value(o)])
        jobs = self.split_arguments(overrides, None)[0]
        if self.check_jobs(jobs):
            report_dry_run(self.config, jobs)
            return []
        returns = self._launch_all(arguments)
        report_sweep(str(self.config.hydra.sweep.dir), [r for batch in returns for r in batch])
        return returns

    def _launch_all(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        """BasicSweeper.sweep without its stop at the first failed batch: every job runs, a failed one
        keeps its error in its JobReturn (read by :func:`report_sweep`)."""
        assert self.config is not None and self.launcher is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        self.overrides = self.split_arguments(
            parser.parse_overrides([*self._parse_config(), *arguments]), self.max_batch_size
        )
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")  # as Hydra's sweeper does
        returns: list[Sequence[JobReturn]] = []
        done = 0
        while not self.is_done():
            batch = self.get_job_batch()
            self.validate_batch_is_legal(batch)
            returns.append(self.launcher.launch(batch, initial_job_idx=done))
            done += len(batch)
        return returns

    def _name_by_swept_keys(self, fixed: list[str]) -> None:
        assert self.config is not None
        name_by_swept_keys(self.config, fixed)

    def check_jobs(self, jobs: list[list[str]]) -> bool:
        """Compose and validate every job; raise RLExpError for the first bad one. Writes nothing.
        Returns whether the sweep is a dry run (``dry_run=true``)."""
        assert self.config is not None and self.hydra_context is not None
        return check_jobs(self.config, self.hydra_context, jobs)


def one_value(override: Override) -> bool:
    """Whether ``override`` gives every job the same value: not a sweep, or a sweep of one choice
    (``algo.update_after=choice(200)``, as :func:`rlexp.config.normalize_overrides` writes the keys of a
    sweep over a group's options)."""
    value = override.value() if override.is_sweep_override() else None
    return not override.is_sweep_override() or (isinstance(value, ChoiceSweep) and len(value.list) == 1)


def fixed_line(override: Override) -> str:
    """The override of a :func:`one_value` key as one job gets it: ``key=choice(v)`` as ``key=v``."""
    line = override.input_line or ""
    head, sep, rest = line.partition("=choice(")
    return f"{head}={rest[:-1]}" if override.is_sweep_override() and sep and rest.endswith(")") else line


def name_by_swept_keys(config: DictConfig, fixed: list[str]) -> None:
    """Leave the keys set to one value for all jobs out of the job directory names (in ``config``'s
    hydra overrides), unless the user chose the excluded keys."""
    hydra_overrides = config.hydra.overrides.hydra
    if not fixed or any(str(o).startswith(EXCLUDE_KEYS) for o in hydra_overrides):
        return
    with open_dict(config):
        hydra_overrides.append(f"{EXCLUDE_KEYS}=[{','.join(fixed)}]")


def check_launcher(config: DictConfig) -> None:
    """A SLURM launcher (``hydra/launcher=slurm``, or Hydra's own ``submitit_slurm``) needs SLURM's
    commands on this machine: without them submitit would fail with a traceback after the sweep's
    directory was written. Only looks for ``srun`` and ``sbatch`` on the PATH (runs nothing)."""
    target = str(config.hydra.launcher.get("_target_", ""))
    if not target.endswith("SlurmLauncher"):
        return
    missing = [cmd for cmd in ("srun", "sbatch") if shutil.which(cmd) is None]
    if missing:
        raise RLExpError(
            f"hydra/launcher=slurm submits the jobs to SLURM, but this machine has no {missing[0]} on its PATH "
            "(no SLURM client); run the sweep on a SLURM login node, or drop hydra/launcher=slurm to run "
            "the jobs here; nothing was started"
        )


def check_jobs(
    config: DictConfig, hydra_context: HydraContext, jobs: list[list[str]], what: str = "job"
) -> bool:
    """Compose and validate every job (each a list of overrides); raise RLExpError naming the first
    bad one. Writes nothing. ``what`` names a job in the message (``job`` or ``trial``). Returns
    whether the sweep is a dry run (a job with ``dry_run=true``: then none is started)."""
    from rlexp.config import load_config
    from rlexp.explain import user_message
    from rlexp.launch import find_mpiexec, validate_experiment

    check_launcher(config)
    loader = hydra_context.config_loader
    checked: set[str] = set()
    dry = False
    for num, job in enumerate(jobs):
        try:
            job_cfg = loader.load_sweep_config(config, list(job))
            option = job_cfg.hydra.runtime.choices.get("algo")
            with open_dict(job_cfg):
                del job_cfg["hydra"]  # what the task function gets, as in hydra.core.utils.run_job
            cfg = load_config(job_cfg)
            if cfg.resume is not None:
                raise RLExpError("resume= continues one run; it cannot be swept (drop --multirun)")
            key = json.dumps([option, cfg.algo.name, cfg.backend.name, cfg.env.id, cfg.env.kwargs])
            if key not in checked:  # building an env is the slow part: once per distinct env
                validate_experiment(cfg, option)
                checked.add(key)
            if cfg.comm.procs > 1:
                find_mpiexec(cfg.comm)
            dry = dry or cfg.dry_run
        except Exception as exc:  # a user's error (a key that this job's options lack, say) names the job
            message = user_message(exc)
            if message is None:
                raise
            raise RLExpError(f"sweep {what} {num} ({shown(job)}): {message}; nothing was started") from None
    return dry


def report_sweep(sweep_dir: str, returns: list[JobReturn]) -> None:
    """The end of a sweep: its directory, how many runs finished and failed, the commands to plot and
    compare them. Raises the first failure afterwards: a job's user error (:class:`JobFailed`, already
    printed by the job) as one line naming the failed jobs, anything else (a bug) as it was."""
    from rlexp.errors import JobFailed
    from rlexp.logger import colorize

    failed = [(num, r) for num, r in enumerate(returns) if r.status == JobStatus.FAILED]
    counts = f"{len(returns) - len(failed)} finished" + (f", {len(failed)} failed" if failed else "")
    head = "Sweep finished" if not failed else "Sweep ended"
    print(
        colorize(
            f"{head}: {sweep_dir} ({len(returns)} runs: {counts})",
            "green" if not failed else "red",
            bold=True,
        )
    )
    print(f"  plot it:     python -m rlexp.plot {sweep_dir} --table")
    print(f"  compare it:  python -m rlexp.compare {sweep_dir}", flush=True)
    if not failed:
        return
    errors = [r._return_value for _, r in failed]
    bug = next((e for e in errors if not isinstance(e, JobFailed)), None)
    if bug is not None:
        raise bug
    jobs = ", ".join(f"job {num}" for num, _ in failed)
    error = RLExpError(
        f"{len(failed)} of the sweep's {len(returns)} runs failed ({jobs}; each one's line is above)"
    )
    error.exit_code = errors[0].exit_code
    raise error


def shown(job: list[str]) -> str:
    """A job's overrides as a sweep's lines name it: without ``dry_run=``, which is the command's (the runs
    it lists would train without it), not the job's."""
    return " ".join(o for o in job if o.lstrip("+~").split("=", 1)[0] != "dry_run")


def report_dry_run(config: DictConfig, jobs: list[list[str]], what: str = "job", runs: str = "") -> None:
    """What a dry run of a sweep prints: its jobs (``what``: job or edge trial), how many runs it would
    start (``runs``; default: the jobs) and where; nothing is written (the sweep directory is not made)."""
    runs = runs or f"{len(jobs)} run{'s' * (len(jobs) != 1)}"
    print(
        f"Dry run: the checks of all {len(jobs)} {what}s passed; the sweep would start {runs} "
        f"in {config.hydra.sweep.dir}:"
    )
    for num, job in enumerate(jobs):
        print(f"  {what} {num}: {shown(job)}")
    print("nothing was written", flush=True)
