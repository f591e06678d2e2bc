"""rlexp on a GPU (``backend.device=cuda``) against rlexp on one CPU thread, on the same machine.

Each row is one of ``make bench``'s (benchmarks/bench_sb3.py): rlexp's side of its matched settings,
timed the same way (a whole run in a fresh one-thread process, env steps per second over a window after
learning has started), once with ``backend.device=cpu`` and once on the GPU. The GPU runs go one at a
time; the CPU runs go meanwhile on other cores, at most one per row at a time, so that neither waits
for the other. Prints median [min-max] per device and one summary line per row ending in the ratio
GPU / CPU (``sac  cpu 285 SPS  cuda 190 SPS  0.67x``). ``--sb3`` also times Stable-Baselines3 on the
GPU at the row's matched settings, right after rlexp's GPU run of each repetition, and adds one line per
row ending in rlexp's ratio to it (``dqn-atari  cuda  rlexp 420 SPS  sb3 200 SPS  2.10x``). Needs a CUDA
GPU and a core per row plus one; asserts nothing.

    python benchmarks/bench_device.py [--algos ppo sac td3-zoo dqn-atari] [--reps 3] [--device cuda] [--sb3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from concurrent.futures import Future, ThreadPoolExecutor

from bench_sb3 import child, summary
from common import ensure_sb3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ppo", "sac", "td3-zoo", "dqn-atari"],
                        help="rows of bench_sb3.py")  # fmt: skip
    parser.add_argument("--reps", type=int, default=3, help="repetitions on each device")
    parser.add_argument("--device", default="cuda", help="backend.device of the GPU runs (cuda, cuda:N)")
    parser.add_argument("--warmup", type=int, default=1500, help="off-policy: env steps before the window")
    parser.add_argument("--window", type=int, default=1500, help="env steps timed (PPO: at least 2 updates)")
    parser.add_argument("--batch", type=int, default=100, help="td3/sac rows' minibatch (as bench_sb3.py)")
    parser.add_argument(
        "--sb3", action="store_true", help="also time SB3 on the GPU, beside rlexp's GPU runs"
    )
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"bench_device: --device {args.device} needs a CUDA GPU, and torch sees none")
    if (os.cpu_count() or 1) < len(args.algos) + 1:
        sys.exit(
            f"bench_device: {len(args.algos)} rows need {len(args.algos) + 1} cores; this machine has {os.cpu_count()}"
        )
    if args.sb3:
        ensure_sb3()
    timing = (args.warmup, args.window, args.batch)
    print(
        f"rlexp, {torch.cuda.get_device_name()} ({args.device}) against one CPU thread, {args.reps} repetitions"
    )
    with ThreadPoolExecutor(len(args.algos)) as pool:
        cpu: dict[str, list[Future]] = {algo: [] for algo in args.algos}
        for _ in range(args.reps):  # one of each row in a wave
            for algo in args.algos:
                cpu[algo].append(pool.submit(child, "rlexp", algo, *timing))
                cpu[algo][-1].add_done_callback(
                    lambda f, algo=algo: print(f"{algo:9} cpu    {f.result():8.0f} SPS", flush=True)
                )
        gpu: dict[str, list[float]] = {algo: [] for algo in args.algos}
        sb3: dict[str, list[float]] = {algo: [] for algo in args.algos}
        for _ in range(args.reps):  # the GPU runs one at a time: rlexp, then SB3, row by row
            for algo in args.algos:
                gpu[algo].append(child("rlexp", algo, *timing, device=args.device))
                print(f"{algo:9} {args.device:6} {gpu[algo][-1]:8.0f} SPS", flush=True)
                if args.sb3:
                    sb3[algo].append(child("sb3", algo, *timing, device=args.device))
                    print(f"{algo:9} sb3 {args.device:6} {sb3[algo][-1]:8.0f} SPS", flush=True)
        cpu_sps = {algo: [f.result() for f in futures] for algo, futures in cpu.items()}
    lines = []
    for algo in args.algos:
        ours, base = gpu[algo], cpu_sps[algo]
        print(f"{algo:9} cpu    {summary(base)}")
        print(f"{algo:9} {args.device:6} {summary(ours)}")
        print(f"{algo:9} ratio  {spread_of_ratios(ours, base)}")
        gpu_m, cpu_m = statistics.median(ours), statistics.median(base)
        lines.append(f"{algo}  cpu {cpu_m:.0f} SPS  {args.device} {gpu_m:.0f} SPS  {gpu_m / cpu_m:.2f}x")
        if args.sb3:
            theirs = sb3[algo]
            print(f"{algo:9} sb3 {args.device:6} {summary(theirs)}")
            print(f"{algo:9} rlexp / sb3 on {args.device}  {spread_of_ratios(ours, theirs)}")
            sb3_m = statistics.median(theirs)
            lines.append(
                f"{algo}  {args.device}  rlexp {gpu_m:.0f} SPS  sb3 {sb3_m:.0f} SPS  {gpu_m / sb3_m:.2f}x"
            )
    print("\nsummary (median SPS, ratio of medians)")
    print("\n".join(lines), flush=True)


def spread_of_ratios(ours: list[float], theirs: list[float]) -> str:
    """The median and range of the per-repetition ratios ``ours / theirs``."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    return f"median {statistics.median(ratios):.2f}x  [{min(ratios):.2f}-{max(ratios):.2f}]"


if __name__ == "__main__":
    main()
