"""``python -m rlexp.compare LOGDIR... [options]`` (``rlexp-compare``): comparisons a reviewer trusts.

Aggregate comparisons of conditions over seeds and envs with the statistics of Agarwal et al., "Deep RL at
the Edge of the Statistical Precipice" (NeurIPS 2021), computed by their library ``rliable``: the
interquartile mean (IQM), median, mean and optimality gap of normalised scores with stratified bootstrap
confidence intervals, performance profiles, the probability that one condition improves on another, and
sample-efficiency curves (the IQM of normalised scores against env steps).

Runs and conditions. Runs are found as ``python -m rlexp.plot`` finds them (every directory holding a
progress.txt at or below each LOGDIR; ``--select``/``--exclude`` filter them) and grouped into conditions
the same way, by the overrides that differ between them, but for the seed and the env: the env is the
task axis. A config group is told apart by its preset (``algo=dqn`` and ``algo=rainbow`` are two
conditions). A run's task is its ``env.id`` (``env=minatar`` alone: MinAtar/Breakout-v1), or the name
of the env preset it was started with when that preset is a task of its own, an env id's name for a
wrapped env (``env=CartPoleNoVel-v1``; :func:`rlexp.plot.env_task`). Every condition must have runs on
every task, the same number on each (its seeds), at least two.

Scores. A run's score is the mean of its last ``--last`` logged values of ``--value`` (Performance:
AverageTestEpRet where the run evaluates, else AverageEpRet), normalised per task as
``(score - random) / (reference - random)``: 0 is a uniformly random policy, 1 the reference (by default
SB3-zoo's published return; rlexp's table is conf/scores.yaml, ``--scores FILE`` gives yours). With one
task, ``--raw`` compares raw returns instead.

Output (into ``--out``, by default ``compare/`` in the folder that holds the runs; an existing file is
kept unless ``--force``): ``compare.md`` (per task the raw score of each condition, median (min-max)
over seeds, and the aggregate metrics with their confidence intervals; the probabilities of improvement
of ``--pairs``) and ``compare.csv`` (one row per condition and metric), and the figures
``aggregates``, ``performance_profile``, ``sample_efficiency`` and (with ``--pairs``)
``probability_of_improvement`` as PNG, SVG or PDF (``--format``). Every bootstrap, the bands of the
figures included, is drawn from ``--seed``: the same runs give the same files.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.errors import RLExpError, argument_parser, report
from rlexp.fileio import atomic_write_bytes, atomic_write_text
from rlexp.plot import (
    PERFORMANCE,
    SCORE_LAST,
    SEED_KEYS,
    TASK_KEYS,
    Run,
    check_columns,
    condition_order,
    default_dir,
    env_task,
    find_runs,
    label_conditions,
    read_run,
    score_of,
    score_words,
    select_runs,
)

if TYPE_CHECKING:
    import numpy as np

# The aggregate metrics, in rliable's names, and what each says
METRICS = ("IQM", "Median", "Mean", "Optimality Gap")
FORMATS = ("png", "svg", "pdf")
PAIR = " | "  # between the two conditions of a probability of improvement (labels hold commas)


@dataclass
class Comparison:
    """The scores of each condition: ``scores[condition]`` is an array (seeds, tasks) of normalised
    scores; ``raw`` the same before normalisation; ``curves[condition]`` (seeds, tasks, points) of
    normalised scores at the env steps ``steps``."""

    tasks: list[str]
    conditions: list[str]
    scores: dict[str, np.ndarray]
    raw: dict[str, np.ndarray]
    curves: dict[str, np.ndarray]
    steps: np.ndarray
    shortest: int = 0  # the fewest values of --value a run has (fewer than --last: all of them count)


def load_scores(path: str | None) -> dict[str, dict[str, float]]:
    """rlexp's table of random and reference returns (conf/scores.yaml), with ``path``'s entries over it."""
    import yaml

    from rlexp.config import CONF_DIR

    table = yaml.safe_load((Path(CONF_DIR) / "scores.yaml").read_text()) or {}
    if path is not None:
        try:
            extra = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise RLExpError(f"--scores {path} cannot be read ({type(exc).__name__}: {exc})") from None
        if not isinstance(extra, dict) or not all(
            isinstance(v, dict) and {"random", "reference"} <= set(v) for v in extra.values()
        ):
            raise RLExpError(
                f"--scores {path} is not a table of env: {{random: R, reference: S}} entries (see conf/scores.yaml)"
            )
        table.update(extra)
    return table


def run_score(run: Run, value: str, last: int) -> float:
    """The run's score: the mean of its last ``last`` logged values of ``value`` (plot's :func:`score_of`)."""
    if run.progress[value].notna().sum() == 0:
        raise RLExpError(f"{run.path / 'progress.txt'} has no logged {value!r} yet")
    return score_of(run.progress[value], last)


def curve(run: Run, value: str, steps: np.ndarray) -> np.ndarray:
    """``value`` of the run at env steps ``steps`` (linear between its logged points)."""
    import numpy as np

    df = run.progress[["TotalEnvInteracts", value]].dropna()
    return np.interp(steps, df["TotalEnvInteracts"].to_numpy(float), df[value].to_numpy(float))


def build(runs: list[Run], labels: list[str], args: argparse.Namespace, given: bool = False) -> Comparison:
    """The normalised scores per condition, checked: every condition on every task, the same number of
    runs on each, at least two (one-line errors otherwise)."""
    import numpy as np

    check_columns(runs, [args.value, "TotalEnvInteracts"])
    tasks = sorted({env_task(r) for r in runs})
    conditions = condition_order(labels, given)
    by: dict[tuple[str, str], list[Run]] = {}
    for run, label in zip(runs, labels, strict=True):
        by.setdefault((label, env_task(run)), []).append(run)
    for cond in conditions:
        missing = [t for t in tasks if (cond, t) not in by]
        if missing:
            have = [t for t in tasks if (cond, t) in by]
            raise RLExpError(
                f"condition {cond!r} has runs on {', '.join(have)} but none on {', '.join(missing)}; every "
                "condition needs runs on every env (pick them with --select/--exclude)"
            )
        counts = {t: len(by[cond, t]) for t in tasks}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{n} on {t}" for t, n in counts.items())
            raise RLExpError(
                f"condition {cond!r} has {listed}; the stratified bootstrap needs the same number of runs "
                "(seeds) on every env"
            )
        if min(counts.values()) < 2:
            raise RLExpError(
                f"condition {cond!r} has 1 run per env; a confidence interval needs at least 2 seeds per "
                "condition and env (runs one by one: python -m rlexp.plot DIR --table)"
            )
    if args.raw and len(tasks) > 1:
        raise RLExpError(
            f"--raw compares one env's returns, but the runs are on {len(tasks)} envs: {', '.join(tasks)}"
        )
    table = {} if args.raw else load_scores(args.scores)
    unknown = [t for t in tasks if t not in table] if not args.raw else []
    if unknown:
        raise RLExpError(
            f"env {unknown[0]} has no random and reference return in rlexp's table (conf/scores.yaml); give "
            f"--scores FILE with '{unknown[0]}: {{random: R, reference: S}}'"
            + (", or --raw to compare its returns" if len(tasks) == 1 else "")
        )

    def normalise(x: Any, task: str) -> Any:
        if args.raw:
            return x
        low, high = float(table[task]["random"]), float(table[task]["reference"])
        return (x - low) / (high - low)

    ends = [float(r.progress["TotalEnvInteracts"].iloc[-1]) for r in runs]
    starts = [float(r.progress["TotalEnvInteracts"].iloc[0]) for r in runs]
    steps = (
        np.linspace(max(starts), min(ends), args.points) if min(ends) > max(starts) else np.array(ends[:1])
    )
    scores, raw, curves = {}, {}, {}
    for cond in conditions:
        raw[cond] = np.array(
            [[run_score(r, args.value, args.last) for r in by[cond, t]] for t in tasks]
        ).T  # (seeds, tasks)
        scores[cond] = np.stack([normalise(raw[cond][:, j], t) for j, t in enumerate(tasks)], axis=1)
        curves[cond] = np.stack(
            [np.stack([normalise(curve(r, args.value, steps), t) for r in by[cond, t]]) for t in tasks],
            axis=1,
        )  # (seeds, tasks, points)
    shortest = min(int(r.progress[args.value].notna().sum()) for r in runs)
    return Comparison(tasks, conditions, scores, raw, curves, steps, shortest)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global random state seeded with ``seed``, and put back afterwards: rliable's stratified
    bootstraps draw their resamples from it (``np.random.choice``; the ``random_state`` they take only
    seeds arch's generator, which they do not use), so this is what makes them repeatable."""
    import numpy as np

    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _intervals(data: dict, func: Any, reps: int, level: float, seed: int) -> tuple[dict, dict]:
    """rliable's point estimates of ``func`` per entry of ``data`` and their stratified-bootstrap CIs
    (``reps`` resamples, ``level`` percent, a fixed ``seed``: the same numbers every time)."""
    from rliable import library as rly

    with _seeded(seed):
        return rly.get_interval_estimates(data, func, reps=reps, confidence_interval_size=level / 100)


