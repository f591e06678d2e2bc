"""``python -m rlexp.plot LOGDIR... [options]`` (``rlexp-plot``): learning curves and summary tables.

Spinning Up's ``plot`` for rlexp run and sweep directories, written to image files instead of a window.

Finding runs. Every directory at or below each LOGDIR that holds a progress.txt is a run: a LOGDIR may
be one run, a sweep (a Hydra multirun root), any folder above them, or a path prefix (``outputs/sweeps/2026-11-2``
takes every entry of ``outputs/sweeps`` whose name starts with ``2026-11-2``).

Conditions. Runs are grouped into conditions by what differs between them: the keys of the Hydra
overrides of each job (overrides.yaml), except ``seed``, whose values (as each run's config.yaml
resolved them) differ; keys every run shares are left out, so runs from different commands are
named by their differences only. A config group is told apart by its preset: ``algo=dqn`` and
``algo=rainbow`` (DQN with its extensions on, its ``name`` still ``dqn``) are two conditions, and
``env=CartPole-v1`` and ``env=CartPoleNoVel-v1`` two tasks (see :func:`condition_value`; Tasks below).
A sweep over ``seed=0,1,2 algo.lr=1e-3,3e-4`` gives one curve per learning rate, each the mean over its
three seeds with a shaded band of one standard deviation (``--ci``: a bootstrap confidence interval
instead). Runs that differ in nothing else are one condition named by their exp_name. ``--legend`` names the
conditions by LOGDIR instead, as in Spinning Up, in the order given.

Tasks. When the runs span several tasks (envs, :func:`env_task`: ``env=CartPole-v1,Acrobot-v1``), each
figure has one panel per task, titled by it, with its own y scale, and the env no longer splits
conditions (``env`` and ``env.id`` are left out of the labels, and so is the task at the end of a
default exp_name, ``ppo_CartPole-v1``): ``algo=sac`` on two envs is one condition, one colour in every
panel, one legend below them all; the ``--table`` has a ``task`` column, a row per task and condition.
``--no-panels`` draws every run on one axes instead, the env part of each condition, as with one task.

Output. One figure per ``--value``: every logged point marked (a one-epoch run is a dot), the legend
below the axes (long entries wrapped) and nothing cut off; PNG unless ``--output`` ends in .svg or .pdf; by default
``plot_<value>.png`` in LOGDIR (or in the folder that holds all the runs). An existing file is never
replaced unless ``--force`` is given. ``--table`` also prints a markdown summary per condition and
writes it as CSV: each run's score is the mean of its last ``--last`` values (5), as compare scores runs. ``--show`` also opens a window, when a display exists.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.display import has_display
from rlexp.errors import RLExpError, argument_parser, report
from rlexp.fileio import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:
    import pandas as pd

# Override keys that tell seeds apart: runs differing only in these are one condition.
SEED_KEYS = ("seed",)
# Override keys that name the task: with one panel per task they do not split conditions.
TASK_KEYS = ("env", "env.id")
IMAGE_FORMATS = (".png", ".svg", ".pdf")
ESTIMATORS = ("mean", "median", "min", "max")
PERFORMANCE = "Performance"
# A run's score in plot --table and compare (--last): the mean of its last 5 logged values, as the run's
# own score by default (conf/config.yaml's score.last, what rlexp.train and an Optuna sweep see)
SCORE_LAST = 5
BOOTSTRAP_SAMPLES = 2000
FIGSIZE = (8.0, 5.0)  # inches, without the legend (which adds its height below)
MAX_MARKERS = 25  # a line with more points marks every n-th (the line itself shows every point)
WRAP = 60  # characters per line of the title and of a legend entry
LEGEND_WIDTH = 90  # characters side by side in the legend's columns
LEGEND_COLUMNS = 4
PANEL_SIZE = (5.0, 3.75)  # inches of one panel (one per task), without the legend
PANEL_COLUMNS = 3  # panels side by side; more tasks wrap onto further rows


def wrap(text: str) -> str:
    """``text`` broken into lines of at most WRAP characters, at spaces (``a=1, b=2``: after a comma)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, WRAP, break_long_words=False, break_on_hyphens=False)) or text


