"""Learning benchmark: rlexp at 1M steps on MuJoCo against the peers' published numbers.

For each env, kind and seed it trains one run in its own process (one thread) and reports per env, as
median (min-max) over the seeds:

- **test**: the mean AverageTestEpRet of the last 10 evaluations (Spinning Up's protocol: its
  off-policy curves are the deterministic test return, smoothed over 11 epochs), off-policy only;
- **det10**: the mean return of 10 episodes of the final policy acting deterministically, with the
  normalisation statistics of the checkpoint frozen (SB3-zoo's protocol), through :func:`rlexp.load`;
- **last100**: the mean return of the last 100 training episodes (CleanRL's protocol), from the run's
  ``episodes.csv`` (``logger.episodes=true``);
- **SPS**: env steps per second of the whole run (progress.txt's TotalEnvInteracts / Time; a resumed
  run's Time leaves out the time it was stopped);
- **act6** (MinAtar only): the mean return of 100 episodes of the final policy exploring as MinAtar's own
  DQN did (epsilon 0.1 over all 6 of MinAtar's actions, where the -v1 ids trained on have the minimal
  set; :func:`minatar_acting`), a second summary line against MinAtar's curve; a result stored before
  act6 existed gets it when the command runs again and the run's checkpoint is still there;

beside SB3-zoo's, CleanRL's and Spinning Up's published returns (benchmarks/common.py). The last lines
are one summary per algorithm, kind and env ending in the ratio to the first published number there is
(SB3-zoo's where it has one), of the median figure that follows that reference's protocol: det10 for
SB3-zoo, last100 for MinAtar's DQN curves (training episodes, epsilon 0.1) and CleanRL. MinAtar's envs
also get lines against its DQN at rlexp's step size (2.5e-4), read off its step-size sensitivity plot:
its Breakout curve was trained with a larger one. Atari returns in summary lines carry their
human-normalised scores (HNS, conf/scores.yaml's random and human returns), and their ratios are of
those (a ratio of Pong's negative returns would mean nothing). With ``--sb3`` a last line per rlexp kind
and env holds rlexp's median det10 against SB3's, measured in the same benchmark.

    python benchmarks/bench_learning.py [--algo ppo|sac|td3|ddpg|dqn|qrdqn|c51|rainbow|tqc|crossq ...] [--kinds tuned defaults zoo ...]
        [--envs HalfCheetah-v4 Hopper-v4 Walker2d-v4] [--seeds 0 1 2] [--steps 1000000] [--jobs 1]
        [--sb3] [--variant LABEL KEY=VALUE ...] [--set KEY=VALUE ...] [--stored]
        [--out outputs/bench_learning] [--results benchmarks/results/learning]

Kinds: ``tuned`` is ``algo=ALGO tuned=ALGO`` (rlexp's tuned presets), ``defaults`` is ``algo=ALGO``
alone (Spinning Up's defaults), ``zoo`` (SAC, TD3) is ``algo=ALGO tuned=ALGO
tuned_preset=ALGO/_zoo_mujoco`` (SB3-zoo's MuJoCo entry on every env, also where the tuned preset chose
other settings), ``rainbow`` (DQN) is ``algo=rainbow tuned=dqn algo.distributional=null algo.noisy=false``
(the tuned preset with double Q, dueling, 3-step returns and prioritized replay on: the four parts of
Rainbow that algo=rainbow had before issue 75, whose stored results it keeps; the whole Rainbow is
``--algo rainbow``); PPO trains ``tuned`` unless ``--kinds`` says
otherwise (``--defaults`` adds Spinning Up's), DQN ``tuned`` and ``rainbow``, SAC and TD3 ``tuned``,
``defaults`` and ``zoo``, DDPG ``tuned`` and ``defaults``. Kinds that train the same settings (SAC's
``tuned`` and ``defaults`` on the MuJoCo v4 three, TD3's ``tuned`` and ``zoo``) share one run: it is
trained once and reported under each, a stored result of one kind is reused for the other, and a run
of one kind stopped part-way is continued for the other.
``--sb3`` (PPO, DQN) also trains Stable-Baselines3 2.9.2 with the zoo presets, side by side (PPO: about
560 steps/s here, 30 min a run).

Recurrent PPO: ``--algo ppo --envs CartPoleNoVel-v1 PendulumNoVel-v1 --sb3`` trains the tuned (LSTM)
presets, the same without memory (kind ``feedforward``) and sb3-contrib's RecurrentPPO with the zoo's
ppo_lstm settings, each at its preset's budget (1e5 steps).

TQC and CrossQ: ``--algo tqc crossq`` trains ``tuned`` (RL Baselines3 Zoo's MuJoCo settings) at 300,000
steps on HalfCheetah, Walker2d, Ant and Humanoid (v4) by default, against SimbaV2's baseline results at 300k
(CrossQ's and SAC's evaluation returns; CrossQ also against its 1M figures and rlexp's own SAC at 1M);
``--algo sac tqc crossq`` adds rlexp's SAC (``tuned``) at the same budget and a line per algorithm and env
against it.

QR-DQN, C51 and Rainbow (``--algo qrdqn c51 rainbow``, DQN's envs, kind ``tuned``: ``algo=ALGO tuned=ALGO``,
rlexp's tuned presets for them): ``--algo qrdqn --sb3`` trains sb3-contrib's QRDQN with the zoo's qrdqn.yml
presets beside rlexp's (CartPole-v1, LunarLander-v3); ``--algo rainbow c51`` on MinAtar is held against the
stored results of ``--algo dqn`` (kind tuned) on the same ids and seeds, in summary lines of their own. With
rliable installed, every comparison with a side-by-side peer (``--sb3``) or with the stored DQN adds the IQM of
each side and P(X > Y) (rliable's probability of improvement), each with a 95% stratified-bootstrap interval
(5,000 resamples, seed 0), for det10 and last100.

DQN's envs are CartPole-v1 and LunarLander-v3 by default; ``--envs`` also takes MinAtar/Breakout-v1,
MinAtar/SpaceInvaders-v1 (env=minatar; -v0 for all 6 actions, as MinAtar's own DQN played) and
ALE/Pong-v5 (env=atari), each at its tuned preset's budget
(CartPole 5e4 steps, LunarLander 1e5, MinAtar 5e6, Atari 1e7) unless ``--steps`` says otherwise; the
reference columns are SB3-zoo's, CleanRL's and MinAtar's own DQN. ``--variant LABEL
KEY=VALUE ...`` trains the tuned preset with those overrides too (a tuning attempt; ``--only-variant``
trains just that) of every ``--algo`` whose config has its keys; the others train their own kinds
(``--algo sac tqc crossq --variant w256 algo.critic_width=256 --only-variant``). ``--set`` adds
overrides to every run (e.g. a tiny budget for a test).
``--only-sb3`` trains only the ``--sb3`` runs (e.g. beside an rlexp benchmark of the same envs).
``--stored`` trains nothing: it reports the stored results of the command's runs and leaves out those
that have none (the tables of a benchmark whose last runs are still training).

Order: seed by seed (every algorithm, env and kind of seed 0 before any of seed 1), so that a benchmark
stopped part-way has compared everything on its first seeds.

Stopping and continuing: each run's directory is ``--out``/ALGO-KIND_ENV_sSEED and each finished run's
figures are ``--results``/ALGO-KIND_ENV_sSEED.json (small files meant to be kept in the repository).
Run the same command again after any stop (Ctrl-C, SIGKILL, a reboot): finished runs are reused, and
an unfinished run continues from its last checkpoint (rlexp's exact resume: the same numbers as if it
had never stopped; an ``--sb3`` run continues from the checkpoint SB3 saves every 100k steps and at a
stop signal, through SB3's own load: not bit for bit). A finished run is reused only when it was
trained with what the preset gives now (the algo, env and network sections and seed recorded in its
result file; a key that rlexp gained since counts as the value an old run resumes with,
:func:`rlexp.config.upgrade_old_keys`); otherwise the benchmark stops with one line naming the first
different key. ``--jobs N`` trains N runs at a time. This prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import (
    ALSO_AGAINST,
    DQN_ENVS,
    EARLY_ENVS,
    MUJOCO_ENVS,
    NOVEL_ENVS,
    OWN_SUMMARY,
    PUBLISHED,
    PUBLISHED_300K,
    REFERENCES,
    ROOT,
    ZOO_DQN,
    ZOO_PPO,
    ZOO_PPO_LSTM,
    ZOO_QRDQN,
    atari_random_human,
    child_env,
    ensure_sb3,
    spread,
)

ALGOS = ("ppo", "sac", "td3", "ddpg", "dqn", "qrdqn", "c51", "rainbow", "tqc", "crossq")
DQN_FAMILY = ("dqn", "qrdqn", "c51", "rainbow")  # DQN and its presets (algo=qrdqn ...): DQN's envs
OFF_POLICY = ("sac", "td3", "ddpg", *DQN_FAMILY, "tqc", "crossq")
SB3_ALGOS = ("ppo", "dqn", "qrdqn")  # the algorithms --sb3 trains a peer of (sb3-contrib's QRDQN for qrdqn)
KINDS = ("tuned", "defaults", "zoo", "rainbow", "feedforward")  # the named kinds (--variant adds tuned-LABEL)
EVAL_EPISODES = 10
MINATAR_EPSILON = 0.1  # MinAtar's DQN explores with END_EPSILON 0.1 after its first 105k frames
MINATAR_ACTIONS = 6  # MinAtar's full action set: no-op, left, up, right, down, fire (the -v0 ids)
ACT6_EPISODES = 100  # MinAtar's curves are moving averages over 100 episodes
TEST_EVALUATIONS = 10  # the test figure: mean AverageTestEpRet of the last this many evaluations
OFF_POLICY_SAVE_FREQ = (
    5  # off-policy checkpoints hold the replay buffer (~170 MB at 1M steps): every 5 epochs
)
_print_lock = threading.Lock()
_compose_lock = threading.Lock()  # Hydra's composition is global state: one thread at a time


def _stop_with_parent() -> None:
    """In a run's process between fork and exec: SIGTERM when the benchmark dies (even by SIGKILL), so
    the run checkpoints after its epoch and ends rather than train on unattended."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