def aggregates(comp: Comparison, reps: int, level: float, seed: int) -> tuple[dict, dict]:
    """The IQM, median, mean and optimality gap of the normalised scores, with their CIs."""
    import numpy as np
    from rliable import metrics

    def func(x: np.ndarray) -> np.ndarray:
        return np.array(
            [
                metrics.aggregate_iqm(x),
                metrics.aggregate_median(x),
                metrics.aggregate_mean(x),
                metrics.aggregate_optimality_gap(x),
            ]
        )

    return _intervals(comp.scores, func, reps, level, seed)


def improvement(
    comp: Comparison, pairs: list[tuple[str, str]], reps: int, level: float, seed: int
) -> tuple[dict, dict]:
    """P(X > Y) for each pair (X, Y) (rliable's probability of improvement, averaged over tasks)."""
    from rliable import metrics

    data = {f"{x}{PAIR}{y}": (comp.scores[x], comp.scores[y]) for x, y in pairs}
    return _intervals(data, metrics.probability_of_improvement, reps, level, seed)


def efficiency(comp: Comparison, reps: int, level: float, seed: int) -> tuple[dict, dict]:
    """The IQM of the normalised scores at each of ``comp.steps`` with its CI (sample efficiency)."""
    import numpy as np
    from rliable import metrics

    def func(x: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(x[..., k]) for k in range(x.shape[-1])])

    return _intervals(comp.curves, func, reps, level, seed)


