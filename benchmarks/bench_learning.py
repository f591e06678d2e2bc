"""Learning benchmark: PPO with rlexp's tuned presets (``tuned=ppo``) on MuJoCo, against published numbers.

For each env and seed it trains ``python -m rlexp tuned=ppo env=ENV seed=SEED`` (1M steps by default)
in its own process, one run at a time, and reports per env, as median (min-max) over the seeds:

- **last100**: the mean return of the last 100 training episodes (CleanRL's protocol), read from an
  episode log the benchmark's wrapper writes (``benchmarks/episode_log.py``);
- **det10**: the mean return of 10 episodes of the final policy acting deterministically, with the
  normalisation statistics of the checkpoint frozen (SB3-zoo's protocol), through :func:`rlexp.load`;
- **SPS**: env steps per second of the whole run (progress.txt's TotalEnvInteracts / Time);

beside SB3-zoo's and CleanRL's published returns and rlexp with Spinning Up's defaults (measured here
with ``--defaults``, else the one-seed figures of 2026-11-23 marked as such). The last lines are one
summary per env ending in the ratio of rlexp's det10 to SB3-zoo's published number.

    python benchmarks/bench_learning.py [--envs HalfCheetah-v4 Hopper-v4 Walker2d-v4] [--seeds 0 1 2]
        [--steps 1000000] [--defaults] [--sb3] [--variant LABEL KEY=VALUE ...] [--out outputs/bench_learning]

``--sb3`` also trains Stable-Baselines3 2.9.2 with the zoo presets (VecNormalize, one env; Hopper's
too, whose rlexp preset is CleanRL's now), side by side (about 560 steps/s here: 30 min a run).
``--variant LABEL KEY=VALUE ...`` trains the tuned preset with those overrides too (a tuning attempt;
``--only-variant`` trains just that). Runs already finished in ``--out`` are reused, so an
interrupted benchmark continues where it stopped, but only when they were trained with what the
preset gives now (the algo, env and network sections and seed recorded in each result file): a
finished run with other settings stops the benchmark with one line. This prints figures; it asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
ENVS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4")
# Published final returns at about 1M steps (../shared/reference/baselines.md): SB3-zoo's tuned PPO
# (deterministic evaluation, v3 envs) and CleanRL's PPO (last 100 training episodes, 3 seeds, v4 envs).
SB3_ZOO = {"HalfCheetah-v4": 5819.0, "Hopper-v4": 2410.0, "Walker2d-v4": 3479.0}
CLEANRL = {"HalfCheetah-v4": 1443.0, "Hopper-v4": 2383.0, "Walker2d-v4": 2288.0}
# rlexp PPO with Spinning Up's defaults, 1M steps, seed 0, last 100 training episodes: measured on
# this machine class on 2026-11-23 (issue 19); shown when --defaults is not given.
SPINUP_DEFAULTS_1SEED = {"HalfCheetah-v4": 1278.0, "Hopper-v4": 2614.0, "Walker2d-v4": 2013.0}
# SB3-zoo's PPO presets (hyperparams/ppo.yml, the v3 entries), for --sb3: SB3's own keys
ZOO_PRESETS: dict[str, dict[str, Any]] = {
    "HalfCheetah-v4": dict(
        batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05, ent_coef=0.000401762,
        clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8, vf_coef=0.58096,
        policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation="relu", net_arch=[256, 256]),
    ),
    "Hopper-v4": dict(
        batch_size=32, n_steps=512, gamma=0.999, learning_rate=9.80828e-05, ent_coef=0.00229519,
        clip_range=0.2, n_epochs=5, gae_lambda=0.99, max_grad_norm=0.7, vf_coef=0.835671,
        policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation="relu", net_arch=[256, 256]),
    ),
    "Walker2d-v4": dict(
        batch_size=32, n_steps=512, gamma=0.99, learning_rate=5.05041e-05, ent_coef=0.000585045,
        clip_range=0.1, n_epochs=20, gae_lambda=0.95, max_grad_norm=1.0, vf_coef=0.871923,
        policy_kwargs=dict(),
    ),
}  # fmt: skip
EVAL_EPISODES = 10


def child_env() -> dict[str, str]:
    """One thread per process; benchmarks/ importable (the episode-log wrapper); headless MuJoCo."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MUJOCO_GL="egl")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    return env


