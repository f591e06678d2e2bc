"""rlexp against Stable-Baselines3, side by side on this machine: env steps per second at matched settings.

Installs stable-baselines3==2.9.2 (and sb3-contrib for TQC and CrossQ) into this Python environment when
it is missing (torch is never touched: it is already installed), and SBX 0.28.0 (SB3 in JAX, sbx-rl, with
a CPU jax 0.10.2) into a venv of its own, ``.venv-sbx``, so that JAX never meets rlexp's TensorFlow. Every
measurement runs in a fresh subprocess with one torch / TF / XLA thread; rlexp, SB3 and SBX alternate
within each repetition so that all see the same machine load. SBX trains the same classes with the same
settings as SB3 (its activations flax's). Prints figures and ratios; asserts nothing.

    python benchmarks/bench_sb3.py [--algos td3 sac ppo tqc crossq] [--reps 3] [--no-backends] [--no-sbx]
                                   [--no-mpi] [--no-envpath] [--no-contention]

The off-policy rows (``COMPILED_ROWS``) time rlexp's torch eagerly (``rlexp-eag``) and with
``backend.compile=true`` (``rlexp-cmp``: each gradient step one ``torch.compile``d function) in the same
alternation, with the seconds its compilation took; that falls before the window (the first gradient
step is at ``LEARNING_STARTS``), so the line says it apart. The row's summary line (its plain name) is
torch's default, ``backend.compile=null``: the kind that a whole run of the row's settings would choose
(:func:`default_compiles`); the other kind's line says which it is.

After the SB3 table come rlexp's env path per env step beside the raw env's step (one env, 8 sync, 8
async; on- and off-policy: benchmarks/bench_envpath.py), whose summary lines join the SB3 ones.

The last table is rlexp's default run (``python -m rlexp``: PPO on CartPole-v1) on an idle machine
and beside one competing busy process, with the default ``backend.threads=1`` and with 2 threads
(what ``threads: null`` gave on a 2-core machine): SPS and the ratio to the idle figure.

How the settings are matched (HalfCheetah-v4, CPU, 1 thread, seed 0):

- TD3: actor and twin critics 256x256 ReLU on both sides (SB3 ``net_arch=[256, 256]``), minibatch ``--batch`` (default 100, Spinning Up's and rlexp's),
  gamma 0.99, polyak 0.995 = tau 0.005, policy delay 2, target noise 0.2 clipped at 0.5, Gaussian
  exploration noise 0.1 (SB3 ``NormalActionNoise``), replay 1e6, ``learning_starts`` = ``start_steps``
  = ``update_after`` = 1000, one gradient step per env step (rlexp ``update_every=1``, SB3
  ``train_freq=1, gradient_steps=1``).
- SAC: as TD3 with a fixed entropy coefficient 0.2 on both sides (Spinning Up's default; SB3
  ``ent_coef=0.2``) and learning rate 1e-3 on both sides.
- PPO: Spinning Up's full-batch style on both sides: 4000 steps per update, 80 full-batch policy
  steps and 80 value steps in rlexp; SB3 ``n_steps=4000, batch_size=4000, n_epochs=80`` (80 full-batch
  steps of its joint policy + value loss, the same number of forward/backward passes), 64x64 tanh, GAE
  0.99 / 0.97, clip 0.2, KL early stopping off on both sides (``target_kl`` huge / None) so that both
  always do all 80 steps; one env on both sides (SB3 ``n_envs=1``).

- TD3-zoo, SAC-zoo: SB3-zoo's MuJoCo settings on both sides (rlexp ``tuned=td3
  tuned_preset=td3/_zoo_mujoco``, the same for sac): batch 256, TD3 with a 400x300 network and learning
  rate 1e-3, SAC at 3e-4 with automatic entropy tuning (SB3 ``ent_coef="auto"``, rlexp
  ``autotune_alpha``), one gradient step per env step; learning starts at the same step as the rows
  above (not the zoo's 10,000), to reach the steady state sooner.
- TQC, CrossQ: sb3-contrib's defaults on both sides (rlexp's ``conf/algo/tqc.yaml`` and ``crossq.yaml``
  hold them): TQC with 2 critics of 25 quantiles, 2 dropped per critic, 256x256, lr 3e-4, batch 256, tau
  0.005, automatic entropy; CrossQ with critics 1024 wide (the policy 256x256), batch renormalisation,
  lr 1e-3, Adam beta1 0.5, policy delay 3, batch 256, automatic entropy; one gradient step per env step,
  learning from the same step as the rows above.
- QR-DQN (CartPole-v1): RL Baselines3 Zoo's qrdqn.yml CartPole preset on both sides (rlexp ``tuned=qrdqn``,
  sb3-contrib's QRDQN with the same values: 10 quantiles, 256x256, lr 2.3e-3, batch 64, 128 gradient steps
  every 256 env steps), learning from the same step as the rows above; SBX has no QR-DQN.
- Rainbow (MinAtar Breakout-v1): rlexp's ``tuned=rainbow`` (all six parts, Revisiting Rainbow's MinAtar
  settings) on both backends; no peer has Rainbow (SB3's and SBX's columns stay empty), so the row holds
  rlexp's torch and TF figures.
- PPO-zoo: SB3-zoo's tuned HalfCheetah preset on both sides (rlexp ``tuned=ppo`` with the zoo's constant
  learning rate; SB3 with VecNormalize and the zoo's hyperparameters): 512 steps per update, 8
  minibatches of 64, 20 passes, 256x256 ReLU.

Steady state: both libraries are timed the same way, over a window of env steps after learning has
started (off-policy: from ``warmup`` steps to ``warmup + window``; PPO: the updates from the second
one on), on the training loop alone (rlexp: no test episodes, no checkpoint inside the window).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    SB3_VERSION,
    SBX_ENV,
    SBX_VENV,
    SBX_VERSION,
    ZOO_PPO,
    ZOO_QRDQN,
    ensure_sb3,
    ensure_sbx,
)

ENV = "HalfCheetah-v4"
# The rows that run another env than ENV: DQN on CartPole-v1 (an MLP) and on Atari Pong (the Nature CNN)
ENVS = {
    "dqn": "CartPole-v1",
    "dqn-atari": "ALE/Pong-v5",
    "qrdqn": "CartPole-v1",
    "rainbow": "MinAtar/Breakout-v1",
}
# The peers that have a row's algorithm (all others: every peer): QR-DQN is sb3-contrib's; no peer has Rainbow
ROW_PEERS = {"qrdqn": ("sb3",), "rainbow": ()}
# rows also timed with torch's backend.compile (each gradient step one compiled call), as "rlexp-cmp"
COMPILED_ROWS = {"sac", "td3", "sac-zoo", "td3-zoo", "tqc", "crossq", "dqn", "dqn-atari", "qrdqn", "rainbow"}
DQN_REPLAY = 10_000  # dqn-atari's replay on both sides: small enough for SB3's two stacks per transition
LEARNING_STARTS = 1000
OFF_EPOCH = 500  # rlexp off-policy epoch length: the timing window is made of whole epochs
# Rows whose gradient steps are so slow that the window is shortened to one epoch (CrossQ's 1024-wide critics
# take ~0.1-0.4 s a step here): their (warmup, window) in env steps
SHORT_WINDOW = {"crossq": (1500, OFF_EPOCH)}
PPO_STEPS = 4000
ZOO_STEPS = 512  # ppo-zoo: SB3-zoo's HalfCheetah preset (n_steps 512) on both sides


# --- rlexp ------------------------------------------------------------------------------------------


def rlexp_overrides(algo: str, warmup: int, window: int, batch: int) -> list[str]:
    """The rlexp config matched to SB3's (see the module docstring)."""
    if (
        algo == "ppo-zoo"
    ):  # rlexp's tuned preset with the zoo's own learning rate = SB3-zoo's HalfCheetah preset
        epochs = f"algo.epochs={1 + max(2, window // ZOO_STEPS)}"
        return ["tuned=ppo", "algo.lr=2.0633e-05", "algo.anneal_lr=false", epochs, "algo.save_freq=1000"]
    if algo == "ppo":
        return [
            "algo=ppo",
            "network=mlp64x64_tanh",
            f"algo.steps_per_epoch={PPO_STEPS}",
            f"algo.epochs={1 + max(2, window // PPO_STEPS)}",
            "algo.train_pi_iters=80",
            "algo.train_v_iters=80",
            "algo.target_kl=1e9",
            "algo.save_freq=1000",
        ]
    epochs = (warmup + window) // OFF_EPOCH + 1  # + 1: the last epoch (final checkpoint) is not timed
    if algo == "dqn":  # the zoo's CartPole-v1 preset (tuned=dqn), learning from the window's start
        return [
            "algo=dqn", "tuned=dqn", f"algo.epochs={epochs}", f"algo.steps_per_epoch={OFF_EPOCH}",
            f"algo.start_steps={LEARNING_STARTS}", f"algo.update_after={LEARNING_STARTS}",
            "algo.num_test_episodes=0", f"algo.save_freq={epochs}",
        ]  # fmt: skip
    if algo == "dqn-atari":  # the zoo's Atari preset on Pong (env=atari: the same preprocessing as SB3's)
        return [
            "algo=dqn", "tuned=dqn", "env.id=ALE/Pong-v5", f"algo.epochs={epochs}",
            f"algo.steps_per_epoch={OFF_EPOCH}", f"algo.start_steps={LEARNING_STARTS}",
            f"algo.update_after={LEARNING_STARTS}", f"algo.replay_size={DQN_REPLAY}", "algo.num_test_episodes=0",
            f"algo.save_freq={epochs}",
        ]  # fmt: skip
    if algo in ("qrdqn", "rainbow"):  # qrdqn: the zoo's CartPole-v1 preset; rainbow: tuned=rainbow on MinAtar
        return [
            f"algo={algo}", f"tuned={algo}", *(["env.id=MinAtar/Breakout-v1"] if algo == "rainbow" else []),
            f"algo.epochs={epochs}", f"algo.steps_per_epoch={OFF_EPOCH}", f"algo.start_steps={LEARNING_STARTS}",
            f"algo.update_after={LEARNING_STARTS}", "algo.num_test_episodes=0", f"algo.save_freq={epochs}",
        ]  # fmt: skip
    if algo in ("sac-zoo", "td3-zoo"):  # the zoo's MuJoCo entry (tuned=sac there is Spinning Up's)
        base = algo.split("-")[0]
        return [
            f"algo={base}",
            f"tuned={base}",
            f"tuned_preset={base}/_zoo_mujoco",
            f"algo.epochs={epochs}",
            f"algo.steps_per_epoch={OFF_EPOCH}",
            f"algo.start_steps={LEARNING_STARTS}",
            f"algo.update_after={LEARNING_STARTS}",
            "algo.num_test_episodes=0",
            f"algo.save_freq={epochs}",
        ]
    if algo in ("tqc", "crossq"):  # sb3-contrib's defaults, which the presets hold
        return [
            f"algo={algo}", f"algo.epochs={epochs}", f"algo.steps_per_epoch={OFF_EPOCH}",
            f"algo.start_steps={LEARNING_STARTS}", f"algo.update_after={LEARNING_STARTS}",
            "algo.num_test_episodes=0", f"algo.save_freq={epochs}",
        ]  # fmt: skip
    common = [
        f"algo={algo}",
        "network=mlp256x256_relu",
        f"algo.epochs={epochs}",
        f"algo.steps_per_epoch={OFF_EPOCH}",
        f"algo.batch_size={batch}",
        f"algo.start_steps={LEARNING_STARTS}",
        f"algo.update_after={LEARNING_STARTS}",
        "algo.update_every=1",
        "algo.num_test_episodes=0",
        f"algo.save_freq={epochs}",
    ]
    return common + (["algo.lr=1e-3", "algo.alpha=0.2"] if algo == "sac" else [])


