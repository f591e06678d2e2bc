"""Weights & Biases logging (``logger.wandb=true``): the resolved config and every progress.txt row.

Rank 0 starts one W&B run per rlexp run. Its id is kept in the run directory (``wandb_run_id``,
written atomically the first time), so a resumed or requeued run continues the same W&B run. Rows go
to W&B with ``TotalEnvInteracts`` as their x-axis; rows that a resumed run logs again (the epochs
after its checkpoint) appear twice at the same x. W&B's own files go below the run directory
(``wandb/``); ``WANDB_MODE=offline`` works without an account (``wandb sync`` uploads later).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.schema import LoggerConfig

ID_FILE = "wandb_run_id"  # in the run directory: the id of its W&B run


def check_wandb_ready() -> None:
    """Before a run with ``logger.wandb=true`` writes anything: wandb is installed and, unless W&B is
    offline or disabled (``WANDB_MODE`` or ``wandb offline``'s settings file), an API key is configured
    (``wandb login`` or ``WANDB_API_KEY``). Reads local settings only: no network."""
    try:
        import wandb
    except ImportError:
        raise RLExpError("logger.wandb=true needs the wandb package: pip install wandb") from None
    try:
        wandb.login(verify=False)  # False when offline or disabled; raises online without a key
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RLExpError(
            f"logger.wandb=true: W&B cannot log ({first}); run `wandb login`, or set WANDB_MODE=offline "
            "to log locally"
        ) from None


class WandbWriter:
    """One W&B run for an rlexp run: ``log(row)`` per epoch, ``close()`` at the end."""

    def __init__(self, run_dir: Path, settings: LoggerConfig, config: dict[str, Any], name: str) -> None:
        try:
            import wandb
        except ImportError:
            raise RLExpError("logger.wandb=true needs the wandb package: pip install wandb") from None
        id_path = run_dir / ID_FILE
        if id_path.is_file():
            run_id = id_path.read_text().strip()
        else:
            run_id = secrets.token_hex(4)  # W&B run ids: letters and digits
            atomic_write_text(id_path, run_id + "\n")
        try:
            self.run = wandb.init(
                project=settings.wandb_project,
                entity=settings.wandb_entity,
                group=settings.wandb_group,
                tags=list(settings.wandb_tags),
                config=config,
                name=name,
                id=run_id,
                resume="allow",
                dir=str(run_dir),
            )
        except Exception as exc:  # no login, no network, a project one may not write to
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RLExpError(
                f"logger.wandb=true: W&B could not start a run ({first}); run `wandb login`, "
                "or set WANDB_MODE=offline to log locally"
            ) from None
        self.run.define_metric("TotalEnvInteracts")
        self.run.define_metric("*", step_metric="TotalEnvInteracts")

    def log(self, row: dict[str, Any]) -> None:
        """One epoch's row (the columns of progress.txt; empty values left out)."""
        self.run.log({k: v for k, v in row.items() if v != ""})

    def log_video(self, path: Path, step: int) -> None:
        """An mp4 (:mod:`rlexp.video`) as ``video`` at TotalEnvInteracts ``step``."""
        import wandb

        self.run.log({"video": wandb.Video(str(path), format="mp4"), "TotalEnvInteracts": step})

    def close(self) -> None:
        self.run.finish()
