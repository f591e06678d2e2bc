"""Throughput of rlexp's PPO (env steps per second), for 1, 2 and 4 MPI ranks at the same global batch.

Prints figures; asserts nothing (this machine is shared and noisy: compare ratios within one run).
    python benchmarks/bench_core.py [--env HalfCheetah-v4] [--epochs 3] [--procs 1 2 4]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def sps(env: str, procs: int, epochs: int, extra: list[str]) -> float:
    """Env steps per second after the first epoch (which includes start-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "rlexp",
            f"hydra.run.dir={run_dir}",
            f"env={env}",
            f"comm.procs={procs}",
            f"algo.epochs={epochs}",
            *extra,
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        df = pd.read_table(run_dir / "progress.txt")
    steps = df["TotalEnvInteracts"].iloc[-1] - df["TotalEnvInteracts"].iloc[0]
    return steps / (df["Time"].iloc[-1] - df["Time"].iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v4")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--procs", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("extra", nargs="*", help="more overrides, e.g. algo.steps_per_epoch=8000")
    args = parser.parse_args()
    base = None
    print(f"PPO on {args.env}, {args.epochs} epochs of 4000 steps (global), env steps per second:")
    for procs in args.procs:
        value = sps(args.env, procs, args.epochs, args.extra)
        base = base or value
        print(
            f"  procs={procs}  {value:8.0f} SPS  speed-up {value / base:4.2f}x  efficiency {value / base / procs:4.0%}"
        )


if __name__ == "__main__":
    main()
