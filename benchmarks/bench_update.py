"""Cost of one off-policy gradient step (ms) of rlexp's learners, per backend, on HalfCheetah's shapes.

A micro-benchmark of the update alone (no env): obs 17, act 6, replay of 10,000 random transitions,
one minibatch sampled per step exactly as the loop does. Prints figures; asserts nothing.
    python benchmarks/bench_update.py [--algos td3 sac ddpg] [--backends torch tf] [--batch 256] [--hidden 256 256]
                                      [--set backend.compile=true ...] [--products]
Each (algo, backend) runs in a fresh subprocess with one thread, timed in CPU time (process_time), which
other load on a shared machine disturbs less than wall-clock time. ``--products`` (torch) also profiles
one window with torch's profiler and gives the part of an update spent in matrix products (``aten::mm``,
``addmm``, ``bmm``, ``baddbmm``: the kernels every torch library calls alike, so the floor under a
ratio against SB3), in ms and as a share of that window's wall-clock time (the profiler's clock).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")  # torch's matrix-product ops


def measure(
    algo: str,
    backend: str,
    batch: int,
    hidden: list[int],
    steps: int,
    overrides: list[str],
    products: bool = False,
) -> dict[str, float]:
    """Run in this process: ms per update (median of 5 windows) and us per act, after warm-up; with
    ``products`` (torch) also the ms per update in matrix products, from one more window under torch's
    profiler."""
    import numpy as np
    from gymnasium import spaces

    from rlexp.algos import ALGOS
    from rlexp.buffers import ReplayBuffer
    from rlexp.seeding import RankSeeds

    sys.path.insert(0, str(ROOT))  # tests.conftest composes configs exactly as the CLI does
    from tests.conftest import composed

    cfg = composed(
        f"algo={algo}",
        f"backend={backend}",
        "backend.threads=1",
        f"network.hidden_sizes=[{','.join(map(str, hidden))}]",
        f"algo.batch_size={batch}",
        *overrides,
    )
    obs_space = spaces.Box(-np.inf, np.inf, (17,), np.float32)
    act_space = spaces.Box(-1.0, 1.0, (6,), np.float32)
    learner = ALGOS[algo].learner_class(backend)(obs_space, act_space, cfg, RankSeeds(0))
    rng = np.random.default_rng(0)
    replay = ReplayBuffer(17, 6, 10_000)
    for _ in range(10_000):
        replay.store(rng.normal(size=17), rng.uniform(-1, 1, 6), rng.normal(), rng.normal(size=17), False)
    for _ in range(50):
        learner.update(replay.sample_batch(batch, rng))
    windows = []
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(steps):
            learner.update(replay.sample_batch(batch, rng))
        windows.append((time.process_time() - t0) / steps * 1e3)
    o = rng.normal(size=17).astype(np.float32)
    t0 = time.process_time()
    for _ in range(1000):
        learner.explore(o)
    act_us = (time.process_time() - t0) * 1e3  # 1000 calls: seconds * 1e3 = us per call
    result = {"update_ms": sorted(windows)[2], "act_us": act_us}
    if products and backend == "torch":
        from torch.profiler import ProfilerActivity, profile

        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(steps):
                learner.update(replay.sample_batch(batch, rng))
        # the profiler's times are wall-clock: the share is of the same window's wall-clock time
        result["profiled_ms"] = (time.perf_counter() - t0) / steps * 1e3
        us = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in PRODUCTS)
        result["products_ms"] = us / steps / 1e3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=["ddpg", "td3", "sac"])
    parser.add_argument("--backends", nargs="+", default=["torch", "tf"])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--steps", type=int, default=200, help="updates per timing window (5 windows)")
    parser.add_argument(
        "--set", nargs="*", default=[], help="extra config overrides, e.g. backend.jit_compile=true"
    )
    parser.add_argument(
        "--products", action="store_true", help="torch: the part of an update in matrix products (profiler)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        algo, backend = args.child.split(",")
        res = measure(algo, backend, args.batch, args.hidden, args.steps, args.set, args.products)
        print(json.dumps(res))
        return
    print(f"one gradient step, batch {args.batch}, hidden {args.hidden}, 1 thread (median of 5 windows)")
    for algo in args.algos:
        for backend in args.backends:
            cmd = [sys.executable, __file__, "--child", f"{algo},{backend}", "--batch", str(args.batch)]
            cmd += ["--steps", str(args.steps), "--hidden", *map(str, args.hidden), "--set", *args.set]
            cmd += ["--products"] if args.products else []
            out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            share = ""
            if "products_ms" in res:
                share = f"   products {res['products_ms']:6.2f} of {res['profiled_ms']:6.2f} ms profiled"
                share += f" ({res['products_ms'] / res['profiled_ms']:.0%})"
            print(
                f"  {algo:5} {backend:6} update {res['update_ms']:6.2f} ms   act {res['act_us']:6.1f} us{share}",
                flush=True,
            )


if __name__ == "__main__":
    main()
