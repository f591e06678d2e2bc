"""Optuna pruning from inside a run: a trial of an Optuna sweep with a pruner
(``hydra.sweeper.pruner=median``, :mod:`hydra_plugins.rlexp_sweeper.optuna_sweeper`) reports its score
after every epoch and ends early, as finished, when the pruner says it is hopeless.

The sweeper keeps the study in a storage that every job can open (the user's ``storage``, else a
journal file in the sweep directory), describes it in a JSON file (:data:`STUDY_VARIABLE` names it)
and gives each job its trial's id (:data:`TRIAL_VARIABLE`), both through Hydra's ``hydra.job.env_set``,
so the variables reach the job wherever its launcher runs it and, through mpiexec, every rank. After
each epoch rank 0 reports the run's score as it stands (:func:`rlexp.score.run_score`: what the trial's
value will be, over the epochs so far) at step = completed epochs, and asks the pruner; all ranks
follow its answer. A pruned run saves its checkpoint with the reason (``finished``: nothing continues
it), ends with exit status 0 and records ``pruned`` in the trial, which the sweeper then tells Optuna
as PRUNED. Without the variables (every run outside such a sweep) nothing here is made.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

import rlexp.comm as comm
from rlexp.display import epochs
from rlexp.schema import ScoreConfig

STUDY_VARIABLE = "RLEXP_OPTUNA_STUDY"  # the path of the sweep's study description (JSON)
TRIAL_VARIABLE = "RLEXP_OPTUNA_TRIAL"  # the trial's id in that study's storage
PRUNED = "pruned"  # the trial's user attribute a pruned run sets: {"epochs": completed, "score": value}


def open_storage(study: dict[str, Any]) -> Any:
    """The Optuna storage a study description names: ``journal`` (a journal file) or ``storage`` (a URL)."""
    if study.get("journal"):
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        return JournalStorage(JournalFileBackend(str(study["journal"])))
    return study["storage"]


def make_pruner(study: dict[str, Any]) -> Any:
    """The pruner a study description names (``median``: Optuna's MedianPruner, the zoo's)."""
    import optuna

    return optuna.pruners.MedianPruner(
        n_startup_trials=int(study["n_startup_trials"]), n_warmup_steps=int(study["n_warmup_steps"])
    )


class TrialPruning:
    """One run's reports to its Optuna trial (rank 0) and the pruner's decision (all ranks).

    :param run_dir: the run's directory (its progress.txt gives the score).
    :param score: how the run is scored (``score:``).
    :param study: the sweep's study description (JSON of the file :data:`STUDY_VARIABLE` names).
    :param trial_id: the trial's id in the study's storage.
    """

    def __init__(self, run_dir: Path, score: ScoreConfig, study: dict[str, Any], trial_id: int) -> None:
        self.run_dir, self.score = run_dir, score
        self.trial: Any = None
        if comm.proc_id() == 0:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            loaded = optuna.load_study(
                study_name=study["study_name"], storage=open_storage(study), pruner=make_pruner(study)
            )
            self.trial = optuna.trial.Trial(loaded, trial_id)

    def after_epoch(self, done: int) -> str | None:
        """After ``done`` completed epochs (their row written): report the score, and return why the run
        ends here when the pruner prunes it (None: it goes on). A collective."""
        from rlexp.score import run_score

        prune, value = 0.0, math.nan
        if self.trial is not None:
            score = run_score(self.run_dir, self.score)
            if score is not None and math.isfinite(score):
                value = score
                self.trial.report(value, step=done)
                if self.trial.should_prune():
                    prune = 1.0
                    self.trial.set_user_attr(PRUNED, {"epochs": done, "score": value})
        decision = comm.broadcast_(np.array([prune, value], dtype=np.float64))
        if decision[0] == 0.0:
            return None
        return f"pruned by Optuna's median pruner after {epochs(done)} (score {decision[1]:.6g})"


def trial_pruning(run_dir: Path, score: ScoreConfig) -> TrialPruning | None:
    """The run's :class:`TrialPruning` when it is a trial of a pruning Optuna sweep, else None."""
    path, trial_id = os.environ.get(STUDY_VARIABLE), os.environ.get(TRIAL_VARIABLE)
    if not path or not trial_id:
        return None
    study = json.loads(Path(path).read_text())
    return TrialPruning(run_dir, score, study, int(trial_id))
