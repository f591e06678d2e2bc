"""Env steps per second of every algorithm on HalfCheetah-v4, PyTorch vs TensorFlow, one thread each.

Prints figures and the TF/torch time ratio (target: TF within 1.3x of torch); asserts nothing.
    python benchmarks/bench_backends.py [--algos ppo sac] [--reps 2]
Steady state only: the first epoch (start-up, tracing, random actions) is excluded.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
ON = ["algo.epochs=3", "algo.steps_per_epoch=4000"]
OFF = [
    "algo.epochs=3",
    "algo.steps_per_epoch=1000",
    "algo.start_steps=1000",
    "algo.update_after=1000",
    "algo.num_test_episodes=1",
    "env.max_ep_len=500",
]
SETTINGS = {"vpg": ON, "trpo": ON, "ppo": ON, "ddpg": OFF, "td3": OFF, "sac": OFF}


def sps(algo: str, backend: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "rlexp",
            f"hydra.run.dir={run_dir}",
            f"algo={algo}",
            "env=HalfCheetah-v4",
            f"backend={backend}",
            "backend.threads=1",
            *SETTINGS[algo],
        ]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
        df = pd.read_table(run_dir / "progress.txt")
    steps = df["TotalEnvInteracts"].iloc[-1] - df["TotalEnvInteracts"].iloc[0]
    return steps / (df["Time"].iloc[-1] - df["Time"].iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(SETTINGS))
    parser.add_argument("--reps", type=int, default=1, help="repetitions per algorithm and backend (median)")
    args = parser.parse_args()
    print(f"{'algo':6} {'torch SPS':>10} {'tf SPS':>10} {'tf time / torch time':>22}")
    for algo in args.algos:
        t = statistics.median(sps(algo, "torch") for _ in range(args.reps))
        f = statistics.median(sps(algo, "tf") for _ in range(args.reps))
        print(f"{algo:6} {t:10.0f} {f:10.0f} {t / f:21.2f}x", flush=True)


if __name__ == "__main__":
    main()