@dataclass
class Run:
    """One run directory and what plot reads from it."""

    path: Path
    progress: pd.DataFrame
    overrides: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    exp_name: str = "exp"
    logdir: int = 0  # index of the LOGDIR argument it was found under
    performance_of: str | None = None  # the column that Performance copies
    # the preset of each config group the run started with (Hydra's choices, from provenance.json)
    choices: dict[str, str] = field(default_factory=dict)


def resolve_logdirs(logdirs: list[str]) -> list[list[Path]]:
    """For each LOGDIR, the directories it stands for: itself if it is one, else every sibling it prefixes."""
    out = []
    for logdir in logdirs:
        path = Path(logdir)
        if path.is_dir():
            out.append([path])
        else:
            parent = path.parent if path.parent.is_dir() else None
            out.append(sorted(p for p in parent.iterdir() if p.name.startswith(path.name)) if parent else [])
    return out


def find_runs(logdirs: list[str]) -> list[tuple[Path, int]]:
    """(run directory, index of its LOGDIR) for every run below the LOGDIRs, each run once."""
    found: dict[Path, int] = {}
    for i, roots in enumerate(resolve_logdirs(logdirs)):
        for root in roots:
            candidates = [root / "progress.txt"] if root.is_file() else sorted(root.rglob("progress.txt"))
            for progress in candidates:
                found.setdefault(progress.parent.resolve(), i)
    if not found:
        raise RLExpError(
            f"no runs (directories holding a progress.txt) found under: {' '.join(logdirs)}; "
            "give run or sweep directories, or a path prefix"
        )
    return list(found.items())


def parse_overrides(items: list[Any]) -> dict[str, str]:
    """``["algo.lr=0.001", "+x=1", "~y"]`` -> ``{"algo.lr": "0.001", "x": "1", "y": "(deleted)"}``."""
    out = {}
    for item in items:
        text = str(item)
        if text.startswith("~"):
            out[text[1:].split("=", 1)[0]] = "(deleted)"
            continue
        key, sep, value = text.lstrip("+").partition("=")
        if sep and not key.startswith("hydra."):
            out[key] = value
    return out


def _read_yaml(path: Path) -> Any:
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise RLExpError(
            f"{path} cannot be read ({type(exc).__name__}); is the run directory intact?"
        ) from None


def read_run(path: Path, logdir: int) -> Run | None:
    """The run at ``path``; None when its progress.txt has no epoch yet."""
    import io
    import json

    import pandas as pd

    file = path / "progress.txt"
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RLExpError(f"{file} cannot be read ({exc})") from None
    if text and not text.endswith("\n"):  # a row cut off by a crash (rlexp writes whole rows): left out
        text = text[: text.rfind("\n") + 1]
    try:
        progress = pd.read_table(io.StringIO(text))
    except pd.errors.EmptyDataError:
        return None
    except pd.errors.ParserError as exc:  # e.g. "Expected 25 fields in line 12, saw 40"
        raise RLExpError(f"{file} is not a whole table ({str(exc).strip()}); it is damaged") from None
    if progress.empty:
        return None
    run = Run(path, progress, logdir=logdir)
    if (path / "overrides.yaml").is_file():
        run.overrides = parse_overrides(_read_yaml(path / "overrides.yaml") or [])
    if (path / "config.yaml").is_file():
        run.config = _read_yaml(path / "config.yaml") or {}
    run.choices = read_choices(path)
    name = run.config.get("exp_name")
    if name is None and (path / "config.json").is_file():
        try:
            name = json.loads((path / "config.json").read_text()).get("exp_name")
        except (OSError, ValueError):
            name = None
    run.exp_name = str(name) if name is not None else "exp"
    algo, env_id, option = (
        _lookup(run.config, "algo.name"),
        _lookup(run.config, "env.id"),
        run.choices.get("algo"),
    )
    if option not in (None, algo) and run.exp_name == f"{algo}_{env_id}":  # the default name, by the option
        run.exp_name = f"{option}_{env_id}"  # algo=rainbow runs dqn: rainbow_MinAtar/Breakout-v1
    for col in ("AverageTestEpRet", "AverageEpRet"):  # Spinning Up's Performance
        if col in progress and progress[col].notna().any():
            progress[PERFORMANCE] = progress[col]
            run.performance_of = col
            break
    return run