def _parts(condition: str) -> list[tuple[str, str | float]]:
    """``key=value, key=value`` as (key, value) pairs, a number's value as a float (``1e-3`` is ``0.001``)."""
    parts: list[tuple[str, str | float]] = []
    for part in condition.split(","):
        key, _, value = part.strip().partition("=")
        try:
            parts.append((key, float(value)))
        except ValueError:
            parts.append((key, value))
    return parts


def parse_pairs(pairs: list[str] | None, conditions: list[str]) -> list[tuple[str, str]]:
    """``--pairs X:Y`` as pairs of conditions. A condition's numbers may be spelled as on the command line
    that made the runs (``algo.lr=3e-4`` for the condition ``algo.lr=0.0003``)."""

    def find(given: str) -> str | None:
        if given in conditions:
            return given
        return next((c for c in conditions if _parts(c) == _parts(given)), None)

    out = []
    for pair in pairs or []:
        x, sep, y = pair.partition(":")
        found = (find(x), find(y)) if sep else (None, None)
        if found[0] is None or found[1] is None:
            raise RLExpError(f"--pairs {pair!r}: give X:Y with two conditions of: {', '.join(conditions)}")
        out.append((found[0], found[1]))
    return out


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.3f}"


def tables(
    comp: Comparison,
    agg: tuple[dict, dict],
    poi: tuple[dict, dict] | None,
    level: float,
    args: argparse.Namespace,
) -> tuple[str, str]:
    """(markdown, csv) of the comparison."""
    import numpy as np

    what = "raw returns" if args.raw else "normalised scores"
    md = [
        f"# {args.value}: a run's score is the {score_words(args.last, comp.shortest)}",
        "",
        "Raw score per env, median (min-max) over seeds:",
        "",
    ]
    md.append("| condition | " + " | ".join(comp.tasks) + " |")
    md.append("|---|" + "---:|" * len(comp.tasks))
    for cond in comp.conditions:
        cells = []
        for j in range(len(comp.tasks)):
            v = comp.raw[cond][:, j]
            cells.append(f"{np.median(v):,.1f} ({v.min():,.1f} to {v.max():,.1f})")
        md.append(f"| {cond} | " + " | ".join(cells) + " |")
    md += [
        "",
        f"Aggregates of the {what} over {len(comp.tasks)} env(s), {level:g}% stratified bootstrap CIs:",
        "",
    ]
    md.append("| condition | seeds | " + " | ".join(METRICS) + " |")
    md.append("|---|---:|" + "---:|" * len(METRICS))
    csv = ["condition,metric,estimate,ci_low,ci_high"]
    points, cis = agg
    for cond in comp.conditions:
        cells = [
            f"{_fmt(points[cond][k])} [{_fmt(cis[cond][0][k])}, {_fmt(cis[cond][1][k])}]"
            for k in range(len(METRICS))
        ]
        md.append(f"| {cond} | {comp.scores[cond].shape[0]} | " + " | ".join(cells) + " |")
        csv += [
            f'"{cond}",{m},{points[cond][k]},{cis[cond][0][k]},{cis[cond][1][k]}'
            for k, m in enumerate(METRICS)
        ]
    if poi is not None:
        md += [
            "",
            f"Probability of improvement P(X > Y), {level:g}% CIs:",
            "",
            "| X | Y | P(X > Y) |",
            "|---|---|---:|",
        ]
        for key, p in poi[0].items():
            x, y = key.split(PAIR, 1)
            low, high = poi[1][key][0], poi[1][key][1]
            md.append(
                f"| {x} | {y} | {_fmt(float(np.ravel(p)[0]))} [{_fmt(float(np.ravel(low)[0]))}, {_fmt(float(np.ravel(high)[0]))}] |"
            )
            csv.append(
                f'"{x} > {y}",probability_of_improvement,{float(np.ravel(p)[0])},{float(np.ravel(low)[0])},{float(np.ravel(high)[0])}'
            )
    return "\n".join(md) + "\n", "\n".join(csv) + "\n"


