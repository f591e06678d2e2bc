"""Learning curves of stored benchmark results: return against env steps or against wall-clock time.

    python benchmarks/plot_curves.py --env HalfCheetah-v4 --runs sac-tuned tqc-tuned crossq-tuned-w256 \
        [--x hours|steps] [--value test|train] [--results benchmarks/results/learning] [--output FILE] [--force]

Each name in ``--runs`` is a result's name without its env and seed (``ALGO-KIND``, as
``bench_learning.py`` stores them: ``sac-tuned_HalfCheetah-v4_s0.json``); every stored seed of it on
``--env`` is drawn. Against steps, a curve per name: the mean over its seeds with a band from the lowest to
the highest seed. Against hours (the training seconds each run logged, a resumed run's count going on),
one line per seed, since seeds reach a return at different times: the question a user with one machine
asks ("which algorithm gets there first on my CPU?"). Times are comparable only between runs trained
under the same load (one thread each, the same number of runs at a time); say so beside the figure.

The curves come from the ``curve`` entry that ``bench_learning.py`` stores with each result (one point
per epoch); results stored before it had one are left out with a line saying so. The figure is written
to ``--output`` (default ``outputs/plots/curves_<env>_<x>.png``); an existing file is replaced only with
``--force``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VALUES = {"test": "mean test return (deterministic)", "train": "mean training episode return"}


def load(results: Path, name: str, env: str) -> list[dict[str, Any]]:
    """The stored results of ``name`` on ``env`` that have a curve, by seed; a line for each without one."""
    found = []
    for path in sorted(results.glob(f"{name}_{env.replace('/', '-')}_s*.json")):
        result = json.loads(path.read_text())
        if "curve" not in result:
            print(f"plot_curves: {path.name} has no curve (stored before curves were), left out")
            continue
        found.append(result)
    return sorted(found, key=lambda r: r["seed"])


def seeds(results: list[dict[str, Any]]) -> str:
    """``1 seed``, ``3 seeds``: how many seeds a legend entry draws."""
    return f"{len(results)} seed{'s' * (len(results) != 1)}"


def figure(curves: dict[str, list[dict[str, Any]]], env: str, x: str, value: str, output: Path) -> None:
    """Draw ``curves`` (name -> results) and write the figure to ``output``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (name, results) in enumerate(curves.items()):
        colour = f"C{i}"
        if x == "hours":
            for j, r in enumerate(results):
                points = [
                    (s / 3600, v)
                    for s, v in zip(r["curve"]["seconds"], r["curve"][value], strict=True)
                    if s is not None and v is not None
                ]
                xs, ys = zip(*points, strict=True) if points else ((), ())
                ax.plot(xs, ys, color=colour, lw=1.2, label=f"{name} ({seeds(results)})" if j == 0 else None)
            continue
        length = min(len(r["curve"]["steps"]) for r in results)
        steps = np.asarray(results[0]["curve"]["steps"][:length], dtype=float)
        ys = np.array(
            [[np.nan if v is None else v for v in r["curve"][value][:length]] for r in results], dtype=float
        )
        ax.plot(steps, np.nanmean(ys, 0), color=colour, lw=1.5, label=f"{name} ({seeds(results)})")
        if len(results) > 1:
            ax.fill_between(steps, np.nanmin(ys, 0), np.nanmax(ys, 0), color=colour, alpha=0.2, lw=0)
    ax.set_xlabel("training time (hours)" if x == "hours" else "env steps")
    ax.set_ylabel(VALUES[value])
    ax.set_title(env)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", required=True, help="the env id of the results (e.g. HalfCheetah-v4)")
    parser.add_argument(
        "--runs", nargs="+", required=True, help="ALGO-KIND names, e.g. sac-tuned crossq-tuned-w256"
    )
    parser.add_argument("--x", choices=("hours", "steps"), default="hours", help="the x axis")
    parser.add_argument("--value", choices=tuple(VALUES), default="test", help="the return drawn")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "learning")
    parser.add_argument("--output", type=Path, help="the image file (default in outputs/plots/)")
    parser.add_argument("--force", action="store_true", help="replace an existing image")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        sys.exit(f"plot_curves: --results {args.results} is not a folder of result files")
    curves = {name: found for name in args.runs if (found := load(args.results, name, args.env))}
    missing = [name for name in args.runs if name not in curves]
    if missing:
        print(f"plot_curves: no result with a curve on {args.env} for {', '.join(missing)}")
    if not curves:
        sys.exit(
            f"plot_curves: nothing to draw for {args.env}: none of {', '.join(args.runs)} has a curve there"
        )
    output = args.output or ROOT / "outputs" / "plots" / f"curves_{args.env.replace('/', '-')}_{args.x}.png"
    if output.exists() and not args.force:
        sys.exit(f"plot_curves: {output} exists; pass --force to replace it")
    figure(curves, args.env, args.x, args.value, output)
    print(f"plot_curves: wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