def rlexp_overrides(
    kind: str, env_id: str, seed: int, steps: int, variant: list[str] | None = None
) -> list[str]:
    """The command line of one rlexp run: ``tuned`` (tuned=ppo) or ``defaults`` (Spinning Up's PPO);
    ``variant``: overrides on top of the tuned preset (a tuning attempt, ``--variant``)."""
    base = ["algo=ppo"] if kind == "defaults" else ["tuned=ppo", *(variant or [])]
    base += [f"env={env_id}", f"seed={seed}"]
    spe = 4000 if kind == "defaults" else tuned_steps_per_epoch(env_id)
    for override in variant or []:  # a variant may change the epoch's size: the budget stays ``steps``
        if override.startswith("algo.steps_per_epoch="):
            spe = int(override.split("=", 1)[1])
    return [*base, f"algo.epochs={math.ceil(steps / spe)}", "env.wrappers=['episode_log:EpisodeLog']"]


def tuned_steps_per_epoch(env_id: str) -> int:
    """algo.steps_per_epoch of ``tuned=ppo env=ENV_ID`` (as rlexp composes it: a preset may take its
    values from another, e.g. CleanRL's generic MuJoCo settings)."""
    import rlexp

    return int(rlexp.compose(["tuned=ppo", f"env={env_id}"]).algo.steps_per_epoch)


