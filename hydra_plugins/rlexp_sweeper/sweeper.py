"""The sweeper of ``python -m rlexp --multirun``: Hydra's basic sweeper, checked and named.

It lives in the ``hydra_plugins`` namespace because Hydra instantiates plugins from there only.

Spinning Up's ExperimentGrid checked nothing before launching and named each variant by the values
that varied. This sweeper does both on top of Hydra's cartesian-product sweeper:

- every job's config is composed and validated (types, ranges, env id, spaces, backend, mpiexec)
  before the launcher starts any job, so a bad value in one combination stops the whole sweep with
  one line naming the value and the job, and nothing is written or submitted;
- job directories are named by the swept keys only (``3_algo.lr=0.001,seed=1``): the keys that all
  jobs share are left out of ``hydra.job.override_dirname``.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import HydraContext
from omegaconf import DictConfig, open_dict

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
        self._name_by_swept_keys([o.key_or_group for o in overrides if not o.is_sweep_override()])
        jobs = self.split_arguments(overrides, None)[0]
        if self.check_jobs(jobs):
            report_dry_run(self.config, jobs)
            return []
        return super().sweep(arguments)

    def _name_by_swept_keys(self, fixed: list[str]) -> None:
        assert self.config is not None
        name_by_swept_keys(self.config, fixed)

    def check_jobs(self, jobs: list[list[str]]) -> bool:
        """Compose and validate every job; raise RLExpError for the first bad one. Writes nothing.
        Returns whether the sweep is a dry run (``dry_run=true``)."""
        assert self.config is not None and self.hydra_context is not None
        return check_jobs(self.config, self.hydra_context, jobs)


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
    from rlexp.launch import find_mpiexec, validate_experiment

    check_launcher(config)
    loader = hydra_context.config_loader
    checked: set[str] = set()
    dry = False
    for num, job in enumerate(jobs):
        try:
            job_cfg = loader.load_sweep_config(config, list(job))
            with open_dict(job_cfg):
                del job_cfg["hydra"]  # what the task function gets, as in hydra.core.utils.run_job
            cfg = load_config(job_cfg)
            if cfg.resume is not None:
                raise RLExpError("resume= continues one run; it cannot be swept (drop --multirun)")
            key = json.dumps([cfg.algo.name, cfg.backend.name, cfg.env.id, cfg.env.kwargs])
            if key not in checked:  # building an env is the slow part: once per distinct env
                validate_experiment(cfg)
                checked.add(key)
            if cfg.comm.procs > 1:
                find_mpiexec(cfg.comm)
            dry = dry or cfg.dry_run
        except RLExpError as exc:
            raise RLExpError(f"sweep {what} {num} ({' '.join(job)}): {exc}; nothing was started") from None
    return dry


def report_dry_run(config: DictConfig, jobs: list[list[str]], what: str = "job", runs: str = "") -> None:
    """What a dry run of a sweep prints: its jobs (``what``: job or edge trial), how many runs it would
    start (``runs``; default: the jobs) and where; nothing is written (the sweep directory is not made)."""
    runs = runs or f"{len(jobs)} run{'s' * (len(jobs) != 1)}"
    print(
        f"Dry run: the checks of all {len(jobs)} {what}s passed; the sweep would start {runs} "
        f"in {config.hydra.sweep.dir}:"
    )
    for num, job in enumerate(jobs):
        print(f"  {what} {num}: {' '.join(job)}")
    print("nothing was written", flush=True)
