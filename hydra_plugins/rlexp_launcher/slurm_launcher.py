"""rlexp's SLURM launcher for Hydra (``hydra/launcher=slurm``; a Hydra plugin, so it lives in the
``hydra_plugins`` namespace): hydra-submitit-launcher's, made safe for
runs over several nodes.

A job of ``comm.nodes=K`` asks SLURM for K nodes with one task each, and SLURM starts the job's
function once per task. One mpiexec per job must start the ranks of all nodes (two would be two
duplicate runs in one directory), so only the first task (submitit's global rank 0) runs the Hydra
job; the others return at once. Requeueing is the first task's too (submitit's handler), and the
job's result is that task's (``job.results()[0]``, which the Hydra launcher reads).
"""

from __future__ import annotations

from typing import Any

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher


class SlurmLauncher(SubmititSlurmLauncher):
    """The submitit SLURM launcher whose job runs on the first task only (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        if submitit.JobEnvironment().global_rank != 0:
            return None  # the first task's mpiexec starts this node's ranks
        return super().__call__(*args, **kwargs)