def run_rlexp(
    kind: str, env_id: str, seed: int, steps: int, out: Path, variant: list[str] | None = None
) -> dict[str, Any]:
    """Train (or reuse) one rlexp run; return its figures (``kind`` names the files: tuned, defaults,
    or tuned-LABEL of a ``--variant``)."""
    run_dir = out / f"rlexp_{kind}_{env_id}_s{seed}"
    episodes = out / f"rlexp_{kind}_{env_id}_s{seed}.episodes.csv"
    result_file = out / f"rlexp_{kind}_{env_id}_s{seed}.json"
    overrides = rlexp_overrides(kind, env_id, seed, steps, variant)
    settings = training_settings(overrides)
    if result_file.is_file():
        result = json.loads(result_file.read_text())
        check_reusable(result_file, result.get("settings"), settings)
        return result
    cmd = [sys.executable, "-m", "rlexp", *overrides]
    cmd += ["logger.console=quiet", f"hydra.run.dir={run_dir}"]
    env = dict(child_env(), RLEXP_EPISODE_LOG=str(episodes))
    start = time.time()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    wall = time.time() - start
    det = subprocess.run(
        [sys.executable, __file__, "--evaluate", str(run_dir)],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    import pandas as pd

    progress = pd.read_table(run_dir / "progress.txt")
    result = {
        "kind": kind,
        "env": env_id,
        "seed": seed,
        "overrides": variant or [],
        "last100": last_episodes_mean(episodes),
        "det10": float(det.stdout.strip().splitlines()[-1]),
        "sps": float(progress["TotalEnvInteracts"].iloc[-1] / progress["Time"].iloc[-1]),
        "steps": int(progress["TotalEnvInteracts"].iloc[-1]),
        "wall_s": wall,
        "settings": settings,
    }
    result_file.write_text(json.dumps(result, indent=1))
    return result


def training_settings(overrides: list[str]) -> dict[str, Any]:
    """What a run with ``overrides`` trains with, as rlexp composes it today: the algo, env and network
    sections and the seed of its config (the keys that decide its returns)."""
    from omegaconf import OmegaConf

    import rlexp
    from rlexp.config import load_config, to_container

    composed = OmegaConf.to_container(rlexp.compose(overrides))
    composed.pop("hydra")
    return settings_of(to_container(load_config(composed)))


def recorded_settings(run_dir: Path) -> dict[str, Any]:
    """:func:`training_settings` of a finished run, from its config.yaml."""
    from rlexp.config import load_run_config, to_container

    return settings_of(to_container(load_run_config(run_dir)))


def settings_of(config: dict[str, Any]) -> dict[str, Any]:
    """The sections of a run's config that decide its returns."""
    return {key: config[key] for key in ("algo", "env", "network", "seed")}


def check_reusable(path: Path, stored: dict[str, Any] | None, settings: dict[str, Any]) -> None:
    """Stop (one line) when the finished run of ``path`` was trained with other settings than the
    preset gives now (a changed preset would otherwise be reported with stale figures)."""
    if stored is None:
        print(f"  {path.name}: no settings recorded (an older result); reused as it is", flush=True)
        return
    for section in settings:
        old, new = stored.get(section), settings[section]
        if old == new:
            continue
        keys = sorted(set(old) | set(new)) if isinstance(old, dict) and isinstance(new, dict) else [None]
        key = next(k for k in keys if k is None or old.get(k) != new.get(k))
        what = section if key is None else f"{section}.{key}"
        before, now = (old, new) if key is None else (old.get(key), new.get(key))
        raise SystemExit(
            f"bench_learning: {path} was trained with {what}={before!r}, but the preset now gives {now!r}; "
            f"move it (and its run directory) away to train again, or use another --out"
        )


def last_episodes_mean(path: Path, n: int = 100) -> float:
    """Mean return of the last ``n`` episodes of an episode log (``return,length`` lines)."""
    rows = [line.split(",") for line in path.read_text().splitlines() if line.strip()]
    return statistics.fmean(float(r[0]) for r in rows[-n:])


def evaluate(run_dir: str) -> float:
    """Mean return of EVAL_EPISODES deterministic episodes of the run's final policy (seeds 0..9),
    normalisation frozen (the checkpoint's statistics)."""
    import rlexp

    policy = rlexp.load(run_dir).policy(deterministic=True)
    returns = []
    for i in range(EVAL_EPISODES):
        obs, _ = policy.env.reset(seed=10_000 + i)
        done, total = False, 0.0
        while not done:
            obs, r, terminated, truncated, _ = policy.env.step(policy(obs))
            total += float(r)
            done = terminated or truncated
        returns.append(total)
    return statistics.fmean(returns)


def run_sb3(env_id: str, seed: int, steps: int, out: Path) -> dict[str, Any]:
    """Train (or reuse) SB3 2.9.2 PPO with the zoo preset of ``env_id``; return its figures."""
    result_file = out / f"sb3_{env_id}_s{seed}.json"
    if result_file.is_file():
        return json.loads(result_file.read_text())
    proc = subprocess.run(
        [sys.executable, __file__, "--sb3-child", env_id, str(seed), str(steps)],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result_file.write_text(json.dumps(result, indent=1))
    return result


def sb3_child(env_id: str, seed: int, steps: int) -> dict[str, Any]:
    """One SB3 run (in this process): the zoo's setup (one env, VecNormalize with the algorithm's gamma)."""
    sys.path.insert(0, str(HERE))
    from bench_sb3 import ensure_sb3

    ensure_sb3()
    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    hp = dict(ZOO_PRESETS[env_id])
    kwargs = dict(hp.pop("policy_kwargs"))
    if "activation" in kwargs:
        kwargs["activation_fn"] = {"relu": torch.nn.ReLU}[kwargs.pop("activation")]
        kwargs["net_arch"] = dict(pi=kwargs["net_arch"], vf=kwargs["net_arch"])
    venv = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=hp["gamma"])
    model = PPO("MlpPolicy", venv, policy_kwargs=kwargs, seed=seed, device="cpu", verbose=0, **hp)
    start = time.time()
    model.learn(total_timesteps=steps)
    wall = time.time() - start
    last100 = statistics.fmean(float(e["r"]) for e in model.ep_info_buffer)
    venv.training, venv.norm_reward = False, False
    returns = []
    for i in range(EVAL_EPISODES):
        venv.seed(10_000 + i)
        obs, done, total = venv.reset(), False, 0.0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, dones, infos = venv.step(action)
            done = bool(dones[0])
            if done:
                total = float(infos[0]["episode"]["r"])
        returns.append(total)
    return {
        "kind": "sb3",
        "env": env_id,
        "seed": seed,
        "last100": last100,
        "det10": float(np.mean(returns)),
        "sps": model.num_timesteps / wall,
        "steps": int(model.num_timesteps),
        "wall_s": wall,
    }


def spread(values: list[float]) -> str:
    """median (min-max) of ``values``."""
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--defaults", action="store_true", help="also train PPO with Spinning Up's defaults")
    parser.add_argument("--sb3", action="store_true", help="also train SB3 with the zoo presets (slow)")
    parser.add_argument(
        "--variant",
        nargs="+",
        metavar=("LABEL", "OVERRIDE"),
        help="also train the tuned preset with these overrides (a tuning attempt), e.g. "
        "--variant std1 algo.log_std_init=0",
    )
    parser.add_argument("--only-variant", action="store_true", help="train the --variant runs only")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench_learning")
    parser.add_argument("--evaluate", help=argparse.SUPPRESS)
    parser.add_argument("--sb3-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.evaluate:
        print(evaluate(args.evaluate))
        return
    if args.sb3_child:
        env_id, seed, steps = args.sb3_child
        print(json.dumps(sb3_child(env_id, int(seed), int(steps))))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    variant = f"tuned-{args.variant[0]}" if args.variant else None
    kinds = [] if args.only_variant else ["tuned"]
    kinds += [*(["defaults"] if args.defaults else []), *(["sb3"] if args.sb3 else [])]
    kinds += [variant] if variant else []
    for env_id in args.envs:
        for kind in kinds:
            for seed in args.seeds:
                if kind == "sb3":
                    r = run_sb3(env_id, seed, args.steps, args.out)
                elif kind == variant:
                    r = run_rlexp(kind, env_id, seed, args.steps, args.out, args.variant[1:])
                else:
                    r = run_rlexp(kind, env_id, seed, args.steps, args.out)
                print(
                    f"  {kind:8s} {env_id:15s} seed {seed}: last100 {r['last100']:8.1f}  det10 {r['det10']:8.1f}  "
                    f"{r['sps']:6.0f} SPS  {r['wall_s']:5.0f} s",
                    flush=True,
                )
                results.setdefault((kind, env_id), []).append(r)
    print(f"\nPPO, {args.steps:,} steps, seeds {' '.join(map(str, args.seeds))}; median (min-max) over seeds")
    header = "| env | rlexp tuned last100 | rlexp tuned det10 | rlexp SPS | Spinning Up defaults last100 |"
    header += " SB3 + zoo det10 | SB3 SPS | SB3-zoo published | CleanRL published |"
    print(header)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for env_id in args.envs:
        tuned = results.get(("tuned", env_id), [])
        defaults = results.get(("defaults", env_id), [])
        sb3 = results.get(("sb3", env_id), [])
        spinup = (
            spread([r["last100"] for r in defaults])
            if defaults
            else f"{SPINUP_DEFAULTS_1SEED[env_id]:,.0f} (1 seed, earlier)"
        )
        print(
            f"| {env_id} | {spread([r['last100'] for r in tuned])} | {spread([r['det10'] for r in tuned])} | "
            f"{spread([r['sps'] for r in tuned])} | {spinup} | {spread([r['det10'] for r in sb3])} | "
            f"{spread([r['sps'] for r in sb3])} | {SB3_ZOO[env_id]:,.0f} | {CLEANRL[env_id]:,.0f} |"
        )
    if variant:
        print(f"\n{variant} ({' '.join(args.variant[1:])} on top of tuned=ppo)")
        for env_id in args.envs:
            runs = results.get((variant, env_id), [])
            print(
                f"| {env_id} | last100 {spread([r['last100'] for r in runs])} | "
                f"det10 {spread([r['det10'] for r in runs])} | {spread([r['sps'] for r in runs])} SPS |"
            )
    print()
    for env_id in args.envs:
        tuned = results.get(("tuned", env_id), [])
        if tuned:
            det = statistics.median(r["det10"] for r in tuned)
            print(
                f"{env_id:15s} rlexp {det:,.0f}  sb3-zoo {SB3_ZOO[env_id]:,.0f}  {det / SB3_ZOO[env_id]:.2f}x"
            )


if __name__ == "__main__":
    main()