def rlexp_env(algo: str) -> str:
    """The env preset of a row's rlexp runs."""
    return {"dqn": "CartPole-v1", "dqn-atari": "atari", "qrdqn": "CartPole-v1", "rainbow": "minatar"}.get(
        algo, ENV
    )


def default_compiles(algo: str, batch: int) -> bool:
    """Whether rlexp's default, ``backend.compile=null``, compiles the gradient steps of a whole run of the
    row's settings (the epochs of its preset: Spinning Up's 100 of 4000 steps, a tuned preset's budget), by
    the loop's own rule: its planned gradient steps against ``backend.compile_min_steps``. The timed runs
    are short, so each kind is asked for explicitly; the row's default figure is the kind this picks."""
    from omegaconf import open_dict

    from rlexp.algos.off_policy import planned_gradient_steps
    from rlexp.api import compose
    from rlexp.config import load_config

    window = ("algo.epochs=", "algo.steps_per_epoch=", "algo.save_freq=")
    overrides = [o for o in rlexp_overrides(algo, 0, 0, batch) if not o.startswith(window)]
    cfg = compose([f"env={rlexp_env(algo)}", "backend=torch", *overrides])
    with open_dict(cfg):
        del cfg["hydra"]
    run = load_config(cfg)
    return planned_gradient_steps(run.algo, 1, run.env.num_envs) >= run.backend.compile_min_steps


