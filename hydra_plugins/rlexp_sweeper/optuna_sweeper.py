"""``hydra/sweeper=optuna``: hyperparameter search with Optuna over the scores rlexp's jobs return.

    python -m rlexp --multirun hydra/sweeper=optuna 'algo.lr=interval(1e-4,1e-2)'
    python -m rlexp --multirun hydra/sweeper=optuna hydra.sweeper.n_trials=50 \\
        'algo.lr=tag(log,interval(1e-5,1e-2))' 'algo.batch_size=choice(64,128,256)' seed=0

Why not hydra-optuna-sweeper: its last release (1.3.0) pins ``optuna<3``, a 2022 Optuna whose
distribution classes are deprecated in the Optuna we install (>=4). This sweeper speaks the same
search-space grammar (Hydra's override syntax) on Optuna's ask-and-tell interface:

- ``interval(a,b)`` a float between a and b; ``tag(log,interval(a,b))`` on a log scale;
  ``tag(int,interval(a,b))`` an integer; ``range(a,b[,step])`` a stepped number from a up to b (b
  excluded); ``choice(x,y,...)`` or ``x,y,...`` one of the values. Every other override (``seed=0``)
  is the same for all trials.
- Each trial is one job (run directory ``<n>_<key=value,...>`` in the sweep directory) whose return
  value is the run's score (``score:`` in config.yaml); a job that fails or returns no score fails its
  trial (one line; the sweep goes on, and a stored study records it FAIL, never RUNNING).
- With ``seeds`` K > 1 a trial is K jobs, the same settings at seeds ``seed``, ``seed + 1``, ...,
  ``seed + K - 1`` (``seed``: the command line's, else the config's), launched together (side by side
  with a parallel launcher, one SLURM job array with the slurm one); the trial's value is the
  ``aggregate`` (``mean``, ``iqm`` or ``median``) of their K scores, so a search does not follow one
  seed's luck. A run that fails fails its trial (one line; not scored). optimization_results.yaml
  lists each trial's score per seed.
- Before any trial starts, the jobs at the edges of the space (every key's lowest and highest value
  or every choice, the other keys at their lowest) are composed and checked, as a grid sweep checks
  all its jobs: a value out of range is one line and nothing is started.
- The best trial is printed and written to ``optimization_results.yaml`` in the sweep directory with
  every trial's values and score. With ``storage`` set (e.g. ``sqlite:///study.db``) the study is kept
  and a later sweep with the same ``study_name`` continues it.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from hydra_plugins.rlexp_sweeper.sweeper import (
    check_jobs,
    fixed_line,
    name_by_swept_keys,
    one_value,
    report_dry_run,
)
from rlexp.display import epochs
from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.pruning import PRUNED, STUDY_VARIABLE, TRIAL_VARIABLE, make_pruner, open_storage

log = logging.getLogger(__name__)

SAMPLERS = ("tpe", "random")
DIRECTIONS = ("maximize", "minimize")
AGGREGATES = ("mean", "iqm", "median")  # a multi-seed trial's value from its runs' scores
PRUNERS = ("none", "median")  # median: Optuna's MedianPruner (the zoo's), over the runs' scores per epoch
JOURNAL_FILE = "optuna_journal.log"  # in the sweep directory: the study, when pruning without a storage
STUDY_FILE = "optuna_study.json"  # in the sweep directory: the study as the trials' runs open it


def aggregate(name: str, values: list[float]) -> float:
    """The ``mean``, ``iqm`` (the mean of the middle half, scipy's trimmed mean at 25%) or ``median``."""
    import statistics

    from scipy import stats

    if name == "iqm":
        return float(stats.trim_mean(values, 0.25))
    return float(statistics.median(values) if name == "median" else statistics.fmean(values))


def distribution(override: Override) -> Any:
    """The Optuna distribution of one swept override (see the module docstring for the grammar)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    value = override.value()
    key = override.get_key_element()
    if isinstance(value, IntervalSweep):
        low, high = value.start, value.end
        if low is None or high is None or not low < high:
            raise RLExpError(f"{key}=interval({low},{high}): the interval needs low < high")
        integer = "int" in value.tags
        if integer:
            low, high = int(low), int(high)
        if "log" in value.tags and low <= 0:
            tags = ",".join(sorted(value.tags))
            raise RLExpError(
                f"{key}=tag({tags},interval({value.start},{value.end})): a log scale needs low > 0"
                + (" (as an integer)" if integer else "")
                + "; give a positive low, or leave out the log tag for a linear scale"
            )
        try:
            if integer:
                return IntDistribution(low, high, log="log" in value.tags)
            return FloatDistribution(float(low), float(high), log="log" in value.tags)
        except ValueError as exc:  # Optuna's own checks: one line, as every bad range
            raise RLExpError(f"{override.input_line}: {exc}") from None
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if start is None or stop is None or step is None or not start < stop or step <= 0:
            raise RLExpError(f"{key}=range({start},{stop},{step}): the range needs start < stop and step > 0")
        numbers = [start + i * step for i in range(math.ceil((stop - start) / step))]
        if all(isinstance(x, int) for x in (start, stop, step)):
            return IntDistribution(int(start), int(numbers[-1]), step=int(step))
        return CategoricalDistribution(numbers)
    if isinstance(value, ChoiceSweep):
        return CategoricalDistribution(list(value.list))
    raise RLExpError(
        f"{key}: an Optuna sweep takes interval(), range() or choice(), not {override.input_line}"
    )


def edges(space: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials at the edges of the space: each key at each extreme (a choice: each value), the
    other keys at their lowest. Checked before the search starts."""
    from optuna.distributions import CategoricalDistribution

    def extremes(dist: Any) -> list[Any]:
        return list(dist.choices) if isinstance(dist, CategoricalDistribution) else [dist.low, dist.high]

    lowest = {key: extremes(dist)[0] for key, dist in space.items()}
    out = [lowest]
    for key, dist in space.items():
        out += [{**lowest, key: v} for v in extremes(dist)[1:]]
    return out


def quoted(text: str) -> str:
    """``text`` as a quoted string of Hydra's override grammar (a path, say)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def as_override(key: str, value: Any) -> str:
    """``key=value`` in Hydra's override syntax (strings quoted where they need it)."""
    if isinstance(value, str):
        return f"{key}={value}" if value.replace("_", "").replace("-", "").isalnum() else f"{key}='{value}'"
    return f"{key}={value!r}" if isinstance(value, float) else f"{key}={value}"


class RLExpOptunaSweeper(Sweeper):
    """Optuna's search over the swept keys, one rlexp job per trial (see the module docstring).

    :param n_trials: trials in all (a continued study counts the trials it already has).
    :param n_jobs: trials asked for and handed to the launcher at once (a parallel or SLURM launcher
        runs them side by side; TPE proposes each batch from the trials finished before it).
    :param direction: ``maximize`` or ``minimize`` the score.
    :param sampler: ``tpe`` (Optuna's default) or ``random``.
    :param seed: the sampler's seed: the same sweep proposes the same trials.
    :param study_name: the study's name in ``storage``; None: the sweep directory's name.
    :param storage: an Optuna storage URL to keep the study in (None: in memory).
    :param params: a search space given in a config rather than on the command line, ``{key: "interval(0,1)"}``.
    :param seeds: runs per trial (K), at consecutive seeds from the run's ``seed``; 1: one run per trial.
    :param aggregate: a multi-seed trial's value: the ``mean``, ``iqm`` or ``median`` of its runs' scores.
    :param pruner: ``none``, or ``median``: each run reports its score after every epoch and stops early
        (as finished; its trial PRUNED) when that is worse than the median of the completed trials' at
        the same epoch (:mod:`rlexp.pruning`). One run per trial (``seeds`` 1).
    :param n_startup_trials: the median pruner prunes nothing until this many trials completed.
    :param n_warmup_steps: nor a run that completed fewer than this many epochs.
    """

    def __init__(
        self,
        n_trials: int,
        n_jobs: int,
        direction: str,
        sampler: str,
        seed: int | None,
        study_name: str | None,
        storage: str | None,
        params: dict[str, str] | None,
        seeds: int = 1,
        aggregate: str = "mean",
        pruner: str = "none",
        n_startup_trials: int = 5,
        n_warmup_steps: int = 0,
    ) -> None:
        if n_trials < 1 or n_jobs < 1:
            raise RLExpError(
                f"hydra.sweeper.n_trials={n_trials}, n_jobs={n_jobs} are out of range; use integers >= 1"
            )
        if direction not in DIRECTIONS:
            raise RLExpError(
                f"hydra.sweeper.direction={direction!r} is unknown; choose one of: {', '.join(DIRECTIONS)}"
            )
        if sampler not in SAMPLERS:
            raise RLExpError(
                f"hydra.sweeper.sampler={sampler!r} is unknown; choose one of: {', '.join(SAMPLERS)}"
            )
        if seeds < 1:
            raise RLExpError(
                f"hydra.sweeper.seeds={seeds} is out of range; use an integer >= 1 (runs per trial)"
            )
        if aggregate not in AGGREGATES:
            raise RLExpError(
                f"hydra.sweeper.aggregate={aggregate!r} is unknown; choose one of: {', '.join(AGGREGATES)}"
            )
        if pruner not in PRUNERS:
            raise RLExpError(
                f"hydra.sweeper.pruner={pruner!r} is unknown; choose one of: {', '.join(PRUNERS)}"
            )
        if n_startup_trials < 0 or n_warmup_steps < 0:
            raise RLExpError(
                f"hydra.sweeper.n_startup_trials={n_startup_trials}, n_warmup_steps={n_warmup_steps} are out "
                "of range; use integers >= 0"
            )
        if pruner != "none" and seeds > 1:
            raise RLExpError(
                f"hydra.sweeper.pruner={pruner} prunes a trial's one run by its score per epoch, but "
                f"hydra.sweeper.seeds={seeds}; use seeds=1 with a pruner, or pruner=none"
            )
        self.seeds, self.aggregate = seeds, aggregate
        self.pruner, self.n_startup_trials, self.n_warmup_steps = pruner, n_startup_trials, n_warmup_steps
        self.n_trials, self.n_jobs, self.direction = n_trials, n_jobs, direction
        self.sampler_name, self.seed = sampler, seed
        self.study_name, self.storage = study_name, storage
        self.params = params or {}
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.launcher: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _sampler(self) -> Any:
        import optuna

        if self.sampler_name == "random":
            return optuna.samplers.RandomSampler(seed=self.seed)
        return optuna.samplers.TPESampler(seed=self.seed)

    def sweep(self, arguments: list[str]) -> Any:
        import optuna

        assert self.config is not None and self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        params = [f"{k}={v}" for k, v in self.params.items()]
        overrides = parser.parse_overrides([*params, *arguments])
        fixed = [fixed_line(o) for o in overrides if one_value(o) and o.input_line]
        space = {o.get_key_element(): distribution(o) for o in overrides if not one_value(o)}
        if not space:
            raise RLExpError(
                "an Optuna sweep needs a search space, e.g. 'algo.lr=interval(1e-4,1e-2)' "
                "(interval, tag(log,interval), range or choice)"
            )
        # by key_or_group, as Hydra's override_dirname excludes them (+experiment=x has the key experiment)
        name_by_swept_keys(self.config, [o.key_or_group for o in overrides if one_value(o)])
        edge_trials = [[*fixed, *(as_override(k, v) for k, v in trial.items())] for trial in edges(space)]
        if check_jobs(self.config, self.hydra_context, edge_trials, what="edge trial"):
            # the trials' values are drawn as the study goes: the corners of the search space stand for them
            report_dry_run(self.config, edge_trials, "edge trial", f"{self.n_trials} trials")
            return None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        described = self._study_description(self.study_name or sweep_dir.name, sweep_dir)
        study = optuna.create_study(
            study_name=described["study_name"],
            storage=open_storage(described) if self.pruner != "none" else self.storage,
            sampler=self._sampler(),
            pruner=make_pruner(described) if self.pruner != "none" else None,
            direction=self.direction,
            load_if_exists=True,
        )
        reports = []  # with a pruner: where each run finds its trial (Hydra's env_set for the job)
        if self.pruner != "none":
            atomic_write_text(sweep_dir / STUDY_FILE, json.dumps(described, indent=1) + "\n")
            reports = [
                f"++hydra.job.env_set.{STUDY_VARIABLE}={quoted(str((sweep_dir / STUDY_FILE).resolve()))}"
            ]
        log.info(f"Optuna study {study.study_name}: {self.direction} the score over {', '.join(space)}")
        seeds = self.trial_seeds(overrides)
        if len(seeds) > 1:  # each job of a trial sets its own seed
            fixed = [
                fixed_line(o) for o in overrides if one_value(o) and o.input_line and o.key_or_group != "seed"
            ]
        done = len(study.trials)
        while done < self.n_trials:
            trials = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - done))]
            jobs = [
                [
                    *fixed,
                    *(as_override(k, v) for k, v in t.params.items()),
                    *([f"seed={s}"] if len(seeds) > 1 else []),
                    *(reports and [*reports, f"++hydra.job.env_set.{TRIAL_VARIABLE}={t._trial_id}"]),
                ]
                for t in trials
                for s in seeds
            ]
            self.validate_batch_is_legal(jobs)
            try:
                returns = self.launcher.launch(jobs, initial_job_idx=done * len(seeds))
            except BaseException:  # the sweep itself ends (a stop signal): no trial stays RUNNING
                for trial in trials:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
            for i, trial in enumerate(trials):
                self._tell(
                    study, trial, returns[i * len(seeds) : (i + 1) * len(seeds)], seeds, self.aggregate
                )
            done += len(trials)
        return self._report(study, sweep_dir, fixed)

    def _study_description(self, name: str, sweep_dir: Path) -> dict[str, Any]:
        """What a trial's run needs to open the study and its pruner (:mod:`rlexp.pruning`): the storage
        (``storage``, else with a pruner a journal file in the sweep directory, which every process on
        any node that sees the directory can open) and the pruner's settings."""
        journal = None
        if self.pruner != "none" and self.storage is None:
            journal = str((sweep_dir / JOURNAL_FILE).resolve())
            sweep_dir.mkdir(parents=True, exist_ok=True)
        return {
            "study_name": name,
            "storage": self.storage,
            "journal": journal,
            "pruner": self.pruner,
            "n_startup_trials": self.n_startup_trials,
            "n_warmup_steps": self.n_warmup_steps,
        }

    def trial_seeds(self, overrides: list[Override]) -> list[int]:
        """The seeds of each trial's runs: ``seeds`` consecutive ones from the command line's ``seed``
        (else the config's)."""
        given = [o for o in overrides if o.key_or_group == "seed" and not o.is_sweep_override()]
        assert self.config is not None
        base = int(given[-1].value()) if given else int(self.config.seed)
        return [base + i for i in range(self.seeds)]

    @staticmethod
    def _tell(study: Any, trial: Any, rets: list[Any], seeds: list[int], how: str) -> None:
        """Record the trial's value (its one run's score, or the ``how`` aggregate of its runs' scores,
        which it keeps per seed as the user attribute ``seed_scores``), or the trial as failed (one line)
        when a run failed or gave no score; the sweep goes on with the other trials. A stop signal that
        ended a run ends the sweep (the trial recorded as failed first, so that a stored study has no
        trial left RUNNING)."""
        import optuna

        from rlexp.stopping import Stopped

        scores: dict[int, float] = {}
        failed = []
        for seed, ret in zip(seeds, rets, strict=True):
            try:
                value = ret.return_value  # raises the job's error if it failed
            except Stopped:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
            except Exception as exc:
                message = (str(exc).strip().splitlines() or [""])[0]
                failed.append(f"{type(exc).__name__}: {message}")
                continue
            if value is None or not math.isfinite(float(value)):
                failed.append(f"no score ({value})")
            else:
                scores[seed] = float(value)
        if scores:
            trial.set_user_attr("seed_scores", {str(k): v for k, v in scores.items()})
        pruned = next(
            (t.user_attrs.get(PRUNED) for t in study.get_trials(deepcopy=False) if t.number == trial.number),
            None,
        )
        if pruned is not None and not failed:  # its run stopped early, as finished (rlexp.pruning)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log.info(
                f"trial {trial.number} pruned after {epochs(pruned['epochs'])} (score {pruned['score']:.6g})"
            )
            return
        if failed:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            which = "" if len(seeds) == 1 else f"{len(failed)} of its {len(seeds)} runs; "
            log.warning(f"trial {trial.number} failed ({which}{failed[0]}); counted as failed")
            return
        values = [scores[s] for s in seeds]
        study.tell(trial, values[0] if len(values) == 1 else aggregate(how, values))

    def _report(self, study: Any, sweep_dir: Path, fixed: list[str]) -> Any:
        import optuna

        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        if not complete:
            raise RLExpError(f"no trial of the Optuna sweep in {sweep_dir} returned a score")
        best = study.best_trial
        results = {
            "name": "optuna",
            "study_name": study.study_name,
            "direction": self.direction,
            "fixed": fixed,
            "best_trial": best.number,
            "best_params": dict(best.params),
            "best_value": float(best.value),
            "seeds_per_trial": self.seeds,
            "aggregate": self.aggregate if self.seeds > 1 else None,
            "pruner": self.pruner,
            "trials": [
                {
                    "number": t.number,
                    "params": dict(t.params),
                    "value": t.value,
                    "state": t.state.name,
                    **({"seed_scores": t.user_attrs["seed_scores"]} if "seed_scores" in t.user_attrs else {}),
                    **(
                        {"pruned_after_epochs": t.user_attrs[PRUNED]["epochs"]}
                        if PRUNED in t.user_attrs
                        else {}
                    ),
                }
                for t in study.trials
            ],
        }
        atomic_write_text(sweep_dir / "optimization_results.yaml", yaml.safe_dump(results, sort_keys=False))
        overrides = " ".join(as_override(k, v) for k, v in best.params.items())
        pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
        print(
            f"Best trial: {best.number} ({overrides}) score {best.value:.6g}; "
            + (f"{pruned} of {len(study.trials)} trials pruned; " if self.pruner != "none" else "")
            + f"all trials: {sweep_dir / 'optimization_results.yaml'}"
        )
        return results