def figures(
    comp: Comparison, agg: tuple[dict, dict], poi: tuple[dict, dict] | None, eff: tuple[dict, dict],
    args: argparse.Namespace,
) -> dict[str, Any]:  # fmt: skip
    """name -> matplotlib figure, drawn with rliable's plot_utils."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns
    from matplotlib.lines import Line2D
    from rliable import library as rly
    from rliable import plot_utils

    label = "Raw return" if args.raw else "Normalised score"
    palette = sns.color_palette("colorblind", len(comp.conditions))
    colors = dict(zip(comp.conditions, palette, strict=True))
    handles = [Line2D([0], [0], color=colors[c], lw=2, label=c) for c in comp.conditions]
    out = {}
    fig, _ = plot_utils.plot_interval_estimates(
        agg[0], agg[1], metric_names=list(METRICS), algorithms=comp.conditions, xlabel=label, colors=colors,
        xlabel_y_coordinate=-0.25 - 0.8 / len(comp.conditions),  # below the ticks however many rows
    )  # fmt: skip
    out["aggregates"] = fig
    all_scores = np.concatenate([s.ravel() for s in comp.scores.values()])
    taus = np.linspace(min(0.0, float(all_scores.min())), max(1.0, float(all_scores.max())), 81)
    profiles, profile_cis = _intervals(  # rliable's create_performance_profile, with the seed
        comp.scores, lambda s: rly.score_distributions(s, taus), args.reps, args.ci, args.seed
    )
    fig, ax = plt.subplots(figsize=(7, 5))
    plot_utils.plot_performance_profiles(
        {c: profiles[c] for c in comp.conditions}, taus,
        performance_profile_cis={c: profile_cis[c] for c in comp.conditions}, xlabel=rf"{label} $(\tau)$", ax=ax,
        colors=colors,
    )  # fmt: skip
    ax.legend(handles=handles, loc="upper right")
    out["performance_profile"] = fig
    fig, ax = plt.subplots(figsize=(7, 5))
    plot_utils.plot_sample_efficiency_curve(
        comp.steps, eff[0], eff[1], algorithms=comp.conditions, xlabel="Env steps", ylabel=f"IQM {label.lower()}",
        ax=ax, colors=colors,
    )  # fmt: skip
    ax.legend(handles=handles, loc="lower right")
    out["sample_efficiency"] = fig
    if poi is not None:
        ax = plot_utils.plot_probability_of_improvement(
            poi[0], poi[1], pair_separator=PAIR, xlabel="P(X > Y)"
        )
        out["probability_of_improvement"] = ax.figure
    return out


def compare(args: argparse.Namespace) -> Path:
    """Run the comparison of ``args``; return the folder it wrote."""
    runs = [r for r in (read_run(p, i) for p, i in find_runs(args.logdir)) if r is not None]
    if not runs:
        raise RLExpError(f"no run under {' '.join(args.logdir)} has logged an epoch yet")
    runs = select_runs(runs, args.select, args.exclude)
    labels, _ = label_conditions(
        runs, args.legend, ignore=(*SEED_KEYS, *TASK_KEYS), by_task=True
    )  # env: the task axis
    comp = build(runs, labels, args, given=bool(args.legend))
    pairs = parse_pairs(args.pairs, comp.conditions)
    level = args.ci
    agg = aggregates(comp, args.reps, level, args.seed)
    poi = improvement(comp, pairs, args.reps, level, args.seed) if pairs else None
    eff = efficiency(comp, args.reps, level, args.seed)
    out = Path(args.out) if args.out else default_dir(args.logdir, runs) / "compare"
    md, csv = tables(comp, agg, poi, level, args)
    figs = figures(comp, agg, poi, eff, args)
    files = {"compare.md": md.encode(), "compare.csv": csv.encode()}
    import io

    for name, fig in figs.items():
        buf = io.BytesIO()
        fig.savefig(buf, format=args.format, bbox_inches="tight")
        files[f"{name}.{args.format}"] = buf.getvalue()
    existing = [n for n in files if (out / n).exists()]
    if existing and not args.force:
        raise RLExpError(f"{out / existing[0]} exists; give --force to replace it, or another --out")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        if name.endswith((".md", ".csv")):
            atomic_write_text(out / name, data.decode())
        else:
            atomic_write_bytes(out / name, data)
    print(md)
    print(f"written: {', '.join(str(out / n) for n in files)}")
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argument_parser(
        prog="python -m rlexp.compare",
        description="Aggregate comparisons of conditions over seeds and envs (rliable): IQM, median, mean, "
        "optimality gap with stratified bootstrap CIs, performance profiles, probability of improvement, "
        "sample-efficiency curves.",
    )
    parser.add_argument(
        "logdir", nargs="+", help="run or sweep directories (or path prefixes), as for rlexp.plot"
    )
    parser.add_argument(
        "--value", default=PERFORMANCE, help="progress.txt column scored (default Performance)"
    )
    parser.add_argument(
        "--last",
        type=int,
        default=SCORE_LAST,
        help="a run's score: the mean of its last N values (as plot --table)",
    )
    parser.add_argument(
        "--scores", help="YAML of env: {random: R, reference: S} over rlexp's conf/scores.yaml"
    )
    parser.add_argument(
        "--raw", action="store_true", help="one env: compare raw returns, not normalised ones"
    )
    parser.add_argument("--pairs", nargs="+", metavar="X:Y", help="conditions whose P(X > Y) to estimate")
    parser.add_argument("--legend", "-l", nargs="+", help="name the conditions by LOGDIR (in order)")
    parser.add_argument(
        "--select",
        nargs="+",
        action="extend",
        help="keep runs whose path or overrides contain all of these (repeated: all of every --select)",
    )
    parser.add_argument(
        "--exclude",
        nargs="+",
        action="extend",
        help="drop runs whose path or overrides contain any of these (repeated: any of every --exclude)",
    )
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples (rliable's reps)")
    parser.add_argument("--ci", type=float, default=95.0, help="confidence level in percent")
    parser.add_argument(
        "--points", type=int, default=20, help="env-step points of the sample-efficiency curves"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the bootstrap (the same numbers every time)"
    )
    parser.add_argument("--format", default="png", choices=FORMATS, help="figure file format")
    parser.add_argument("--out", help="output folder (default: compare/ beside the runs)")
    parser.add_argument("--force", action="store_true", help="replace existing output files")
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        for key, low in (("last", 1), ("reps", 10), ("points", 2)):
            if getattr(args, key) < low:
                raise RLExpError(f"--{key} {getattr(args, key)} is out of range; use {low} or more")
        if not 0 < args.ci < 100:
            raise RLExpError(f"--ci {args.ci} is out of range; use a level in percent between 0 and 100")
        compare(args)
    except RLExpError as exc:
        report(exc)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
