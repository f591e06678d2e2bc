"""Start-up and shut-down of ``python -m rlexp``: what a user waits for besides training.

Each figure is the median of ``--repeats`` runs (min-max beside it), wall-clock seconds measured from
outside the process:

- ``--help``: the whole ``python -m rlexp --help``;
- ``first epoch line``: from the start of ``python -m rlexp algo.epochs=1 ...`` to its first epoch row
  on stdout;
- ``before the first epoch``: that, less the row's own ``Time`` (the loop's clock, which starts once the
  env and learner are built): imports, Hydra, checks, the run directory, the learner;
- ``after "Run finished"``: from that line to the process's exit;
- ``whole run``: start to exit.

Prints figures; asserts nothing (this machine is shared and noisy: compare figures of one call).
    python benchmarks/bench_startup.py [--repeats 5] [-- more overrides, e.g. backend=tf]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_lines(cmd: list[str]) -> tuple[list[tuple[float, str]], float]:
    """Run ``cmd``; return its stdout lines with the seconds since its start at which each arrived,
    and the seconds to its exit."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stdout is not None
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in proc.stdout]
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
    return lines, time.perf_counter() - start


def run_figures(extra: list[str]) -> dict[str, float]:
    """One run of ``algo.epochs=1`` (``logger.console=table``): the figures of the module docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "rlexp", "algo.epochs=1", f"hydra.run.dir={Path(tmp) / 'run'}", *extra]
        lines, whole = timed_lines(cmd)
    first = next(t for t, line in lines if line.startswith("|") and "Epoch" in line)
    loop = next(float(line.split("|")[2]) for _, line in lines if line.startswith("|") and " Time " in line)
    finished = next(t for t, line in lines if line.startswith("Run finished"))
    return {
        "first epoch line": first,
        "before the first epoch": first - loop,
        'after "Run finished"': whole - finished,
        "whole run": whole,
    }


def show(name: str, values: list[float]) -> None:
    print(
        f"  {name:24s} {statistics.median(values):6.2f} s  ({min(values):.2f}-{max(values):.2f}, n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("extra", nargs="*", help="more overrides of the run, e.g. backend=tf")
    args = parser.parse_args()
    helps = [timed_lines([sys.executable, "-m", "rlexp", "--help"])[1] for _ in range(args.repeats)]
    runs = [run_figures(args.extra) for _ in range(args.repeats)]
    print(f"python -m rlexp, median of {args.repeats} (min-max), wall-clock seconds:")
    show("--help", helps)
    for key in runs[0]:
        show(key, [r[key] for r in runs])


if __name__ == "__main__":
    main()