class Children:
    """The runs in training, each in its own session (a Ctrl-C reaches it once, from here): a stop
    signal (SIGINT, SIGTERM, SIGHUP) is passed on to each, which then checkpoints after its current
    epoch and ends; this process waits for them and starts no more. If this process dies, its runs
    get SIGTERM from the kernel."""

    def __init__(self) -> None:
        self.procs: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.stopping = False

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.stop)

    def stop(self, signum: int, _frame: object) -> None:
        with self.lock:
            self.stopping = True
            for proc in self.procs:
                proc.send_signal(signum)

    def run(self, cmd: list[str], out: Any) -> int:
        """Run ``cmd`` to its end (output to ``out``); its exit status (-1: not started, stopping)."""
        with self.lock:
            if self.stopping:
                return -1
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=child_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_stop_with_parent if sys.platform == "linux" else None,
            )
            self.procs.add(proc)
        try:
            return proc.wait()
        finally:
            with self.lock:
                self.procs.discard(proc)


_CHILDREN = Children()


def say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


def env_overrides(algo: str, env: str) -> list[str]:
    """The env of a benchmark: an env preset, or (DQN's MinAtar and Atari games) a preset and its id."""
    if algo in DQN_FAMILY and env in DQN_ENVS:
        preset, env_id = DQN_ENVS[env]
        return [f"env={preset}", *([f"env.id={env_id}"] if env_id else [])]
    return [f"env={env}"]


def rlexp_overrides(
    algo: str, kind: str, env_id: str, seed: int, steps: int | None, extra: list[str], variant: list[str]
) -> list[str]:
    """The command line of one rlexp run. ``kind``: ``defaults`` (Spinning Up's), ``tuned`` or a
    tuned variant (``variant``: its overrides), ``zoo`` (SB3-zoo's MuJoCo entry), for DQN also
    ``rainbow`` (algo=rainbow with the tuned preset), for PPO on a partially observed env also
    ``feedforward`` (the tuned recurrent preset with network.recurrent=null); ``extra``: ``--set`` overrides of every run; ``steps``: the budget (None:
    the preset's)."""
    if kind == "rainbow":  # DQN with the four parts algo=rainbow had before issue 75 (its stored results)
        base = ["algo=rainbow", f"tuned={algo}", "algo.distributional=null", "algo.noisy=false"]
    elif kind == "zoo":  # SB3-zoo's MuJoCo entry, whatever the env's tuned preset chose
        base = [f"algo={algo}", f"tuned={algo}", f"tuned_preset={algo}/_zoo_mujoco"]
    elif kind == "feedforward":  # the tuned (recurrent) preset without its memory
        base = [f"algo={algo}", f"tuned={algo}", "network.recurrent=null"]
    else:
        base = [f"algo={algo}", *([] if kind == "defaults" else [f"tuned={algo}", *variant])]
    base += [*env_overrides(algo, env_id), f"seed={seed}", *extra]
    import rlexp

    composed = rlexp.compose(base)
    spe, epochs = int(composed.algo.steps_per_epoch), int(composed.algo.epochs)
    if steps is not None and abs(epochs * spe - steps) >= spe:  # the preset's own epochs when they are
        epochs = math.ceil(steps / spe)  # this budget (Hopper's CleanRL preset: 488 x 2,048), else enough
    tail = [f"algo.epochs={epochs}", "logger.episodes=true"]
    if algo in OFF_POLICY and not any(o.startswith("algo.save_freq=") for o in base):
        tail.append(f"algo.save_freq={OFF_POLICY_SAVE_FREQ}")
    return [*base, *tail]


_MISSING = object()  # OmegaConf.select's answer for a key the config lacks


def takes_variant(algo: str, overrides: list[str]) -> bool:
    """Whether ``algo``'s config has every key that ``overrides`` set (a group choice such as
    ``network=...`` counts as taken): ``--variant w256 algo.critic_width=256`` is a variant of CrossQ only,
    and ``--algo sac crossq`` then trains SAC's own kinds beside it."""
    from omegaconf import OmegaConf

    import rlexp

    with _compose_lock:
        composed = rlexp.compose([f"algo={algo}"])
    keys = [o.split("=", 1)[0].lstrip("+~") for o in overrides]
    return all(
        "." not in key or OmegaConf.select(composed, key, default=_MISSING) is not _MISSING for key in keys
    )