def read_choices(path: Path) -> dict[str, str]:
    """The preset of each config group that the run at ``path`` started with (``{"algo": "rainbow",
    ...}``: Hydra's choices, which rlexp records in provenance.json); empty for a run recorded before
    they were, or whose provenance.json cannot be read (nothing in it is needed to read a run)."""
    try:
        record = json.loads((path / "provenance.json").read_text())
    except (OSError, ValueError):
        return {}
    choices = record.get("choices") if isinstance(record, dict) else None
    if not isinstance(choices, dict):
        return {}
    return {str(k): str(v) for k, v in choices.items() if v is not None}


def preset_of(run: Run, group: str) -> str | None:
    """The preset of config group ``group`` that ``run`` started with: its recorded choice, else the
    override that chose it (a run recorded before the choices were), else None (the default preset)."""
    return run.choices.get(group) or run.overrides.get(group)


ENV_ID_SHAPE = re.compile(r"[\w.:-]+-v\d+")  # how a gymnasium env id is named: Name-vN (module:Name-vN)


def task_name(preset: str | None, env_id: str, wrappers: Any, id_given: bool) -> str:
    """The task an env config trains on: ``env_id``, or the name of the env preset ``preset`` when that
    preset is a task of its own, an env under another id's name (``env=CartPoleNoVel-v1``: CartPole-v1
    with a mask). A preset is such a task when it wraps the env (``wrappers`` not empty), the id is the
    preset's own (``id_given`` false: no ``env.id=`` on the command line) and it is named as a gymnasium env id is,
    ``Name-vN``; a preset named otherwise (``atari``, ``minatar``, ``gym``) is a family of envs whose task
    is the ``env.id`` it was given. Plots, comparisons and run directories name a task by this."""
    if preset and preset != env_id and not id_given and wrappers and ENV_ID_SHAPE.fullmatch(preset):
        return preset
    return env_id


def env_task(run: Run) -> str:
    """The task ``run`` trained on (:func:`task_name` of its env preset and config)."""
    env = run.config.get("env") or {}
    return task_name(
        preset_of(run, "env"), str(env.get("id", "?")), env.get("wrappers"), "env.id" in run.overrides
    )


_MISSING = object()


def _lookup(config: dict[str, Any], key: str) -> Any:
    """The node at dotted ``key`` of a resolved config; ``_MISSING`` when it has none."""
    node: Any = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def condition_value(run: Run, key: str) -> tuple[str, str]:
    """What a legend shows for ``key`` in ``run``, and what is compared between runs to tell whether
    ``key`` differs.

    The run's resolved config.yaml decides, so runs from different commands agree on a value however
    they got it (``algo.lr=1e-3`` and SAC's default lr 0.001; ``env=gym env.id=Pendulum-v1`` and
    ``env=Pendulum-v1``). A group choice with a ``name`` shows its preset (:func:`preset_of`: a preset
    that extends another, ``algo=rainbow`` on dqn, keeps the name ``dqn`` but is a condition of its
    own), else the name; the env group its task (:func:`env_task`); one without either (``network``)
    shows the override, else ``(default)``, and is compared by its content. A key the config lacks (a
    run without config.yaml, a deleted key) takes the override's text.
    """
    node = _lookup(run.config, key)
    override = run.overrides.get(key)
    if node is _MISSING:
        text = override if override is not None else "(default)"
        return text, text
    if isinstance(node, dict):
        if "name" in node:
            shown = preset_of(run, key) or str(node["name"])
            return shown, shown
        if "id" in node:
            task = env_task(run) if key == "env" else str(node["id"])
            return task, task
        shown = override if override is not None else "(default)"
        return shown, json.dumps(node, sort_keys=True, default=str)
    return str(node), str(node)


def _sort_key(label: str) -> tuple:
    parts = []
    for piece in label.replace(", ", "=").split("="):
        try:
            parts.append((0, float(piece), ""))
        except ValueError:
            parts.append((1, 0.0, piece))
    return tuple(parts)