def rlexp_sps(
    algo: str,
    warmup: int,
    window: int,
    batch: int,
    backend: str = "torch",
    procs: int = 1,
    device: str = "cpu",
    compiled: bool = False,
) -> float | tuple[float, float]:
    """rlexp's steady-state env steps per second: TotalEnvInteracts / Time between two epoch rows
    (``device``: ``backend.device``; benchmarks/bench_device.py times cuda against the CPU). With
    ``compiled`` (torch's ``backend.compile``): (SPS, the seconds its compilation took, which fall before
    the window: the first burst is at ``LEARNING_STARTS``)."""
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "rlexp", f"hydra.run.dir={run_dir}", f"env={rlexp_env(algo)}"]
        cmd.append(f"backend={backend}")
        cmd += [
            f"comm.procs={procs}",
            f"backend.device={device}",
            *rlexp_overrides(algo, warmup, window, batch),
        ]
        if procs == 1:
            cmd.append("backend.threads=1")
        if backend == "torch":  # both kinds explicit: the default would run the window eagerly (it is short)
            cmd.append(f"backend.compile={str(compiled).lower()}")
        out = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout
        df = pd.read_table(run_dir / "progress.txt")
    on_policy = algo.startswith("ppo")
    first = 0 if on_policy else warmup // OFF_EPOCH - 1  # row whose end starts the window
    # The last row includes the final checkpoint (off-policy: the replay buffer): leave it out.
    last = len(df) - 1 if on_policy else len(df) - 2
    steps = df["TotalEnvInteracts"].iloc[last] - df["TotalEnvInteracts"].iloc[first]
    sps = float(steps / (df["Time"].iloc[last] - df["Time"].iloc[first]))
    if not compiled:
        return sps
    # the step, and the calls of backend.compile_unroll steps (a long burst may take only those)
    built = re.findall(r"backend.compile: torch.compile built .* in ([0-9.]+) s", out)
    assert built, "no compilation reported"
    return sps, sum(map(float, built))