def budget(algo: str, env_id: str) -> int:
    """The env steps of the tuned preset of ``algo`` on ``env_id`` (epochs x steps_per_epoch)."""
    import rlexp

    with _compose_lock:
        composed = rlexp.compose([f"algo={algo}", f"tuned={algo}", *env_overrides(algo, env_id)])
    return int(composed.algo.epochs) * int(composed.algo.steps_per_epoch)


def run_name(algo: str, kind: str, env_id: str, seed: int) -> str:
    return f"{algo}-{kind}_{env_id.replace('/', '-')}_s{seed}"


def run_rlexp(
    algo: str,
    kind: str,
    env_id: str,
    seed: int,
    args: argparse.Namespace,
    variant: list[str],
    overrides: list[str],
    settings: dict[str, Any],
) -> dict[str, Any] | None:
    """Train, continue or reuse one rlexp run (``overrides``: its command line, ``settings``: their
    :func:`training_settings`); return its figures (None with ``--stored`` when it has none)."""
    from rlexp.rundir import in_use

    name = run_name(algo, kind, env_id, seed)
    run_dir, result_file = args.out / name, args.results / f"{name}.json"
    with _compose_lock:
        stored = json.loads(result_file.read_text()) if result_file.is_file() else None
        if stored is not None:
            check_reusable(result_file, stored.get("settings"), settings)
    if stored is not None:
        return with_act6(stored, env_id, run_dir, result_file)
    with _compose_lock:
        twin = same_run(args.results, algo, env_id, seed, settings)
        if twin is not None:  # another kind trained these settings: the same run
            return as_kind(json.loads(twin.read_text()), kind, variant, twin.stem, name)
        if args.stored:
            say(f"  {name}: no stored result, left out (--stored)")
            return None
        unfinished = (run_dir / "config.yaml").is_file()
        if unfinished:  # continue it if it trains what it should
            check_reusable(run_dir, recorded_settings(run_dir), settings)
        origin, origin_kind, origin_variant = name, kind, variant
        if not unfinished and (other := unfinished_twin(args.out, algo, env_id, seed, settings)) is not None:
            # another kind's unfinished run of these settings: continue it, stored under its own name
            origin, origin_kind, origin_variant = other.name, kind_in(other.name, algo, env_id, seed), []
            run_dir, result_file, unfinished = other, args.results / f"{other.name}.json", True
        if unfinished and in_use(run_dir):
            shared = f" ({name} would continue it)" if origin != name else ""
            raise SystemExit(
                f"bench_learning: {origin} is training in another command now{shared}; "
                "run this again when that one ends"
            )
    if _CHILDREN.stopping:  # a stop signal came: start nothing (the queued runs stay as they are)
        raise SystemExit("bench_learning: stopped; run the same command again to continue")
    if unfinished:
        say(f"  {name}: continuing" + (f" the run of {origin} (the same settings)" if origin != name else ""))
        cmd = [sys.executable, "-m", "rlexp", f"resume={run_dir}", "logger.console=line"]
    else:
        say(f"  {name}: training ({' '.join(overrides)})")
        cmd = [sys.executable, "-m", "rlexp", *overrides, "logger.console=line", f"hydra.run.dir={run_dir}"]
    train(origin, cmd, args.out)
    result = {
        "algo": algo,
        "kind": origin_kind,
        "env": env_id,
        "seed": seed,
        "overrides": origin_variant,
        **run_figures(run_dir),
        **({"act6": child_figure("--evaluate-minatar", run_dir)} if env_id.startswith("MinAtar/") else {}),
        "settings": settings,
    }
    store(result_file, result)
    return as_kind(result, kind, variant, origin, name)


def train(name: str, cmd: list[str], out: Path, stopped_status: int | None = None) -> None:
    """Run the training process ``cmd`` of run ``name`` to its end, its output appended to
    ``out``/NAME.log (a file, not a pipe: a run outlives this process by the epoch it finishes); stop the
    benchmark in one line when a stop signal (or exit status ``stopped_status``) ended it or it failed."""
    log = out / f"{name}.log"
    with open(log, "a") as file:
        returncode = _CHILDREN.run(cmd, file)
    if returncode != 0:
        last = (log.read_text().strip().splitlines() or ["?"])[-1]
        if _CHILDREN.stopping or returncode == stopped_status:
            raise SystemExit(f"bench_learning: stopped; run the same command again to continue ({last})")
        raise SystemExit(f"bench_learning: {name} failed: {last} (all of its output: {log})")


def store(result_file: Path, result: dict[str, Any]) -> None:
    """Write a finished run's figures (atomically)."""
    from rlexp.fileio import atomic_write_text

    result_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(result_file, json.dumps(result, indent=1) + "\n")