def task_free_name(run: Run) -> str:
    """The run's exp_name without the task it ends with: rlexp's default exp_name ``<algo.name>_<env.id>``
    (``ppo_CartPole-v1``) gives ``ppo``, so that one algorithm's runs on several tasks are one condition;
    any other name is kept whole."""
    name = run.exp_name
    env_id = _lookup(run.config, "env.id")
    for task in dict.fromkeys([env_task(run), *([str(env_id)] if env_id is not _MISSING else [])]):
        stem = name[: -len(task)].rstrip("_-") if name.endswith(task) else ""
        if stem:
            return stem
    return name


def label_conditions(
    runs: list[Run], legend: list[str] | None, ignore: tuple[str, ...] = SEED_KEYS, by_task: bool = False
) -> tuple[list[str], str | None]:
    """The condition of each run and the legend's title.

    With ``legend``: the entry of each run's LOGDIR. Otherwise the overrides but ``ignore`` (the seed;
    rlexp.compare and plot's panels also the env) whose values (see :func:`condition_value`) differ
    between runs, as ``key=value, key=value`` (with one such key, it is the title and the legend shows
    its values only); none gives each run's exp_name, ``by_task`` (the runs are grouped by task
    elsewhere) without the task it names (:func:`task_free_name`).
    """
    if legend:
        return [legend[r.logdir] for r in runs], None
    keys: list[str] = []
    for run in runs:
        keys += [k for k in run.overrides if k not in keys and k not in ignore]
    values = [{k: condition_value(r, k) for k in keys} for r in runs]
    varying = [k for k in keys if len({v[k][1] for v in values}) > 1]  # keys every run shares: left out
    if not varying:
        return [task_free_name(r) if by_task else r.exp_name for r in runs], None
    labels = [", ".join(f"{k}={v[k][0]}" for k in varying) for v in values]
    return labels, varying[0] if len(varying) == 1 else None


def group_runs(runs: list[Run], args: argparse.Namespace) -> tuple[list[str], str | None, list[str] | None]:
    """The condition of each run, the legend's title, and each run's task (:func:`env_task`) when the
    figures have one panel per task: where the runs span several tasks, unless ``--no-panels``. The
    env then does not split conditions (``algo=sac`` on two envs is one condition, in both panels);
    otherwise the tasks are None and the conditions are :func:`label_conditions`'s as they were."""
    tasks = [env_task(r) for r in runs]
    if args.no_panels or len(set(tasks)) < 2:
        return (*label_conditions(runs, args.legend), None)
    labels, title = label_conditions(runs, args.legend, ignore=(*SEED_KEYS, *TASK_KEYS), by_task=True)
    return labels, title, tasks


def select_runs(runs: list[Run], select: list[str] | None, exclude: list[str] | None) -> list[Run]:
    """Keep runs whose path or overrides contain every ``select`` substring and no ``exclude`` one."""

    def text(run: Run) -> str:
        return f"{run.path} " + " ".join(f"{k}={v}" for k, v in run.overrides.items())

    kept = [
        r
        for r in runs
        if all(s in text(r) for s in select or []) and not any(s in text(r) for s in exclude or [])
    ]
    if not kept:
        given = [
            f"--{name} {' '.join(values)}"
            for name, values in (("select", select), ("exclude", exclude))
            if values
        ]
        raise RLExpError(f"no run matches {' '.join(given)} (of {len(runs)} runs found)")
    return kept


def check_columns(runs: list[Run], columns: list[str]) -> None:
    """Every run must have every column."""
    for run in runs:
        for col in columns:
            if col not in run.progress:
                have = [c for c in run.progress.columns if all(c in r.progress for r in runs)]
                hint = " (it is AverageTestEpRet, else AverageEpRet)" if col == PERFORMANCE else ""
                raise RLExpError(
                    f"column {col!r}{hint} is not in {run.path / 'progress.txt'}; "
                    f"columns of every run: {', '.join(have)}"
                )


def smooth(y: Any, window: int) -> Any:
    """Spinning Up's smoothing: a centred moving average of ``window`` points, normalised at the ends."""
    import numpy as np

    if window <= 1:
        return y
    y = np.asarray(y, dtype=float)
    kernel = np.ones(window)
    return np.convolve(y, kernel, "same") / np.convolve(np.ones_like(y), kernel, "same")


