"""``python -m rlexp.plot LOGDIR...``: learning curves of runs and sweeps, written to an image file.

Every directory below the given ones that holds a progress.txt is a run. Runs are grouped into
conditions by their exp_name (or --legend per logdir); each condition is drawn as the mean over its
runs with a shaded band of one standard deviation (seaborn lineplot), Spinning Up style.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlexp.errors import RLExpError

if TYPE_CHECKING:
    import pandas as pd


def find_runs(logdirs: list[str]) -> list[Path]:
    """Every run directory (holding progress.txt) at or below each logdir, or whose path starts with it."""
    runs: list[Path] = []
    for logdir in logdirs:
        path = Path(logdir)
        roots = [path] if path.is_dir() else sorted(path.parent.glob(path.name + "*"))
        for root in roots:
            runs += sorted(p.parent for p in root.rglob("progress.txt"))
    if not runs:
        raise RLExpError(f"no runs (directories with a progress.txt) found under: {' '.join(logdirs)}")
    return runs


def load_runs(runs: list[Path], legend: list[str] | None, logdirs: list[str]) -> pd.DataFrame:
    import pandas as pd

    frames = []
    for i, run in enumerate(runs):
        df = pd.read_table(run / "progress.txt")
        if df.empty:
            continue
        cfg_file = run / "config.json"
        name = json.loads(cfg_file.read_text()).get("exp_name", "exp") if cfg_file.is_file() else "exp"
        if legend:
            name = next(
                lg for lg, d in zip(legend, logdirs, strict=True) if str(run).startswith(str(Path(d)))
            )
        df["Condition"] = name
        df["Unit"] = i
        df["Performance"] = df["AverageTestEpRet"] if "AverageTestEpRet" in df else df["AverageEpRet"]
        frames.append(df)
    if not frames:
        raise RLExpError("every progress.txt found is empty (no epoch finished yet)")
    return pd.concat(frames, ignore_index=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlexp.plot", description=__doc__.splitlines()[0])
    parser.add_argument("logdir", nargs="+", help="run or sweep directories, or path prefixes")
    parser.add_argument("--legend", "-l", nargs="*", help="one legend entry per logdir")
    parser.add_argument("--xaxis", "-x", default="TotalEnvInteracts", help="column for the x axis")
    parser.add_argument(
        "--value", "-y", default=["Performance"], nargs="*", help="columns to plot, one figure each"
    )
    parser.add_argument("--smooth", "-s", type=int, default=1, help="moving-average window in epochs")
    parser.add_argument(
        "--output", "-o", help="image file (PNG, SVG or PDF by extension) for the first value"
    )
    args = parser.parse_args(argv)
    try:
        if args.legend and len(args.legend) != len(args.logdir):
            raise RLExpError(f"--legend has {len(args.legend)} entries for {len(args.logdir)} logdirs")
        plot(args)
    except RLExpError as exc:
        print(f"rlexp.plot: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


def plot(args: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import seaborn as sns

    runs = find_runs(args.logdir)
    data = load_runs(runs, args.legend, args.logdir)
    for value in args.value:
        for col in (args.xaxis, value):
            if col not in data:
                raise RLExpError(f"column {col!r} is not in progress.txt; columns: {', '.join(data.columns)}")
    print("Plotting from:\n" + "\n".join(f"  {r}" for r in runs))
    sns.set_theme(style="darkgrid", font_scale=1.2)
    for i, value in enumerate(args.value):
        df = data.copy()
        if args.smooth > 1:
            kernel = np.ones(args.smooth)
            for _, idx in df.groupby("Unit").groups.items():
                y = df.loc[idx, value].to_numpy(dtype=float)
                df.loc[idx, value] = np.convolve(y, kernel, "same") / np.convolve(
                    np.ones_like(y), kernel, "same"
                )
        fig, ax = plt.subplots(figsize=(8, 5))
        sns.lineplot(data=df, x=args.xaxis, y=value, hue="Condition", units=None, errorbar="sd", ax=ax)
        ax.set_title(value)
        fig.tight_layout()
        first = Path(args.logdir[0])
        out = (
            Path(args.output)
            if args.output and i == 0
            else (first if first.is_dir() else runs[0]) / f"plot_{value}.png"
        )
        fig.savefig(out, dpi=120)
        plt.close(fig)
        print(f"Wrote {out}")


if __name__ == "__main__":
    main()