def child_figure(flag: str, run_dir: Path) -> float:
    """A figure of ``run_dir`` computed in a child process (``--evaluate`` or ``--evaluate-minatar``):
    the policy plays with one thread and this process's imports stay light."""
    out = subprocess.run(
        [sys.executable, __file__, flag, str(run_dir)],
        cwd=ROOT,
        env=child_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def run_figures(run_dir: Path) -> dict[str, Any]:
    """The figures of a finished run: test, det10, last100, SPS, steps, its training time and its
    learning curve (:func:`curve`)."""
    import pandas as pd

    progress = pd.read_table(run_dir / "progress.txt")
    episodes = pd.read_csv(run_dir / "episodes.csv")
    tests = progress["AverageTestEpRet"].dropna() if "AverageTestEpRet" in progress else pd.Series([])
    seconds = float(progress["Time"].iloc[-1])
    return {
        "test": float(tests.iloc[-TEST_EVALUATIONS:].mean()) if len(tests) else None,
        "det10": child_figure("--evaluate", run_dir),
        "last100": float(episodes["EpRet"].iloc[-100:].mean()),
        "sps": float(progress["TotalEnvInteracts"].iloc[-1] / seconds),
        "steps": int(progress["TotalEnvInteracts"].iloc[-1]),
        "train_s": seconds,
        "curve": curve(progress),
    }


def curve(progress: Any) -> dict[str, list[float | None]]:
    """A run's learning curve from its progress table, one entry per epoch: env steps, training seconds
    so far (``Time``: a resumed run's count goes on), the mean test return and the mean training episode
    return (None where an epoch had none). Stored with the figures, so that plots of return against
    steps or wall-clock time (benchmarks/plot_curves.py) need only the result files."""

    def column(name: str) -> list[float | None]:
        if name not in progress:
            return [None] * len(progress)
        return [None if v != v else round(float(v), 4) for v in progress[name]]  # NaN -> None

    return {
        "steps": [int(v) for v in progress["TotalEnvInteracts"]],
        "seconds": column("Time"),
        "test": column("AverageTestEpRet"),
        "train": column("AverageEpRet"),
    }


def training_settings(overrides: list[str]) -> dict[str, Any]:
    """What a run with ``overrides`` trains with, as rlexp composes it today: the algo, env and network
    sections and the seed of its config (the keys that decide its returns)."""
    from omegaconf import OmegaConf

    import rlexp
    from rlexp.config import load_config, to_container

    composed = OmegaConf.to_container(rlexp.compose(overrides))
    composed.pop("hydra")
    config = to_container(load_config(composed))
    return {key: config[key] for key in ("algo", "env", "network", "seed")}


def recorded_settings(run_dir: Path) -> dict[str, Any]:
    """:func:`training_settings` of a run that exists, from its config.yaml."""
    from rlexp.config import load_run_config, to_container

    config = to_container(load_run_config(run_dir))
    return {key: config[key] for key in ("algo", "env", "network", "seed")}


def upgraded(stored: dict[str, Any]) -> dict[str, Any]:
    """Recorded settings with the keys rlexp gained since they were recorded at the values such a run
    resumes with (:func:`rlexp.config.upgrade_old_keys`)."""
    from omegaconf import OmegaConf

    from rlexp.config import upgrade_old_keys

    raw = OmegaConf.create({k: v for k, v in stored.items() if k in ("algo", "env", "network")})
    upgrade_old_keys(raw)
    return {**stored, **{k: v for k, v in OmegaConf.to_container(raw).items() if k in stored}}


def as_kind(result: dict[str, Any], kind: str, variant: list[str], origin: str, name: str) -> dict[str, Any]:
    """The figures of the run ``origin`` reported as run ``name`` of ``kind`` (the same settings)."""
    shared = {k: v for k, v in result.items() if k != "same_run_as"} | {"kind": kind, "overrides": variant}
    return shared if origin == name else shared | {"same_run_as": origin}


def same_run(results: Path, algo: str, env_id: str, seed: int, settings: dict[str, Any]) -> Path | None:
    """A stored result of another kind of ``algo``, env and seed that trained exactly ``settings``."""
    for path in sorted(results.glob(f"{run_name(algo, '*', env_id, seed)}.json")):
        stored = json.loads(path.read_text())
        if (
            stored.get("same_run_as") is None
            and stored.get("settings")
            and upgraded(stored["settings"]) == settings
        ):
            return path
    return None


def kind_in(name: str, algo: str, env_id: str, seed: int) -> str:
    """The kind of run ``name`` (:func:`run_name` read backwards)."""
    prefix, suffix = run_name(algo, "*", env_id, seed).split("*")
    return name[len(prefix) : -len(suffix)]


def unfinished_twin(out: Path, algo: str, env_id: str, seed: int, settings: dict[str, Any]) -> Path | None:
    """The run directory of another kind of ``algo``, env and seed (one of the named kinds, not a
    ``--variant``) that has not finished and trains exactly ``settings``: stopped part-way in an earlier
    command (e.g. ``--kinds defaults`` before ``--kinds tuned``), so it is continued rather than trained
    a second time."""
    for run_dir in sorted(out.glob(run_name(algo, "*", env_id, seed))):
        if (
            kind_in(run_dir.name, algo, env_id, seed) in KINDS
            and (run_dir / "config.yaml").is_file()
            and upgraded(recorded_settings(run_dir)) == settings
        ):
            return run_dir
    return None


def check_reusable(path: Path, stored: dict[str, Any] | None, settings: dict[str, Any]) -> None:
    """Stop (one line) when the run of ``path`` (a result file or a run directory) was trained with other
    settings than the preset gives now (a changed preset would otherwise be reported with stale figures).
    Keys added to rlexp after the run was trained take the values such a run resumes with (the old
    behaviour), as rlexp's resume does."""
    if stored is None:
        raise SystemExit(f"bench_learning: {path} records no settings; move it away to train again")
    stored = upgraded(stored)
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
            f"move it (and its run directory) away to train again, or use another --results"
        )


def evaluate(run_dir: str) -> float:
    """Mean return of EVAL_EPISODES deterministic episodes of the run's final policy (reset seeds
    10,000 + i, apart from training's), normalisation frozen (the checkpoint's statistics)."""
    import rlexp

    policy = rlexp.load(run_dir).policy(deterministic=True)
    return play(policy, EVAL_EPISODES, policy)


def play(policy: Any, episodes: int, act: Any) -> float:
    """Mean return of ``episodes`` episodes of ``policy.env`` (reset seeds 10,000 + i, apart from
    training's), each step's action ``act(obs)``."""
    from rlexp.envs import CONTINUES

    returns = []
    for i in range(episodes):
        obs, _ = policy.env.reset(seed=10_000 + i)
        policy.reset()  # a recurrent policy starts each episode with zero memory, as in training
        done, total = False, 0.0
        while not done:
            obs, r, terminated, truncated, info = policy.env.step(act(obs))
            total += float(r)
            done = terminated or truncated
            if terminated and info.get(CONTINUES):  # a lost life (Atari): the game goes on, ...
                obs, done = policy.env.reset()[0], False
                policy.reset()  # ... as a new episode for the policy (training resets its memory there)
        returns.append(total)
    return statistics.fmean(returns)


def minatar_v1_actions(env: Any) -> list[int]:
    """For each of MinAtar's 6 actions, the action of ``env`` (a MinAtar gymnasium env, -v1 ids: the
    game's minimal action set) that does the same in its game: itself where the minimal set has it, else
    the no-op (the actions a game leaves out have no effect in it, e.g. up, down and fire in Breakout)."""
    action_set = [int(a) for a in env.unwrapped.action_set]
    return [action_set.index(a) if a in action_set else action_set.index(0) for a in range(MINATAR_ACTIONS)]


def minatar_acting(run_dir: str, epsilon: float = MINATAR_EPSILON, episodes: int = ACT6_EPISODES) -> float:
    """act6: the mean return of ``episodes`` episodes of a MinAtar run's final policy acting as MinAtar's
    own DQN acts in the curves it published: greedy, except that with probability ``epsilon`` an action
    drawn uniformly from the game's full 6 actions (its examples/dqn.py plays the -v0 ids). rlexp's
    benchmark trains on the -v1 ids, whose random actions come from the minimal set (Breakout: no-op,
    left, right), so there a random action moves the paddle twice as often as in MinAtar's runs, which
    can cost a policy much (Breakout seed 1's final policy: 8.0 with the 3, 10.1 with the 6) or nothing
    (seed 2's: 8.8 and 8.5). Reset seeds 10,000 + i (apart from training's), the random actions from a
    generator seeded 10,000."""
    import numpy as np

    import rlexp

    policy = rlexp.load(run_dir).policy(deterministic=True)
    as_v1 = minatar_v1_actions(policy.env)
    rng = np.random.default_rng(10_000)

    def act(obs: Any) -> Any:
        return as_v1[int(rng.integers(MINATAR_ACTIONS))] if rng.random() < epsilon else policy(obs)

    return play(policy, episodes, act)