# --- Stable-Baselines3 (runs in a child process) ---------------------------------------------------


def sb3_sps(algo: str, warmup: int, window: int, batch: int, device: str = "cpu", lib: str = "sb3") -> float:
    """A peer's steady-state env steps per second, timed by a callback over the same window: SB3's
    (``lib="sb3"``; sb3-contrib's TQC and CrossQ) or SBX's (``lib="sbx"``: the same classes and settings in
    JAX, run by SBX's venv), ``device``: torch's device of SB3's networks (benchmarks/bench_device.py times
    both libraries on a GPU)."""
    import gymnasium as gym
    import numpy as np
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.noise import NormalActionNoise

    if lib == "sbx":  # the same classes in JAX; activations are flax's
        import flax.linen as fnn
        from sbx import DQN, PPO, SAC, TD3, TQC, CrossQ

        relu, tanh = fnn.relu, fnn.tanh
        device = "auto"  # JAX's own device (the CPU here); SBX takes no torch device
    else:
        from sb3_contrib import TQC, CrossQ
        from stable_baselines3 import DQN, PPO, SAC, TD3

        relu, tanh = torch.nn.ReLU, torch.nn.Tanh
    torch.set_num_threads(1)
    env = gym.make(ENVS.get(algo, ENV)) if algo != "dqn-atari" else None
    if algo in ("dqn", "dqn-atari"):
        start, stop = warmup, warmup + window
        if algo == "dqn":  # the zoo's CartPole-v1 entry (tuned=dqn on rlexp's side)
            hp: dict[str, Any] = dict(
                learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, gamma=0.99, target_update_interval=10,
                train_freq=256, gradient_steps=128, exploration_final_eps=0.04,
                policy_kwargs={"net_arch": [256, 256]},
            )  # fmt: skip
            explore, policy = 8000, "MlpPolicy"
        else:  # the zoo's atari entry with a small replay; SB3's own Atari wrappers and 4-frame stack
            import ale_py
            from stable_baselines3.common.env_util import make_atari_env
            from stable_baselines3.common.vec_env import VecFrameStack

            gym.register_envs(ale_py)
            env = VecFrameStack(make_atari_env("PongNoFrameskip-v4", n_envs=1, seed=0), n_stack=4)
            hp = dict(learning_rate=1e-4, batch_size=32, buffer_size=DQN_REPLAY, target_update_interval=1000,
                      train_freq=4, gradient_steps=1, exploration_final_eps=0.01)  # fmt: skip
            explore, policy = 1_000_000, "CnnPolicy"
        total = stop + 1
        model: Any = DQN(
            policy, env, learning_starts=LEARNING_STARTS, exploration_fraction=min(1.0, explore / total),
            seed=0, device=device, **hp,
        )  # fmt: skip
    elif algo == "qrdqn":
        from sb3_contrib import QRDQN  # with the zoo's CartPole-v1 preset (tuned=qrdqn on rlexp's side)

        start, stop = warmup, warmup + window
        hp = {**ZOO_QRDQN["CartPole-v1"], "learning_starts": LEARNING_STARTS}
        hp["exploration_fraction"] = min(1.0, 8000 / (stop + 1))  # 0.16 of the zoo's 5e4 steps
        model = QRDQN("MlpPolicy", env, seed=0, device=device, **hp)
    elif algo == "ppo-zoo":  # SB3-zoo's HalfCheetah preset, as bench_learning.py's --sb3 runs it
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize

        hp = dict(ZOO_PPO[ENV])
        kwargs = dict(hp.pop("policy_kwargs"))
        kwargs["activation_fn"] = relu if kwargs.pop("activation") == "relu" else tanh
        kwargs["net_arch"] = dict(pi=kwargs["net_arch"], vf=kwargs["net_arch"])
        venv = VecNormalize(make_vec_env(ENV, n_envs=1, seed=0), gamma=hp["gamma"])
        model = PPO("MlpPolicy", venv, policy_kwargs=kwargs, seed=0, device=device, **hp)
        start, stop = ZOO_STEPS, ZOO_STEPS * (1 + max(2, window // ZOO_STEPS))
    elif algo == "ppo":
        start, stop = PPO_STEPS, PPO_STEPS * (1 + max(2, window // PPO_STEPS))
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=PPO_STEPS,
            batch_size=PPO_STEPS,
            n_epochs=80,
            gamma=0.99,
            gae_lambda=0.97,
            clip_range=0.2,
            target_kl=None,
            policy_kwargs={"net_arch": [64, 64], "activation_fn": tanh},
            seed=0,
            device=device,
        )
    elif algo in ("tqc", "crossq"):  # sb3-contrib's defaults (rlexp's presets hold them)
        start, stop = warmup, warmup + window
        model = (TQC if algo == "tqc" else CrossQ)(
            "MlpPolicy", env, learning_starts=LEARNING_STARTS, seed=0, device=device
        )
    else:
        start, stop = warmup, warmup + window
        act_dim = env.action_space.shape[0]
        zoo = algo.endswith(
            "-zoo"
        )  # SB3-zoo's MuJoCo entries: batch 256; TD3 400x300, SAC lr 3e-4, auto entropy
        common = dict(
            buffer_size=1_000_000,
            learning_starts=LEARNING_STARTS,
            batch_size=256 if zoo else batch,
            tau=0.005,
            gamma=0.99,
            train_freq=1,
            gradient_steps=1,
            learning_rate=3e-4 if algo == "sac-zoo" else 1e-3,
            policy_kwargs={"net_arch": [400, 300] if algo == "td3-zoo" else [256, 256]},
            seed=0,
            device=device,
        )
        if algo.startswith("td3"):
            noise = NormalActionNoise(np.zeros(act_dim), 0.1 * np.ones(act_dim))
            model = TD3("MlpPolicy", env, action_noise=noise, policy_delay=2, **common)
        else:
            model = SAC("MlpPolicy", env, ent_coef="auto" if zoo else 0.2, **common)

    class Timer(BaseCallback):
        """Wall-clock times at the first step >= start and >= stop (PPO: checked at rollout ends)."""

        def __init__(self) -> None:
            super().__init__()
            self.marks: dict[str, tuple[float, int]] = {}

        def _mark(self) -> None:
            for name, at in (("start", start), ("stop", stop)):
                if name not in self.marks and self.num_timesteps >= at:
                    self.marks[name] = (time.perf_counter(), self.num_timesteps)

        def _on_step(self) -> bool:
            if not algo.startswith("ppo"):
                self._mark()
            return True

        def _on_rollout_start(self) -> None:
            if algo.startswith("ppo"):  # the previous rollout and its update are done
                self._mark()

    timer = Timer()
    extra = {"ppo": PPO_STEPS, "ppo-zoo": ZOO_STEPS}.get(algo, 1)  # one more rollout: the last one is marked
    model.learn(total_timesteps=stop + extra, callback=timer)
    (t0, n0), (t1, n1) = timer.marks["start"], timer.marks["stop"]
    return (n1 - n0) / (t1 - t0)


# --- driver ------------------------------------------------------------------------------------------


def child(kind: str, algo: str, warmup: int, window: int, batch: int, **kw: Any) -> float:
    """Run one measurement in a fresh interpreter (one thread); return its SPS. ``kind``: rlexp, sb3 or
    sbx (in SBX's own venv, XLA on one thread)."""
    return child_values(kind, algo, warmup, window, batch, **kw)[0]


def child_values(kind: str, algo: str, warmup: int, window: int, batch: int, **kw: Any) -> list[float]:
    """:func:`child`'s numbers: its SPS, and with ``compiled=True`` the compilation's seconds."""
    spec = json.dumps({"kind": kind, "algo": algo, "warmup": warmup, "window": window, "batch": batch, **kw})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(SBX_ENV if kind == "sbx" else {})}
    python = str(SBX_VENV / "bin" / "python") if kind == "sbx" else sys.executable
    out = subprocess.run(
        [python, __file__, "--child", spec],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return [float(x) for x in out.strip().splitlines()[-1].split()]


def default_run_sps(busy: bool, threads: int = 1, epochs: int = 6) -> float:
    """SPS of ``python -m rlexp`` at its defaults (the median over epochs 2..N), with ``busy``: while one
    other process keeps a core busy."""
    import pandas as pd

    spinner = (
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    )  # the competing job
    try:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [sys.executable, "-m", "rlexp", f"hydra.run.dir={tmp}/run", f"algo.epochs={epochs}",
                 f"backend.threads={threads}"],
                cwd=ROOT, check=True, capture_output=True,
            )  # fmt: skip
            return float(pd.read_table(Path(tmp) / "run" / "progress.txt")["SPS"].iloc[1:].median())
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def summary(values: list[float]) -> str:
    return f"median {statistics.median(values):7.0f}  [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--algos",
        nargs="*",
        default=[
            "td3",
            "sac",
            "ppo",
            "ppo-zoo",
            "td3-zoo",
            "sac-zoo",
            "tqc",
            "crossq",
            "dqn",
            "dqn-atari",
            "qrdqn",
            "rainbow",
        ],
        help="none: skip the SB3 tables",
    )
    parser.add_argument("--reps", type=int, default=3, help="repetitions of each measurement")
    parser.add_argument("--warmup", type=int, default=1500, help="off-policy: env steps before the window")
    parser.add_argument("--window", type=int, default=1500, help="env steps timed (PPO: at least 2 updates)")
    parser.add_argument(
        "--batch",
        type=int,
        default=100,
        help="off-policy minibatch on both sides (100: Spinning Up's and rlexp's)",
    )
    parser.add_argument("--no-backends", action="store_true", help="skip rlexp's TF backend (torch only)")
    parser.add_argument(
        "--no-sbx",
        dest="sbx",
        action="store_false",
        help=f"skip SBX {SBX_VERSION} (SB3 in JAX; installed on first use into .venv-sbx)",
    )
    parser.add_argument("--no-mpi", action="store_true", help="skip rlexp's PPO at 1/2/4 ranks")
    parser.add_argument(
        "--no-envpath",
        action="store_true",
        help="skip the env path's cost beside the raw env (bench_envpath.py)",
    )
    parser.add_argument(
        "--no-contention", action="store_true", help="skip the default run beside a competing busy process"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        kind = spec.pop("kind")
        value = sb3_sps(**spec, lib=kind) if kind in ("sb3", "sbx") else rlexp_sps(**spec)
        print(*(value if isinstance(value, tuple) else (value,)))
        return

    if args.algos:
        contrib = {"tqc", "crossq", "qrdqn"}  # sb3-contrib's TQC, CrossQ and QRDQN
        ensure_sb3(contrib=bool(contrib & set(args.algos)))
        if args.sbx:
            ensure_sbx()
    peers = ["sb3", *(["sbx"] if args.sbx else [])]
    if args.algos:
        print(
            f"rlexp vs Stable-Baselines3 {SB3_VERSION}" + (f" and SBX {SBX_VERSION}" if args.sbx else "")
            + f" on {', '.join(dict.fromkeys(ENVS.get(a, ENV) for a in args.algos))}, CPU, 1 thread,"
            + f" {args.reps} repetitions"
        )  # fmt: skip
        print(f"{'algo':5} {'library':6} {'env steps / s':>40}")
    lines = []
    tf_figures: dict[str, tuple[float, float]] = {}
    for algo in args.algos:
        ours, tf = [], []
        theirs: dict[str, list[float]] = {peer: [] for peer in peers if peer in ROW_PEERS.get(algo, peers)}
        warmup, window = SHORT_WINDOW.get(algo, (args.warmup, args.window))
        compiled: list[float] = []  # torch's backend.compile (COMPILED_ROWS)
        build: list[float] = []  # its compilation, seconds
        for _ in range(args.reps):  # rlexp torch, rlexp tf, SB3 and SBX in turn, so all see the same load
            ours.append(child("rlexp", algo, warmup, window, args.batch))
            if algo in COMPILED_ROWS:
                sps, seconds = child_values("rlexp", algo, warmup, window, args.batch, compiled=True)
                compiled.append(sps)
                build.append(seconds)
            if not args.no_backends:
                tf.append(child("rlexp", algo, warmup, window, args.batch, backend="tf"))
            for peer in theirs:
                theirs[peer].append(child(peer, algo, warmup, window, args.batch))
        # torch's default (backend.compile=null): what a whole run of the row's settings does
        default = "compiled" if compiled and default_compiles(algo, args.batch) else "eager"
        print(f"{algo:9} rlexp-eag {summary(ours)}" + ("  (the default)" if default == "eager" else ""))
        if compiled:
            print(
                f"{algo:9} rlexp-cmp {summary(compiled)}  (backend.compile"
                + (", the default for a whole run" if default == "compiled" else "")
                + f"; its build {summary(build)} s)"
            )
        if tf:
            print(f"{algo:9} rlexp-tf  {summary(tf)}")
        for peer in theirs:
            print(f"{algo:9} {peer:9} {summary(theirs[peer])}")
        for name, values in (("eager", ours), ("compiled", compiled), ("tf", tf)):
            if not values:
                continue
            for peer in theirs:
                ratios = [a / b for a, b in zip(values, theirs[peer], strict=True)]
                print(
                    f"{algo:9} ratio {name[:5]:5} / {peer:3} median {statistics.median(ratios):.2f}x  "
                    f"[{min(ratios):.2f}-{max(ratios):.2f}]"
                )
            label = algo if name == default else f"{algo} ({name})"
            mine = statistics.median(values)
            lines.append(
                f"{label}  rlexp {mine:.0f} SPS  "
                + "  ".join(
                    f"{peer} {statistics.median(theirs[peer]):.0f} SPS  {mine / statistics.median(theirs[peer]):.2f}x"
                    for peer in theirs
                )
            )
        if tf:
            tf_figures[algo] = (
                statistics.median(compiled if default == "compiled" else ours),
                statistics.median(tf),
            )
    if not args.no_envpath:
        import bench_envpath

        print(
            f"\nenv path per env step on {ENV} beside the raw env (bench_envpath.py), median of {args.reps}"
        )
        for family, n, vector in bench_envpath.CASES:
            line = bench_envpath.measure(ENV, family, n, vector, bench_envpath.STEPS, args.reps)
            print(line, flush=True)
            lines.append(line.split("  (")[0])
    print("\nsummary (median SPS, ratio of medians)")
    print("\n".join(lines), flush=True)

    extra_reps = max(1, args.reps - 1)  # the secondary tables: one repetition fewer, to keep the run short
    if tf_figures:  # from the measurements above
        print("\nrlexp torch vs tf (same matched settings; tf time / torch time, target <= 1.3x)")
        for algo, (tm, fm) in tf_figures.items():
            print(f"{algo:9} torch {tm:7.0f} SPS  tf {fm:7.0f} SPS  tf/torch time {tm / fm:.2f}x", flush=True)

    if not args.no_mpi:
        print(f"\nrlexp PPO, comm.procs = 1/2/4 at the same global batch ({PPO_STEPS} steps per update)")
        base = None
        for procs in (1, 2, 4):
            v = statistics.median(
                child("rlexp", "ppo", args.warmup, args.window, args.batch, procs=procs)
                for _ in range(extra_reps)
            )
            base = base or v
            print(
                f"ppo   procs={procs}  {v:7.0f} SPS  speed-up {v / base:.2f}x  efficiency {v / base / procs:.0%}"
            )

    if not args.no_contention:
        print("\nrlexp default run (python -m rlexp: PPO CartPole-v1) idle and beside one busy process")
        for threads in (1, 2):
            idle, busy = [], []
            for _ in range(args.reps):
                idle.append(default_run_sps(False, threads))
                busy.append(default_run_sps(True, threads))
            ratios = [b / i for i, b in zip(idle, busy, strict=True)]
            print(
                f"default threads={threads}  idle {statistics.median(idle):.0f} SPS  busy "
                f"{statistics.median(busy):.0f} SPS  [{min(busy):.0f}-{max(busy):.0f}]  "
                f"{statistics.median(ratios):.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
