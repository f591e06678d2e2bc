"""rlexp's parallel launcher for Hydra (``hydra/launcher=parallel``): Hydra's joblib launcher whose
jobs label their output.

Jobs that run at once write to the same terminal or log, so each line a job prints (its epoch tables,
its MPI ranks' lines, its errors) starts with ``[job N] ``, N being the job's number in the sweep (the
number in its directory's name), and an epoch table goes out whole (:class:`rlexp.display.LinePrefix`).
"""

from __future__ import annotations

from typing import Any

from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import DictConfig


class LabelledTask:
    """The task function of a job, with its output labelled by the job's number (picklable: joblib
    sends it to its worker processes)."""

    def __init__(self, task_function: TaskFunction) -> None:
        self.task_function = task_function

    def __call__(self, cfg: DictConfig) -> Any:
        from hydra.core.hydra_config import HydraConfig

        from rlexp.display import prefixed_output

        with prefixed_output(f"[job {HydraConfig.get().job.num}] "):
            return self.task_function(cfg)


class LabelledJoblibLauncher(JoblibLauncher):
    """Hydra's joblib launcher (same keys: ``n_jobs``, ``backend``, ...) whose jobs label their lines."""

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=LabelledTask(task_function), config=config)