def with_act6(result: dict[str, Any], env_id: str, run_dir: Path, result_file: Path) -> dict[str, Any]:
    """A stored MinAtar result with its act6 figure: a result stored before act6 existed gets it from
    its run's final checkpoint, when that is still there (the run's newest checkpoint is the one after
    the result's steps), and is stored again with it (the other figures as they were)."""
    from rlexp.checkpoint import latest_checkpoint

    if not env_id.startswith("MinAtar/") or "act6" in result:
        return result
    latest = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    per_epoch = result.get("settings", {}).get("algo", {}).get("steps_per_epoch")
    if latest is None or per_epoch is None or latest[0] * per_epoch != result.get("steps"):
        return result
    result = {**result, "act6": child_figure("--evaluate-minatar", run_dir)}
    store(result_file, result)
    say(f"  {result_file.stem}: act6 {result['act6']:.1f} added to {result_file}")
    return result


SB3_SAVE_EVERY = 100_000  # env steps between an SB3 run's checkpoints (Atari's replay: 5.3 GB each)
SB3_STOPPED = 3  # the exit status of an SB3 run that a stop signal ended after saving its checkpoint


def run_sb3(algo: str, env_id: str, seed: int, steps: int, args: argparse.Namespace) -> dict[str, Any] | None:
    """Train, continue or reuse SB3's ``algo`` with the zoo preset of ``env_id``; return its figures (None
    with ``--stored`` when it has none).
    The run checkpoints into ``--out``/sb3-ALGO-zoo_ENV_sSEED every SB3_SAVE_EVERY steps and when a stop
    signal comes, and the same command continues it (SB3's own save and load: not bit for bit, the env
    starts a new episode there)."""
    name = run_name(f"sb3-{algo}", "zoo", env_id, seed)
    run_dir, result_file = args.out / name, args.results / f"{name}.json"
    if result_file.is_file():
        return json.loads(result_file.read_text())
    if args.stored:
        say(f"  {name}: no stored result, left out (--stored)")
        return None
    if _CHILDREN.stopping:
        raise SystemExit("bench_learning: stopped; run the same command again to continue")
    say(f"  {name}: {'continuing' if sb3_checkpoint(run_dir) else 'training'}")
    cmd = [sys.executable, __file__, "--sb3-child", algo, env_id, str(seed), str(steps), str(run_dir)]
    train(name, cmd, args.out, stopped_status=SB3_STOPPED)
    result = json.loads((run_dir / "result.json").read_text())
    store(result_file, result)
    return result


def sb3_checkpoint(run_dir: Path) -> Path | None:
    """The last complete checkpoint of an SB3 run (``checkpoint``, or ``checkpoint.old`` when a save
    was cut between its two renames), or None."""
    for name in ("checkpoint", "checkpoint.old"):
        if (run_dir / name / "state.json").is_file():
            return run_dir / name
    return None