def output_path(base: Path, value: str, explicit: str | None, n_values: int, suffix: str, stem: str) -> Path:
    """Where the figure or table of ``value`` goes: ``explicit`` (+ ``_<value>`` when there are several
    values), else ``base/<stem>_<value><suffix>``."""
    if explicit:
        path = Path(explicit)
        return path if n_values == 1 else path.with_name(f"{path.stem}_{value}{path.suffix}")
    return base / f"{stem}_{value}{suffix}"


def default_dir(logdirs: list[str], runs: list[Run]) -> Path:
    """Beside the data: the one LOGDIR given, else the deepest folder holding every run."""
    if len(logdirs) == 1 and Path(logdirs[0]).is_dir():
        return Path(logdirs[0])
    return Path(os.path.commonpath([str(r.path) for r in runs]))


def score_of(values: pd.Series, last: int = SCORE_LAST) -> float:
    """A run's score from its logged ``values`` (NaN rows left out): the mean of the last ``last`` (all of
    them where it has fewer; NaN where it has none). The one definition of plot --table and compare."""
    logged = values.dropna()
    return float(logged.iloc[-last:].mean()) if len(logged) else math.nan


def score_words(last: int, shortest: int) -> str:
    """How a table names that score: ``mean of its last 5 values``, and where a run has fewer, that
    those runs count all theirs (``shortest``: the fewest values a run has)."""
    words = f"mean of its last {last} value{'s' * (last != 1)}"
    if shortest < last:
        words += f" (of all its values where it has fewer: the shortest run has {shortest})"
    return words


def final_values(run: Run, value: str, last: int = SCORE_LAST) -> dict[str, float]:
    """A run's score on ``value`` (:func:`score_of`), with its logged values, steps and wall time."""
    import numpy as np

    df = run.progress
    steps = float(df["TotalEnvInteracts"].iloc[-1]) if "TotalEnvInteracts" in df else math.nan
    wall = float(df["Time"].iloc[-1]) if "Time" in df else math.nan
    sps = steps / wall if wall > 0 else math.nan
    return {
        "score": score_of(df[value], last),
        "logged": int(df[value].notna().sum()),
        "steps": steps,
        "time": wall,
        "sps": sps if np.isfinite(sps) else math.nan,
    }


def iqm_ci(x: Any, level: float) -> tuple[float, float, float]:
    """Interquartile mean of ``x`` and its percentile-bootstrap confidence interval at ``level`` percent."""
    import numpy as np
    from scipy import stats

    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    iqm = float(stats.trim_mean(x, 0.25))
    if len(x) < 2:
        return iqm, math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = stats.bootstrap(
            (x,),
            lambda s, axis: stats.trim_mean(s, 0.25, axis=axis),
            n_resamples=BOOTSTRAP_SAMPLES,
            confidence_level=level / 100,
            method="percentile",
            rng=np.random.default_rng(0),
        )
    return iqm, float(res.confidence_interval.low), float(res.confidence_interval.high)


def condition_order(labels: list[str], given: bool) -> list[str]:
    """The conditions in the order of the legend and the table: as first met when the user ``given``
    them (``--legend``: the order of the LOGDIRs), else sorted (numbers by value)."""
    unique = list(dict.fromkeys(labels))
    return unique if given else sorted(unique, key=_sort_key)


def summary_table(
    runs: list[Run],
    labels: list[str],
    value: str,
    level: float,
    given: bool = False,
    last: int = SCORE_LAST,
    tasks: list[str] | None = None,
) -> pd.DataFrame:
    """One row per condition (in :func:`condition_order`): the runs' scores on ``value`` (each the mean of
    its last ``last`` values, :func:`score_of`, as compare scores them) over its runs (mean, std, IQM with
    a bootstrap CI), the number of runs, and the mean steps, wall time and steps per second.

    With ``tasks`` (each run's, as the panels of :func:`group_runs`): a first column ``task`` and one row
    per task (sorted) and condition that has runs on it, since returns of different tasks do not pool."""
    import pandas as pd

    per_run = pd.DataFrame(
        [
            {"condition": lab, "task": task, **final_values(r, value, last)}
            for r, lab, task in zip(runs, labels, tasks or [""] * len(runs), strict=True)
        ]
    )
    rows = []
    for task in sorted(set(tasks)) if tasks is not None else [""]:
        for cond in condition_order(labels, given):
            g = per_run[(per_run["condition"] == cond) & (per_run["task"] == task)]
            if len(g):
                rows.append(
                    ({"task": task} if tasks is not None else {}) | summary_row(cond, g, value, level)
                )
    return pd.DataFrame(rows)


