"""Cost of rlexp's env path per env step, beside the raw env's step (issue 33): what the training loops
spend per env step outside the policy and the update, against ``gymnasium.make(ENV)``'s own ``step``.

rlexp's figure comes from real runs of the loops, read off their progress.txt: per env step, the
epoch's wall-clock time less the time spent acting (FracAct) and updating (FracUpdate, FracComm), i.e.
the env step, the vector env's bookkeeping, episode recording for exact resume, (off by default)
normalisation, the buffer writes and the loop itself. Settings that leave little else: PPO with a
linear policy (4,000-step epochs); SAC with random actions throughout (``start_steps`` = the run) and
no update and no test episodes; the median over the epochs after the first, the last one (its
checkpoint) left out. The raw figure is a plain loop over ``gymnasium.make`` envs, each ``step`` with
actions of the same distribution drawn beforehand (the policy's and the sampler's time is left out on
both sides) and ``reset`` when an episode ends. With ``env.num_envs=8`` (sync and async)
both sides step 8 envs and the figures are per env step. Each figure is the median of ``--reps``
repetitions, rlexp and raw alternating; one line per case ends in the ratio:

    env-path ppo 1 env         rlexp 105 us  raw 92 us  1.14x

    python benchmarks/bench_envpath.py [--env HalfCheetah-v4] [--reps 3] [--steps 20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, child_env

STEPS = 20_000  # env steps timed per measurement
CASES = (  # (family, num_envs, vector)
    ("ppo", 1, "sync"),
    ("ppo", 8, "sync"),
    ("ppo", 8, "async"),
    ("sac", 1, "sync"),
    ("sac", 8, "sync"),
    ("sac", 8, "async"),
)


def rlexp_us(env_id: str, family: str, num_envs: int, vector: str, steps: int) -> float:
    """rlexp's env path, microseconds per env step (see the module docstring)."""
    import pandas as pd

    epoch = 4000
    epochs = max(3, steps // epoch + 2)
    common = [f"env={env_id}", f"env.num_envs={num_envs}", f"env.vector={vector}", f"algo.epochs={epochs}"]
    common += [f"algo.steps_per_epoch={epoch}", "logger.console=quiet", "backend.threads=1"]
    if family == "ppo":
        # a linear policy whose mean starts near 0 (orthogonal init, head gain 0.01): its actions are then
        # about raw_actions' Gaussian (the physics' cost depends on them)
        algo = ["algo=ppo", "network.hidden_sizes=[]", "algo.ortho_init=true", "algo.train_pi_iters=1"]
        algo += ["algo.train_v_iters=1"]
    else:
        total = epochs * epoch
        algo = ["algo=sac", f"algo.start_steps={total}", f"algo.update_after={total}", "algo.test_every=0"]
        algo += [f"algo.save_freq={epochs}"]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "rlexp", *common, *algo, f"hydra.run.dir={tmp}/run"]
        subprocess.run(cmd, cwd=ROOT, env=child_env(), check=True, capture_output=True)
        df = pd.read_table(Path(tmp) / "run" / "progress.txt").iloc[1:-1]
    rest = 1.0 - df["FracAct"] - df["FracUpdate"] - df["FracComm"]
    return float(statistics.median(rest / df["SPS"]) * 1e6)


def raw_actions(family: str, space: object, count: int) -> object:
    """``count`` actions like those rlexp's run takes, drawn before the clock starts (the physics'
    cost depends on them: contacts): PPO's linear policy at its start, a Gaussian of std exp(-0.5)
    around 0 clipped to the bounds; SAC's warm-up, uniform in the bounds."""
    import numpy as np

    rng = np.random.default_rng(0)
    low, high = space.low, space.high
    if family == "ppo":
        return np.clip(rng.normal(0.0, np.exp(-0.5), (count, *low.shape)), low, high).astype(space.dtype)
    return rng.uniform(low, high, (count, *low.shape)).astype(space.dtype)


def raw_us(env_id: str, family: str, num_envs: int, vector: str, steps: int) -> float:
    """A plain loop over ``num_envs`` gymnasium envs (``async``: gymnasium's AsyncVectorEnv, an ended
    env reset within its step), microseconds per env step."""
    import gymnasium as gym

    rounds = steps // num_envs
    if vector == "async":
        mode = gym.vector.AutoresetMode.SAME_STEP
        envs = gym.vector.AsyncVectorEnv(
            [lambda: gym.make(env_id)] * num_envs, context="forkserver", autoreset_mode=mode
        )
        envs.reset(seed=0)
        actions = raw_actions(family, envs.single_action_space, rounds * num_envs).reshape(
            rounds, num_envs, -1
        )
        start = time.perf_counter()
        for k in range(rounds):
            envs.step(actions[k])
        elapsed = time.perf_counter() - start
        envs.close()
        return elapsed / (rounds * num_envs) * 1e6
    envs = [gym.make(env_id) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset(seed=i)
    actions = raw_actions(family, envs[0].action_space, rounds * num_envs)
    start = time.perf_counter()
    k = 0
    for _ in range(rounds):
        for env in envs:
            _, _, terminated, truncated, _ = env.step(actions[k])
            k += 1
            if terminated or truncated:
                env.reset()
    return (time.perf_counter() - start) / (rounds * num_envs) * 1e6


def child(kind: str, *args: object) -> float:
    """One measurement in a fresh one-thread interpreter."""
    spec = json.dumps([kind, *args])
    out = subprocess.run(
        [sys.executable, __file__, "--child", spec],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="HalfCheetah-v4")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", nargs="+", help="e.g. ppo-1-sync sac-8-async (default: all)")
    parser.add_argument("--steps", type=int, default=STEPS, help="env steps timed per measurement")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = json.loads(args.child)
        print((rlexp_us if kind == "rlexp" else raw_us)(*rest))
        return
    print(f"env path per env step on {args.env}, 1 thread, median of {args.reps}")
    cases = [tuple(c.split("-")) for c in args.cases] if args.cases else CASES
    for family, n, vector in ((f, int(n), v) for f, n, v in cases):
        print(measure(args.env, family, n, vector, args.steps, args.reps), flush=True)


def measure(env_id: str, family: str, n: int, vector: str, steps: int, reps: int) -> str:
    """One case, ``reps`` times, rlexp and raw alternating: its summary line (median, ratio, ranges)."""
    case = (env_id, family, n, vector, steps)
    ours, raw = [], []
    for _ in range(reps):
        ours.append(child("rlexp", *case))
        raw.append(child("raw", *case))
    a, b = statistics.median(ours), statistics.median(raw)
    label = f"{family} {n} env{'s' if n > 1 else ''}{f' {vector}' if n > 1 else ''}"
    return (
        f"env-path {label:16s} rlexp {a:5.0f} us  raw {b:5.0f} us  {a / b:.2f}x"
        f"  (rlexp {min(ours):.0f}-{max(ours):.0f}, raw {min(raw):.0f}-{max(raw):.0f})"
    )


if __name__ == "__main__":
    main()