def sb3_child(algo: str, env_id: str, seed: int, steps: int, run_dir: Path) -> None:
    """One SB3 run (in this process) with the zoo's setup: PPO with one env and VecNormalize (the
    algorithm's gamma); DQN with one env, for Atari SB3's AtariWrapper and a 4-frame stack; sb3-contrib's
    QRDQN with one env. It continues
    from ``run_dir``'s checkpoint when there is one, saves one every SB3_SAVE_EVERY steps and on SIGTERM,
    SIGINT or SIGHUP (then exits with SB3_STOPPED), and writes its figures to ``run_dir``/result.json."""
    stop = threading.Event()  # first of all: a stop signal during the set-up stops at the first step
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda *_: stop.set())
    ensure_sb3(contrib=env_id in ZOO_PPO_LSTM or algo == "qrdqn")
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    from rlexp.fileio import atomic_write_text

    torch.set_num_threads(1)
    if algo == "dqn":
        hp = dict(ZOO_DQN[env_id])
        if env_id.startswith("ALE/"):
            import ale_py

            gym.register_envs(ale_py)
            game = env_id.split("/")[1].split("-")[0]
            venv = VecFrameStack(make_atari_env(f"{game}NoFrameskip-v4", n_envs=1, seed=seed), n_stack=4)
            model: Any = DQN("CnnPolicy", venv, seed=seed, device="cpu", verbose=0, **hp)
        else:
            venv = make_vec_env(env_id, n_envs=1, seed=seed)
            model = DQN("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **hp)
    elif algo == "qrdqn":  # sb3-contrib's QRDQN with the zoo's qrdqn.yml preset, one env
        from sb3_contrib import QRDQN

        hp = dict(ZOO_QRDQN[env_id])
        if isinstance(hp["learning_rate"], str):  # the zoo's lin_X: linearly from X to 0
            start = float(hp["learning_rate"][4:])
            hp["learning_rate"] = lambda progress, start=start: progress * start
        venv = make_vec_env(env_id, n_envs=1, seed=seed)
        model = QRDQN("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **hp)
    elif env_id in ZOO_PPO_LSTM:  # sb3-contrib's RecurrentPPO on the masked env, VecNormalize on both
        from sb3_contrib import RecurrentPPO

        from rlexp.wrappers import MaskObservation

        hp = dict(ZOO_PPO_LSTM[env_id])
        kwargs = dict(hp.pop("policy_kwargs"))
        kwargs["activation_fn"] = {"relu": torch.nn.ReLU}[kwargs.pop("activation")]
        for key in ("learning_rate", "clip_range"):  # the zoo's lin_X: linearly from X to 0
            if isinstance(hp[key], str):
                start = float(hp[key][4:])
                hp[key] = lambda progress, start=start: progress * start
        gym_id, hidden = NOVEL_ENVS[env_id]
        venv = VecNormalize(
            make_vec_env(gym_id, n_envs=hp.pop("n_envs"), seed=seed, wrapper_class=MaskObservation,
                         wrapper_kwargs={"indices": hidden}),
            gamma=hp["gamma"],
        )  # fmt: skip
        model = RecurrentPPO(
            "MlpLstmPolicy", venv, policy_kwargs=kwargs, seed=seed, device="cpu", verbose=0, **hp
        )
    else:
        hp = dict(ZOO_PPO[env_id])
        kwargs = dict(hp.pop("policy_kwargs"))
        if "activation" in kwargs:
            kwargs["activation_fn"] = {"relu": torch.nn.ReLU}[kwargs.pop("activation")]
            kwargs["net_arch"] = dict(pi=kwargs["net_arch"], vf=kwargs["net_arch"])
        venv = VecNormalize(make_vec_env(env_id, n_envs=1, seed=seed), gamma=hp["gamma"])
        model = PPO("MlpPolicy", venv, policy_kwargs=kwargs, seed=seed, device="cpu", verbose=0, **hp)

    done_wall = 0.0
    found = sb3_checkpoint(run_dir)
    if found is not None:  # continue: the model (weights, optimizer, counters), replay, normalisation
        state = json.loads((found / "state.json").read_text())
        if isinstance(venv, VecNormalize):
            venv = VecNormalize.load(str(found / "vecnormalize.pkl"), venv.venv)
        model = type(model).load(found / "model.zip", env=venv, device="cpu")
        if hasattr(model, "replay_buffer"):
            model.load_replay_buffer(found / "replay.pkl")
        model._last_obs = None  # the env is a new one: learn() resets it (a new episode)
        # learn() keeps the episodes it is given when it continues (the last 100 training episodes)
        model.ep_info_buffer = deque(state["episodes"], maxlen=model._stats_window_size)
        done_wall = state["wall"]
        print(f"continuing after {model.num_timesteps} of {steps} steps", flush=True)
    else:
        print(f"training {steps} steps", flush=True)
    start = time.time()

    def save() -> None:
        """The checkpoint, atomically: written beside, then renamed over the last one."""
        tmp, ckpt, old = run_dir / "checkpoint.tmp", run_dir / "checkpoint", run_dir / "checkpoint.old"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        model.save(tmp / "model.zip")
        if hasattr(model, "replay_buffer"):
            model.save_replay_buffer(tmp / "replay.pkl")
        if isinstance(venv, VecNormalize):
            venv.save(str(tmp / "vecnormalize.pkl"))
        state = {"wall": done_wall + time.time() - start, "episodes": list(model.ep_info_buffer)}
        atomic_write_text(tmp / "state.json", json.dumps(state, default=float) + "\n")
        if ckpt.exists():
            shutil.rmtree(old, ignore_errors=True)
            ckpt.rename(old)
        tmp.rename(ckpt)
        shutil.rmtree(old, ignore_errors=True)

    class Checkpoints(BaseCallback):
        """Stop at a stop signal; save every SB3_SAVE_EVERY steps (a PPO run that continues collects its
        rollout afresh: the steps of a rollout cut by a stop are counted but not learned from)."""

        saved = model.num_timesteps

        def _on_step(self) -> bool:
            if self.num_timesteps - self.saved >= SB3_SAVE_EVERY and self.num_timesteps < steps:
                save()
                self.saved = self.num_timesteps
            return not stop.is_set()

    model.learn(steps - model.num_timesteps, reset_num_timesteps=found is None, callback=Checkpoints())
    if stop.is_set():
        save()
        print(f"stopped after {model.num_timesteps} of {steps} steps, checkpoint saved", flush=True)
        raise SystemExit(SB3_STOPPED)
    wall = done_wall + time.time() - start
    last100 = statistics.fmean(float(e["r"]) for e in model.ep_info_buffer)
    if isinstance(venv, VecNormalize):
        venv.training, venv.norm_reward = False, False
    returns = []
    for i in range(EVAL_EPISODES):
        venv.seed(10_000 + i)
        obs, total, state = venv.reset(), None, None
        starts = np.ones(venv.num_envs, dtype=bool)
        while total is None:  # until the Monitor reports a whole episode (Atari: a game, not a life)
            action, state = model.predict(obs, state=state, episode_start=starts, deterministic=True)
            obs, _, dones, infos = venv.step(action)
            starts = dones
            if "episode" in infos[0]:
                total = float(infos[0]["episode"]["r"])
        returns.append(total)
    result = {
        "algo": algo,
        "kind": "sb3",
        "env": env_id,
        "seed": seed,
        "test": None,
        "last100": last100,
        "det10": float(np.mean(returns)),
        "sps": model.num_timesteps / wall,
        "steps": int(model.num_timesteps),
        "train_s": wall,
    }
    store(run_dir / "result.json", result)
    for name in ("checkpoint", "checkpoint.old"):  # finished: its replay (Atari: 5.3 GB) is not needed
        shutil.rmtree(run_dir / name, ignore_errors=True)


def hns(env_id: str, value: float) -> float | None:
    """The human-normalised score of an Atari return, (return - random) / (human - random); None
    elsewhere."""
    if (scores := atari_random_human().get(env_id)) is None:
        return None
    random, human = scores
    return (value - random) / (human - random)


def shown(env_id: str, value: float, seeds: str = "") -> str:
    """A return in a summary line, on Atari with its human-normalised score; ``seeds`` a note on the
    number of seeds behind it."""
    notes = ([] if (h := hns(env_id, value)) is None else [f"HNS {h:.2f}"]) + ([seeds] if seeds else [])
    return f"{value:,.1f}" + (f" ({', '.join(notes)})" if notes else "")


def plural(n: int, noun: str) -> str:
    """``n noun`` or ``n nouns``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def ratio(ours: float, ref: float, env_id: str = "") -> str:
    """How ours compares with a reference return, > 1 when ours is higher: ours / ref for positive
    returns, ref / ours when both are negative (Pendulum: -180 against -218 is 1.21x); else - (-5
    against 20.6 is no ratio). On Atari the ratio is of the human-normalised scores (Pong's -5 against
    20.6 is 0.44 against 1.17: 0.38x)."""
    if env_id in atari_random_human():
        ours, ref = hns(env_id, ours), hns(env_id, ref)
    if ref > 0 and ours >= 0:
        return f"{ours / ref:.2f}x"
    if ref < 0 and ours < 0:
        return f"{ref / ours:.2f}x"
    return "-"


def references(algo: str, steps: int | None) -> tuple[dict[str, dict[str, float]], tuple]:
    """The published numbers of ``algo`` and its table's reference columns at the budget ``steps``: at
    300k steps the early-training figures (common.PUBLISHED_300K), else those at about 1M."""
    if steps == 300_000:
        return PUBLISHED_300K.get(algo, {}), REFERENCES.get(f"{algo}-300k", ())
    if algo in ("c51", "rainbow"):  # DQN's references (MinAtar's curves, SB3-zoo, CleanRL)
        algo = "dqn"
    return PUBLISHED.get(algo, {}), REFERENCES.get(algo, REFERENCES["default"])


def report_against_sac(
    algos: list[str], kinds_of: dict[str, list[str]], envs: list[str], results: dict
) -> None:
    """One line per algorithm of the SAC family (TQC, CrossQ), kind and env against rlexp's own SAC
    (``--algo sac`` in the same command, its tuned kind), on the median det10 of the same seeds."""
    if "sac" not in algos:
        return
    for algo in [a for a in algos if a in ("tqc", "crossq")]:
        for kind in kinds_of[algo]:
            for env_id in envs:
                ours = [r["det10"] for r in results[algo].get((kind, env_id), [])]
                sac = [r["det10"] for r in results["sac"].get(("tuned", env_id), [])]
                if ours and sac:
                    a, b = statistics.median(ours), statistics.median(sac)
                    print(
                        f"{algo} {kind:10s} {env_id:15s} rlexp det10 {shown(env_id, a)}  "
                        f"rlexp sac det10 {shown(env_id, b)}  {ratio(a, b, env_id)}"
                    )


RLIABLE_REPS = 5000  # stratified-bootstrap resamples of each interval (rliable's default count)


def rliable_lines(label: str, env_id: str, x_name: str, x: list[dict], y_name: str, y: list[dict]) -> None:
    """For det10 and last100: the IQM of the runs ``x`` and ``y`` (their seeds) and P(x > y), the
    probability that a seed of ``x`` beats a seed of ``y`` (rliable's probability of improvement), each with
    a 95% stratified-bootstrap interval (RLIABLE_REPS resamples, numpy's global generator seeded 0 and put
    back); nothing when rliable is not installed or a side has fewer than 2 seeds."""
    try:
        import numpy as np
        from rliable import library as rly
        from rliable import metrics
    except ImportError:
        return
    for figure in ("det10", "last100"):
        a = np.array([[r[figure]] for r in x if r.get(figure) is not None])
        b = np.array([[r[figure]] for r in y if r.get(figure) is not None])
        if len(a) < 2 or len(b) < 2:
            continue
        saved = np.random.get_state()
        np.random.seed(0)
        try:
            iqm, iqm_ci = rly.get_interval_estimates(
                {"x": a, "y": b}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=RLIABLE_REPS
            )
            p, p_ci = rly.get_interval_estimates(
                {"p": (a, b)}, metrics.probability_of_improvement, reps=RLIABLE_REPS
            )
        finally:
            np.random.set_state(saved)

        def shown_ci(point: Any, ci: Any, fmt: str) -> str:
            low, high = np.ravel(ci)[:2]
            return f"{float(np.ravel(point)[0]):{fmt}} [{float(low):{fmt}}, {float(high):{fmt}}]"

        print(
            f"{label} {env_id:15s} {figure}: IQM {x_name} {shown_ci(iqm['x'], iqm_ci['x'], '.1f')}  "
            f"IQM {y_name} {shown_ci(iqm['y'], iqm_ci['y'], '.1f')}  "
            f"P({x_name} > {y_name}) {shown_ci(p['p'], p_ci['p'], '.2f')}  ({len(a)} and {len(b)} seeds)"
        )


def report_against_dqn(
    algos: list[str], kinds_of: dict[str, list[str]], envs: list[str], results: dict, args: argparse.Namespace
) -> None:
    """One line per C51 or Rainbow kind and env against rlexp's DQN (``--algo dqn``, kind tuned) on the same
    ids: the median last100 and det10 of its stored results of the same seeds (read from ``--results``,
    never trained here), then rliable's IQMs and P(X > DQN)."""
    for algo in [a for a in algos if a in ("c51", "rainbow")]:
        for kind in kinds_of[algo]:
            for env_id in envs:
                ours = results[algo].get((kind, env_id), [])
                dqn = [
                    json.loads(path.read_text())
                    for seed in args.seeds
                    if (path := args.results / f"{run_name('dqn', 'tuned', env_id, seed)}.json").is_file()
                ]
                if not ours or not dqn:
                    continue
                for figure in ("last100", "det10"):
                    a = statistics.median(r[figure] for r in ours)
                    b = statistics.median(r[figure] for r in dqn)
                    print(
                        f"{algo} {kind:10s} {env_id:15s} rlexp {figure} {shown(env_id, a, plural(len(ours), 'seed'))}  "
                        f"rlexp dqn {figure} {shown(env_id, b, plural(len(dqn), 'seed'))}  {ratio(a, b, env_id)}"
                    )
                rliable_lines(f"{algo} {kind:10s}", env_id, algo, ours, "dqn", dqn)


def report(algo: str, kinds: list[str], envs: list[str], results: dict, args: argparse.Namespace) -> None:
    """The table (median (min-max) over seeds) and one summary line per kind and env against the
    published numbers; with SB3's runs (kind ``sb3``) one more per rlexp kind and env against them, on
    det10 (the figure both have)."""
    published, refs = references(algo, args.steps)
    budget = f"{args.steps:,} steps" if args.steps else "each preset's budget"
    print(f"\n{algo}, {budget}, seeds {' '.join(map(str, args.seeds))}; median (min-max) over seeds")
    print(
        f"| env | kind | test (last 10 evals) | det10 | last100 | SPS | {' | '.join(h for _, h, _ in refs)} |"
    )
    print("|---|---|---:|---:|---:|---:|" + "---:|" * len(refs))
    for env_id in envs:
        ref = [published.get(key, {}).get(env_id) for key, _, _ in refs]
        runs_of = {kind: results.get((kind, env_id), []) for kind in kinds}
        # returns with a decimal where they are small (MinAtar's 8.9, Pong's -20.5), whole numbers else
        returns = [v for v in ref if v is not None] + [
            r[k]
            for runs in runs_of.values()
            for r in runs
            for k in ("test", "det10", "last100")
            if r.get(k) is not None
        ]
        fmt = ",.1f" if returns and max(abs(v) for v in returns) < 100 else ",.0f"
        cells = " | ".join("-" if v is None else f"{v:{fmt}}" for v in ref)
        for kind, runs in runs_of.items():
            tests = [r["test"] for r in runs if r.get("test") is not None]
            figures = [spread(tests, fmt)] + [spread([r[k] for r in runs], fmt) for k in ("det10", "last100")]
            print(
                f"| {env_id} | {kind} | {' | '.join(figures)} | {spread([r['sps'] for r in runs])} | {cells} |"
            )
    print()
    for kind in kinds:
        for env_id in envs:
            runs = results.get((kind, env_id), [])
            who = "sb3" if kind == "sb3" else "rlexp"  # the sb3 kind's runs are SB3's, not rlexp's
            numbered = [(k, h, f) for k, h, f in refs if published.get(k, {}).get(env_id)]
            # the first reference that has a number for this env (and those with lines of their own),
            # each against the figure its protocol matches, then further figures against the same number
            for key, name, figure in numbered[:1] + [e for e in numbered[1:] if e[0] in OWN_SUMMARY]:
                ref = published[key][env_id]
                if not any(r.get(figure) is not None for r in runs):
                    continue  # (no run of this kind and env)
                for figure_of in (figure, *ALSO_AGAINST.get(key, ())):
                    values = [r[figure_of] for r in runs if r.get(figure_of) is not None]
                    if not values:
                        continue
                    of = f"{len(values)} of {len(runs)} seeds" if len(values) < len(runs) else ""
                    med = statistics.median(values)
                    print(
                        f"{algo} {kind:10s} {env_id:15s} {who} {figure_of} {shown(env_id, med, of)}  "
                        f"{name} {shown(env_id, ref)}  {ratio(med, ref, env_id)}"
                    )
    for kind in [k for k in kinds if k != "sb3"]:  # against SB3 at the same envs, budget and protocol
        for env_id in envs:
            ours = [r["det10"] for r in results.get((kind, env_id), [])]
            theirs = [r["det10"] for r in results.get(("sb3", env_id), [])]
            if not ours or not theirs:
                continue
            seeds = (
                ("", "")
                if len(ours) == len(theirs)
                else tuple(plural(len(v), "seed") for v in (ours, theirs))
            )
            a, b = statistics.median(ours), statistics.median(theirs)
            print(
                f"{algo} {kind:10s} {env_id:15s} rlexp det10 {shown(env_id, a, seeds[0])}  "
                f"sb3 det10 {shown(env_id, b, seeds[1])}  {ratio(a, b, env_id)}"
            )
            peer = "sb3-contrib" if algo == "qrdqn" else "sb3"
            rliable_lines(
                f"{algo} {kind:10s}", env_id, "rlexp", results[(kind, env_id)], peer, results[("sb3", env_id)]
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", nargs="+", default=["ppo"], choices=ALGOS, help="one or several")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        help="default: see the docstring",
    )
    parser.add_argument(
        "--envs", nargs="+", help="env presets (default: the MuJoCo three; DQN: CartPole-v1 LunarLander-v3)"
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--steps", type=int, help="env steps per run (default 1,000,000; DQN: each tuned preset's budget)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs trained at a time (one thread each)")
    parser.add_argument("--defaults", action="store_true", help="PPO: also train Spinning Up's defaults")
    parser.add_argument(
        "--sb3", action="store_true", help="PPO, DQN: also train SB3 with the zoo presets (slow)"
    )
    parser.add_argument(
        "--variant",
        nargs="+",
        metavar=("LABEL", "OVERRIDE"),
        help="also train the tuned preset with these overrides (a tuning attempt), e.g. "
        "--variant std1 algo.log_std_init=0",
    )
    parser.add_argument("--only-variant", action="store_true", help="train the --variant runs only")
    parser.add_argument("--only-sb3", action="store_true", help="train the --sb3 runs only")
    parser.add_argument(
        "--stored",
        action="store_true",
        help="train nothing: report the stored results (runs without one left out)",
    )
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of every run")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "outputs" / "bench_learning", help="run directories"
    )
    parser.add_argument(
        "--results", type=Path, default=ROOT / "benchmarks" / "results" / "learning", help="result files"
    )
    parser.add_argument("--evaluate", help=argparse.SUPPRESS)
    parser.add_argument("--evaluate-minatar", help=argparse.SUPPRESS)
    parser.add_argument("--sb3-child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.evaluate:
        print(evaluate(args.evaluate))
        return
    if args.evaluate_minatar:
        print(minatar_acting(args.evaluate_minatar))
        return
    if args.sb3_child:
        algo, env_id, seed, steps, run_dir = args.sb3_child
        sb3_child(algo, env_id, int(seed), int(steps), Path(run_dir))
        return
    if args.sb3 and (len(args.algo) != 1 or args.algo[0] not in SB3_ALGOS):
        parser.error(
            "--sb3 trains SB3's PPO or DQN or sb3-contrib's QR-DQN zoo presets: use it with --algo ppo, dqn or "
            "qrdqn alone"
        )
    if args.only_sb3 and not args.sb3:
        parser.error("--only-sb3 trains the --sb3 runs only: give --sb3 too")
    if args.envs is None:
        early = set(args.algo) & {"tqc", "crossq"}  # the SAC family's early-training comparison
        args.envs = (
            ["CartPole-v1", "LunarLander-v3"]
            if set(args.algo) <= set(DQN_FAMILY)
            else list(EARLY_ENVS if early else MUJOCO_ENVS)
        )
        if early and args.steps is None:
            args.steps = 300_000
    if args.steps is None and all(env in MUJOCO_ENVS for env in args.envs):
        args.steps = 1_000_000  # the MuJoCo benchmark's budget; elsewhere each tuned preset's
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: use 1 or more")
    variant = f"tuned-{args.variant[0]}" if args.variant else None
    kinds_of: dict[str, list[str]] = {}
    for algo in args.algo:
        novel = any(env in NOVEL_ENVS for env in args.envs)  # partially observed: with and without memory
        zoo = f"conf/tuned_preset/{algo}/_zoo_mujoco.yaml"
        has_zoo = (ROOT / zoo).is_file()
        if algo == "dqn":
            default = ["tuned", "rainbow"]
        elif algo in DQN_FAMILY:
            default = ["tuned"]
        elif algo in ("tqc", "crossq") or (algo == "sac" and args.steps == 300_000):
            default = ["tuned"]  # the early-training comparison: the zoo's settings (rlexp's, SAC)
        elif algo in OFF_POLICY:
            default = ["tuned", "defaults", *(["zoo"] if has_zoo else [])]
        else:
            default = ["tuned", "feedforward"] if novel else ["tuned"]
        kinds = list(args.kinds or default)
        if "zoo" in kinds and not has_zoo:
            parser.error(f"--kinds zoo: {algo} has no SB3-zoo MuJoCo preset ({zoo}); sac and td3 have")
        if args.defaults and "defaults" not in kinds:
            kinds.append("defaults")
        varied = variant is not None and takes_variant(algo, args.variant[1:])
        if variant is not None and not varied:
            say(f"bench_learning: {algo} lacks a key that --variant sets: {algo} trains {', '.join(kinds)}")
        kinds_of[algo] = ([] if args.only_variant and varied else kinds) + ([variant] if varied else [])
        if args.only_sb3:
            kinds_of[algo] = []
    args.out.mkdir(parents=True, exist_ok=True)
    _CHILDREN.install()
    tasks = [
        (algo, kind, env_id, seed)
        for seed in args.seeds
        for algo in args.algo
        for env_id in args.envs
        for kind in kinds_of[algo]
    ]

    extra_of = {task: args.variant[1:] if task[1] == variant else [] for task in tasks}
    overrides_of = {task: rlexp_overrides(*task, args.steps, args.set, extra_of[task]) for task in tasks}
    settings_of = {task: training_settings(overrides_of[task]) for task in tasks}
    key_of = {task: json.dumps(settings_of[task], sort_keys=True) for task in tasks}
    first: dict[str, tuple[str, str, str, int]] = {}  # kinds that train the same settings share a run
    for task in tasks:
        first.setdefault(key_of[task], task)
    trained = list(first.values())

    def line(task: tuple[str, str, str, int], r: dict[str, Any]) -> None:
        algo, kind, env_id, seed = task
        say(
            f"  {algo}-{kind:10s} {env_id:15s} seed {seed}: test {r['test'] or float('nan'):8.1f}  "
            f"det10 {r['det10']:8.1f}  last100 {r['last100']:8.1f}  {r['sps']:6.0f} SPS"
            + (f"  (the run of {r['same_run_as']})" if r.get("same_run_as") else "")
        )

    def one(task: tuple[str, str, str, int]) -> dict[str, Any] | None:
        try:
            r = run_rlexp(*task, args, extra_of[task], overrides_of[task], settings_of[task])
        except BaseException:
            _CHILDREN.stopping = True  # start no other run
            raise
        if r is not None:
            line(task, r)
        return r

    results: dict[str, dict[tuple[str, str], list[dict[str, Any]]]] = {algo: {} for algo in args.algo}
    # the peer's budgets now, before hours of training: composed later, conf/ on disk may have gained a key
    # that this process's schema (imported at its start) does not know
    sb3_steps = (
        {env_id: args.steps or budget(args.algo[0], env_id) for env_id in args.envs} if args.sb3 else {}
    )
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        done = dict(zip(trained, pool.map(one, trained), strict=True))
    for task in tasks:
        twin = first[key_of[task]]
        r = done[twin]
        if r is None:  # (--stored: no result)
            continue
        if twin != task:  # the run of another kind with the same settings (trained as its origin)
            origin = r.get("same_run_as") or run_name(*twin)
            r = as_kind(r, task[1], extra_of[task], origin, run_name(*task))
            line(task, r)
        results[task[0]].setdefault((task[1], task[2]), []).append(r)
    if args.sb3:
        (algo,) = args.algo
        for env_id in args.envs:
            for seed in args.seeds:
                if (r := run_sb3(algo, env_id, seed, sb3_steps[env_id], args)) is not None:
                    results[algo].setdefault(("sb3", env_id), []).append(r)
        kinds_of[algo].append("sb3")
    for algo in args.algo:
        report(algo, kinds_of[algo], args.envs, results[algo], args)
    report_against_sac(args.algo, kinds_of, args.envs, results)
    report_against_dqn(args.algo, kinds_of, args.envs, results, args)


if __name__ == "__main__":
    main()