def summary_row(cond: str, g: pd.DataFrame, value: str, level: float) -> dict[str, Any]:
    """The row of :func:`summary_table` of condition ``cond`` from its runs' :func:`final_values` ``g``."""
    import numpy as np
    import pandas as pd

    finals = g["score"].to_numpy()
    iqm, low, high = iqm_ci(finals, level)
    return {
        "condition": cond,
        "value": value,
        "seeds": len(g),
        "score_mean": float(np.nanmean(finals)) if np.isfinite(finals).any() else math.nan,
        "score_std": float(pd.Series(finals).std(ddof=1)) if len(finals) > 1 else math.nan,
        "score_iqm": iqm,
        "iqm_ci_low": low,
        "iqm_ci_high": high,
        "steps": float(g["steps"].mean()),
        "wall_time_s": float(g["time"].mean()),
        "steps_per_s": float(g["sps"].mean()),
    }


def to_markdown(df: pd.DataFrame) -> str:
    """A pipe table with numbers to 4 significant digits."""

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def draw(
    runs: list[Run],
    labels: list[str],
    title: str | None,
    value: str,
    args: argparse.Namespace,
    tasks: list[str] | None = None,
) -> Any:
    """The figure of ``value`` against ``args.xaxis``: a seaborn lineplot, one line per condition.

    Every logged point is marked (a one-epoch run is a dot). The legend goes below the axes, its
    entries wrapped and in columns when short, and the figure grows to hold it; the title is wrapped.
    With ``tasks`` (each run's, :func:`group_runs`): one panel per task (sorted), PANEL_COLUMNS side by
    side and wrapping onto further rows, each titled by its task with its own y scale; a condition has
    one colour in every panel, the one legend below them all, the experiments' names above them.
    """
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    task_of = tasks if tasks is not None else [""] * len(runs)
    frames = []
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        # epochs without the value (no evaluation with algo.test_every > 1) are left out, not smoothed in
        df = run.progress[[args.xaxis, value]].dropna(subset=[value]).reset_index(drop=True)
        df[value] = smooth(df[value], args.smooth)
        shown = label.split("=", 1)[1] if title else label  # the title names the one key
        df["Condition"] = f"{shown}-{i}" if args.count else shown
        df["Run"] = i
        df["Task"] = task_of[i]
        frames.append(df)
    data = pd.concat(frames, ignore_index=True)
    hue_order = condition_order(data["Condition"].tolist(), given=bool(args.legend))
    errorbar = None if args.count else (("ci", args.ci) if args.ci is not None else "sd")
    sns.set_theme(style="darkgrid", font_scale=1.2)
    plt.rcParams["text.parse_math"] = False  # names and labels are text: a '$' in exp_name is a dollar sign
    panels = sorted(set(task_of))
    columns = min(PANEL_COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    size = FIGSIZE if tasks is None else (PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows)
    fig, grid = plt.subplots(rows, columns, figsize=size, layout="constrained", squeeze=False)
    for ax in grid.flat[len(panels) :]:  # the unused places of the last row
        fig.delaxes(ax)
    sources = {r.performance_of for r in runs}
    for k, (task, ax) in enumerate(zip(panels, grid.flat, strict=False)):
        points = max(len(r.progress) for r, t in zip(runs, task_of, strict=True) if t == task)
        sns.lineplot(
            data=data[data["Task"] == task],
            x=args.xaxis,
            y=value,
            hue="Condition",
            hue_order=hue_order,  # every condition, in every panel: the same colours everywhere
            estimator=args.est,
            errorbar=errorbar,
            n_boot=BOOTSTRAP_SAMPLES,
            seed=0,
            ax=ax,
            marker="o",
            markersize=6 if points <= MAX_MARKERS else 4,
            markevery=math.ceil(points / MAX_MARKERS),
            legend="auto" if k == 0 else False,
        )
        if value == PERFORMANCE and len(sources) == 1:
            ax.set_ylabel(f"{PERFORMANCE} ({next(iter(sources))})")
        if data.loc[data["Task"] == task, args.xaxis].max() > 5e3:  # Spinning Up's notation for many steps
            ax.ticklabel_format(style="sci", axis="x", scilimits=(0, 0))
        if tasks is not None:
            ax.set_title(wrap(task))
            if k % columns:  # the y label on the first column, the x label where no panel is below
                ax.set_ylabel("")
            if k + columns < len(panels):
                ax.set_xlabel("")
    names = sorted({task_free_name(r) if tasks is not None else r.exp_name for r in runs})
    heading = wrap(", ".join(names) if len(names) <= 3 else f"{len(names)} experiments")
    if tasks is None:
        grid[0, 0].set_title(heading)
    else:
        fig.suptitle(heading)
    legend = grid[0, 0].get_legend()
    if legend is not None:  # seaborn's, inside the axes: moved below them
        handles, texts = legend.legend_handles, [wrap(t.get_text()) for t in legend.get_texts()]
        legend.remove()
        widest = max(len(line) for text in texts for line in text.splitlines())
        ncol = max(1, min(len(texts), LEGEND_COLUMNS, LEGEND_WIDTH // (widest + 6)))
        below = fig.legend(
            handles,
            texts,
            loc="outside lower center",
            ncol=ncol,
            title=title,
            fontsize="medium" if widest <= 20 else "small",
            frameon=False,
        )
        fig.draw_without_rendering()
        height = below.get_window_extent().height / fig.dpi
        fig.set_size_inches(size[0], size[1] + height)  # the axes keep their height
    return fig


def plot(args: argparse.Namespace) -> None:
    """Load the runs, then write (and print) every figure and table that ``args`` asks for."""
    import matplotlib

    show = args.show and has_display()
    if not show:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found = find_runs(args.logdir)
    runs = [r for r in (read_run(p, i) for p, i in found) if r is not None]
    if not runs:
        raise RLExpError(f"every progress.txt under {' '.join(args.logdir)} is empty (no epoch finished yet)")
    runs = select_runs(runs, args.select, args.exclude)
    check_columns(runs, [args.xaxis, *args.value])
    labels, title, tasks = group_runs(runs, args)

    base = default_dir(args.logdir, runs)
    n = len(args.value)
    figures = {v: output_path(base, v, args.output, n, ".png", "plot") for v in args.value}
    tables = (
        {v: output_path(base, v, args.table or None, n, ".csv", "summary") for v in args.value}
        if args.table is not None
        else {}
    )
    for path in figures.values():
        if path.suffix.lower() not in IMAGE_FORMATS:
            raise RLExpError(
                f"--output {path}: unknown image type {path.suffix!r}; use one of: {', '.join(IMAGE_FORMATS)}"
            )
    for path in [*figures.values(), *tables.values()]:
        if path.is_dir():
            raise RLExpError(f"{path} is a directory; give a file name for the figure or table")
    if not args.force:
        for path in [*figures.values(), *tables.values()]:
            if path.exists():
                raise RLExpError(f"{path} already exists; pass --force to replace it, or choose another path")

    print("Plotting from:")
    for i, (run, label) in enumerate(zip(runs, labels, strict=True)):
        print(f"  {run.path}  [{label}]" + (f"  ({tasks[i]})" if tasks is not None else ""))
    for value in args.value:
        fig = draw(runs, labels, title, value, args, tasks)
        buf = io.BytesIO()
        # tight: the saved image takes in everything drawn, a legend or title wider than the figure too
        fig.savefig(
            buf, format=figures[value].suffix.lower()[1:], dpi=150, bbox_inches="tight", pad_inches=0.1
        )
        atomic_write_bytes(figures[value], buf.getvalue(), exclusive=not args.force)
        print(f"Wrote {figures[value]}")
        if not show:
            plt.close(fig)
        if value in tables:
            level = args.ci if args.ci is not None else 95.0
            df = summary_table(
                runs, labels, value, level, given=bool(args.legend), last=args.last, tasks=tasks
            )
            shortest = min(int(r.progress[value].notna().sum()) for r in runs)
            print(
                f"\n{value} per {'task and ' * (tasks is not None)}condition (a run's score: the "
                f"{score_words(args.last, shortest)}; IQM with a {level:g}% bootstrap CI):"
            )
            print(to_markdown(df) + "\n")
            atomic_write_text(tables[value], df.to_csv(index=False), exclusive=not args.force)
            print(f"Wrote {tables[value]}")
    if args.show and not show:
        print("rlexp.plot: no display; the figures were only written to files", file=sys.stderr)
    if show:
        plt.show()


def build_parser() -> argparse.ArgumentParser:
    """The command line; the names and meanings of Spinning Up's options are kept."""
    parser = argument_parser(
        prog="python -m rlexp.plot",
        description=__doc__.splitlines()[0].split(": ", 1)[1],
        epilog="Conditions, outputs and defaults: see the module docstring (python -c 'import rlexp.plot; help(rlexp.plot)').",
    )
    parser.add_argument(
        "logdir", nargs="+", help="run or sweep directories, folders above them, or path prefixes"
    )
    parser.add_argument(
        "--legend",
        "-l",
        nargs="*",
        help="one legend entry per LOGDIR (conditions then follow the LOGDIRs, in this order)",
    )
    parser.add_argument(
        "--xaxis", "-x", default="TotalEnvInteracts", help="progress.txt column of the x axis"
    )
    parser.add_argument(
        "--value",
        "-y",
        default=[PERFORMANCE],
        nargs="+",
        help="columns to plot, one figure each; Performance = AverageTestEpRet if logged, else AverageEpRet",
    )
    parser.add_argument(
        "--count", action="store_true", help="one curve per run instead of one per condition (no band)"
    )
    parser.add_argument(
        "--no-panels",
        action="store_true",
        help="runs on several tasks (envs): draw them all on one axes, the env a part of each condition "
        "(default: one panel per task, conditions without the env, the --table a row per task and condition)",
    )
    parser.add_argument(
        "--smooth", "-s", type=int, default=1, help="moving-average window in epochs, per run (1: none)"
    )
    parser.add_argument(
        "--select",
        nargs="*",
        action="extend",
        help="keep runs whose path or overrides contain every one of these strings (repeated: of every one)",
    )
    parser.add_argument(
        "--exclude",
        nargs="*",
        action="extend",
        help="drop runs whose path or overrides contain any of these strings (repeated: of every one)",
    )
    parser.add_argument(
        "--est", default="mean", choices=ESTIMATORS, help="the line: this statistic over a condition's runs"
    )
    parser.add_argument(
        "--ci",
        type=float,
        nargs="?",
        const=95.0,
        default=None,
        metavar="LEVEL",
        help="band: a bootstrap confidence interval of LEVEL percent (default 95) instead of one std",
    )
    parser.add_argument(
        "--output",
        "-o",
        help="image file (.png, .svg or .pdf); with several values each gets _<value> before the extension",
    )
    parser.add_argument(
        "--table",
        nargs="?",
        const="",
        default=None,
        metavar="CSV",
        help="also print a summary per condition (markdown) and write it as CSV "
        "(default: summary_<value>.csv beside the figure)",
    )
    parser.add_argument(
        "--last",
        type=int,
        default=SCORE_LAST,
        metavar="N",
        help=f"--table: a run's score is the mean of its last N values (default {SCORE_LAST}, as compare's)",
    )
    parser.add_argument("--force", action="store_true", help="replace figures and tables that already exist")
    parser.add_argument(
        "--show", action="store_true", help="also show the figures in a window, if a display exists"
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m rlexp.plot`` and ``rlexp-plot``."""
    args = build_parser().parse_args(argv)
    try:
        if args.legend and len(args.legend) != len(args.logdir):
            raise RLExpError(
                f"--legend has {len(args.legend)} entries for {len(args.logdir)} LOGDIRs; give one per LOGDIR"
            )
        if args.smooth < 1:
            raise RLExpError(f"--smooth {args.smooth} is out of range; use a window of 1 or more epochs")
        if args.ci is not None and not 0 < args.ci < 100:
            raise RLExpError(f"--ci {args.ci:g} is out of range; use a level between 0 and 100 (e.g. 95)")
        if args.last < 1:
            raise RLExpError(f"--last {args.last} is out of range; score a run by its last 1 or more values")
        plot(args)
    except RLExpError as exc:
        report(exc)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
