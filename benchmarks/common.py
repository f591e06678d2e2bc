"""What the benchmarks share: paths, the child processes' environment, SB3's installation and the
peers' settings and published numbers (../shared/reference/baselines.md), one home for each."""

from __future__ import annotations

import functools
import importlib.util
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
SB3_VERSION = "2.9.2"
MUJOCO_ENVS = ("HalfCheetah-v4", "Hopper-v4", "Walker2d-v4")

# Published final returns at about 1M steps. SB3-zoo: one tuned agent, deterministic evaluation, v3
# envs (rl-baselines3-zoo benchmark.md). CleanRL: mean of the last 100 training episodes, 3 seeds, v4
# envs. Spinning Up: read off its 3M-step PyTorch plots at 1M (approximate, 10 seeds).
PUBLISHED: dict[str, dict[str, dict[str, float]]] = {
    "ppo": {  # the NoVel envs: sb3-contrib's RecurrentPPO in the zoo (benchmark.md, 1e5 steps)
        "sb3-zoo": {
            "HalfCheetah-v4": 5819.0,
            "Hopper-v4": 2410.0,
            "Walker2d-v4": 3479.0,
            "CartPoleNoVel-v1": 500.0,
            "PendulumNoVel-v1": -218.0,
        },
        "cleanrl": {"HalfCheetah-v4": 1443.0, "Hopper-v4": 2383.0, "Walker2d-v4": 2288.0},
        "spinup": {"HalfCheetah-v4": 1670.0, "Hopper-v4": 1850.0, "Walker2d-v4": 1230.0},
    },
    "sac": {
        "sb3-zoo": {"HalfCheetah-v4": 9535.0, "Hopper-v4": 2326.0, "Walker2d-v4": 3863.0},
        "cleanrl": {"HalfCheetah-v4": 9635.0, "Hopper-v4": 2310.0, "Walker2d-v4": 3591.0},
        "spinup": {"HalfCheetah-v4": 11500.0, "Hopper-v4": 3150.0, "Walker2d-v4": 4250.0},
    },
    # DQN: SB3-zoo (one run; CartPole at 5e4 steps, LunarLander at 1e5, Atari at 1e7), CleanRL (3 seeds),
    # MinAtar's own DQN curves at 5M frames (Young & Tian 2019, read off its figure)
    "dqn": {
        "sb3-zoo": {"CartPole-v1": 500.0, "LunarLander-v3": 154.4, "ALE/Pong-v5": 20.6},
        "cleanrl": {"CartPole-v1": 488.7, "ALE/Pong-v5": 20.3},
        "minatar": {  # played with all 6 actions (the -v0 ids); the same numbers beside the -v1 ids
            "MinAtar/Breakout-v1": 10.0,
            "MinAtar/SpaceInvaders-v1": 43.0,
            "MinAtar/Breakout-v0": 10.0,
            "MinAtar/SpaceInvaders-v0": 43.0,
        },
        # MinAtar's DQN at the step size of its examples/dqn.py and of rlexp's preset (2.5e-4, the point
        # 2^-12 of the README's step-size sensitivity plot: the final 100 episodes, 30 runs, read off by
        # pixel). The curves above are not all at that step size: Breakout's ends at 10.0, the plot's
        # 2^-12 point is 8.9 (its best, 10.3 at 2^-9); SpaceInvaders' 43.9 and 45.4 (its best).
        "minatar-lr": {
            "MinAtar/Breakout-v1": 8.9,
            "MinAtar/SpaceInvaders-v1": 45.4,
            "MinAtar/Breakout-v0": 8.9,
            "MinAtar/SpaceInvaders-v0": 45.4,
        },
    },
    # QR-DQN: sb3-contrib's documented result with the zoo's LunarLander preset (1e5 steps, deterministic
    # evaluation); its CartPole runs in the same benchmark (--sb3) are the reference there
    "qrdqn": {"sb3-contrib": {"LunarLander-v3": 168.0}},
    "td3": {
        "sb3-zoo": {"HalfCheetah-v4": 9656.0, "Hopper-v4": 3606.0, "Walker2d-v4": 4718.0},
        "cleanrl": {"HalfCheetah-v4": 9583.0, "Hopper-v4": 3135.0, "Walker2d-v4": 4058.0},
        "spinup": {"HalfCheetah-v4": 9750.0, "Hopper-v4": 2860.0, "Walker2d-v4": 4000.0},
    },
}

# At 300k steps (the early-training budget of issue 73): the evaluation returns of SimbaV2's baseline results
# (github.com/dojeon-ai/SimbaV2, results/baseline/*.csv: the mean of 10 seeds, MuJoCo v4 envs), CrossQ's at 300k
# and 1M, SAC's at 300k; and rlexp's own SAC at 1M (docs/benchmarks.md, issue 27: the median det10 of 3 seeds),
# which CrossQ at 300k is held against too.
PUBLISHED_300K: dict[str, dict[str, dict[str, float]]] = {
    "crossq": {
        "crossq-300k": {
            "HalfCheetah-v4": 10012.0,
            "Walker2d-v4": 5941.0,
            "Ant-v4": 5712.0,
            "Humanoid-v4": 9039.0,
        },
        "crossq-1m": {
            "HalfCheetah-v4": 12893.0,
            "Walker2d-v4": 6257.0,
            "Ant-v4": 6980.0,
            "Humanoid-v4": 10480.0,
        },
        "rlexp-sac-1m": {"HalfCheetah-v4": 11954.0, "Walker2d-v4": 4235.0},
    },
    "sac": {
        "sac-300k": {"HalfCheetah-v4": 8593.0, "Walker2d-v4": 2470.0, "Ant-v4": 3532.0, "Humanoid-v4": 3015.0}
    },
    "tqc": {
        "sac-300k": {"HalfCheetah-v4": 8593.0, "Walker2d-v4": 2470.0, "Ant-v4": 3532.0, "Humanoid-v4": 3015.0}
    },
}
# The envs of the 300k comparison
EARLY_ENVS = ("HalfCheetah-v4", "Walker2d-v4", "Ant-v4", "Humanoid-v4")

# The reference columns of each algorithm's table (keys of PUBLISHED[algo]), their headings, and the
# figure of a run that follows each one's protocol: SB3-zoo's deterministic evaluation of the final policy
# (det10), CleanRL's and MinAtar's training episodes (last100: MinAtar's curves average the episodes as
# played, epsilon 0.1), Spinning Up's deterministic test episodes during training (test).
REFERENCES = {
    "dqn": (
        ("sb3-zoo", "SB3-zoo", "det10"),
        ("cleanrl", "CleanRL", "last100"),
        ("minatar", "MinAtar DQN", "last100"),
        ("minatar-lr", "MinAtar DQN lr 2^-12", "last100"),
    ),
    "qrdqn": (("sb3-contrib", "sb3-contrib", "det10"),),
    # at 300k steps (PUBLISHED_300K): every reference against the final policy's deterministic evaluation
    "crossq-300k": (
        ("crossq-300k", "CrossQ(300k)", "det10"),
        ("crossq-1m", "CrossQ(1M)", "det10"),
        ("rlexp-sac-1m", "rlexp SAC(1M)", "det10"),
    ),
    "sac-300k": (("sac-300k", "SAC(300k)", "det10"),),
    "tqc-300k": (("sac-300k", "SAC(300k)", "det10"),),
    "default": (
        ("sb3-zoo", "SB3-zoo", "det10"),
        ("cleanrl", "CleanRL", "last100"),
        ("spinup", "Spinning Up", "test"),
    ),
}

# Figures also held against a reference, each in a summary line of its own after the protocol's figure:
# act6 (MinAtar's DQN explored over all 6 of its actions; the -v1 ids rlexp trains on have the minimal
# set, see bench_learning.minatar_acting).
ALSO_AGAINST = {"minatar": ("act6",), "minatar-lr": ("act6",)}

# References held against in summary lines of their own also where an earlier reference has a number for
# the env (otherwise only the first one with a number is): MinAtar's DQN at rlexp's step size, beside
# its curves.
OWN_SUMMARY = {"minatar-lr", "crossq-1m", "rlexp-sac-1m"}

# DQN's benchmark envs: name -> (env preset, env.id or None). The budget of each is its tuned=dqn preset's
# (CartPole 5e4 steps, LunarLander 1e5, MinAtar 5e6, Atari 1e7) unless --steps says otherwise.
DQN_ENVS: dict[str, tuple[str, str | None]] = {
    "CartPole-v1": ("CartPole-v1", None),
    "LunarLander-v3": ("LunarLander-v3", None),
    "MinAtar/Breakout-v1": ("minatar", "MinAtar/Breakout-v1"),
    "MinAtar/SpaceInvaders-v1": ("minatar", "MinAtar/SpaceInvaders-v1"),
    # all 6 actions, as MinAtar's own DQN played (the -v1 ids: each game's minimal set)
    "MinAtar/Breakout-v0": ("minatar", "MinAtar/Breakout-v0"),
    "MinAtar/SpaceInvaders-v0": ("minatar", "MinAtar/SpaceInvaders-v0"),
    "ALE/Pong-v5": ("atari", "ALE/Pong-v5"),
}

# SB3-zoo's DQN presets (hyperparams/dqn.yml) in SB3's own keys: bench_learning's --sb3 runs with --algo dqn.
ZOO_DQN: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]),
    ),
    "LunarLander-v3": dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1, policy_kwargs=dict(net_arch=[256, 256]),
    ),
    "ALE/Pong-v5": dict(
        learning_rate=1e-4, batch_size=32, buffer_size=100_000, learning_starts=100_000,
        target_update_interval=1000, train_freq=4, gradient_steps=1, exploration_fraction=0.1,
        exploration_final_eps=0.01, optimize_memory_usage=False,
    ),
}  # fmt: skip

# RL Baselines3 Zoo's QR-DQN presets (hyperparams/qrdqn.yml; LunarLander: its -v2 entry) in sb3-contrib's own
# keys: bench_learning's --sb3 runs with --algo qrdqn and bench_sb3's qrdqn row. sb3-contrib's QRDQN adds Adam's
# eps 0.01 / batch_size and no gradient clipping; "lin_X" is a learning rate falling linearly from X to 0.
ZOO_QRDQN: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=10),
    ),
    "LunarLander-v3": dict(
        learning_rate="lin_1.5e-3", batch_size=128, buffer_size=100_000, learning_starts=10_000, gamma=0.995,
        target_update_interval=1, train_freq=256, gradient_steps=-1, exploration_fraction=0.24,
        exploration_final_eps=0.18, policy_kwargs=dict(net_arch=[256, 256], n_quantiles=170),
    ),
}  # fmt: skip

# The partially observed envs: rlexp's env preset -> (the gymnasium id, the observation entries masked, as
# rl_zoo3's MaskVelocityWrapper), and SB3-zoo's RecurrentPPO presets for them (hyperparams/ppo_lstm.yml,
# with sb3-contrib's defaults: batch_size 128, vf_coef 0.5, max_grad_norm 0.5) in SB3's own keys.
NOVEL_ENVS = {"CartPoleNoVel-v1": ("CartPole-v1", [1, 3]), "PendulumNoVel-v1": ("Pendulum-v1", [2])}
ZOO_PPO_LSTM: dict[str, dict[str, Any]] = {
    "CartPoleNoVel-v1": dict(
        n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate="lin_1e-3", clip_range="lin_0.2",
        policy_kwargs=dict(ortho_init=False, activation="relu", lstm_hidden_size=64, enable_critic_lstm=True,
                           net_arch=dict(pi=[64], vf=[64])),
    ),
    "PendulumNoVel-v1": dict(
        n_envs=4, n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0, learning_rate=1e-3,
        clip_range=0.2, use_sde=True, sde_sample_freq=4,
        policy_kwargs=dict(ortho_init=False, activation="relu", lstm_hidden_size=64, enable_critic_lstm=True,
                           net_arch=dict(pi=[64], vf=[64])),
    ),
}  # fmt: skip

# SB3-zoo's PPO presets (hyperparams/ppo.yml, the v3 entries) in SB3's own keys: bench_learning's
# --sb3 runs and bench_sb3's ppo-zoo row.
ZOO_PPO: dict[str, dict[str, Any]] = {
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


@functools.cache
def atari_random_human() -> dict[str, tuple[float, float]]:
    """The random and human returns of the Atari ids in rlexp's score table (conf/scores.yaml, DeepMind's
    Atari-57 table): a summary line holds an Atari return as its human-normalised score, (return -
    random) / (human - random), whose ratios mean something where the raw returns are negative (Pong: -21
    to 21)."""
    from rlexp.compare import load_scores

    return {env: (v["random"], v["human"]) for env, v in load_scores(None).items() if "human" in v}


def child_env() -> dict[str, str]:
    """The environment of a benchmark's child process: one thread, headless MuJoCo."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MUJOCO_GL="egl")


def ensure_sb3(contrib: bool = False) -> None:
    """pip install stable-baselines3 (and with ``contrib`` sb3-contrib, for RecurrentPPO) into this
    environment if it is not importable (torch untouched)."""
    for module, package in (("stable_baselines3", "stable-baselines3"), ("sb3_contrib", "sb3-contrib")):
        if module == "sb3_contrib" and not contrib:
            continue
        if importlib.util.find_spec(module) is None:
            print(f"installing {package}=={SB3_VERSION} ...", flush=True)
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", f"{package}=={SB3_VERSION}"], check=True
            )


# SBX (Stable-Baselines3 in JAX, sbx-rl) as a peer of make bench: in a venv of its own beside rlexp's, so
# that jax, flax and tensorflow-probability never meet rlexp's TensorFlow or change its torch.
SBX_VERSION = "0.28.0"
JAX_VERSION = "0.10.2"
SBX_VENV = ROOT / ".venv-sbx"
SBX_ATARI = ("ale-py", "opencv-python-headless")  # the dqn-atari row's envs in SBX's venv
# XLA on one thread, as rlexp's torch and TF: no Eigen thread pool, one intra-op thread
SBX_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "JAX_PLATFORMS": "cpu",
}


def ensure_sbx() -> Path:
    """The Python of SBX's venv (``.venv-sbx``), made on first use: torch pinned as rlexp's (SB3 needs one;
    the CPU build on this machine's disk, never a CUDA download), then sbx-rl, a CPU jax, the MuJoCo envs and
    the Atari ones (ale-py and OpenCV, the versions of rlexp's venv, for the ``dqn-atari`` row; a venv made
    before they were in it gets them)."""
    python = SBX_VENV / "bin" / "python"
    from rlexp.provenance import package_versions

    # pinned to rlexp's venv's versions where it has them
    atari = [f"{n}=={v}" if v else n for n, v in package_versions(SBX_ATARI).items()]
    if python.is_file() and subprocess.run([python, "-c", "import sbx"], capture_output=True).returncode == 0:
        if subprocess.run([python, "-c", "import ale_py, cv2"], capture_output=True).returncode != 0:
            subprocess.run([str(python), "-m", "pip", "install", "-q", *atari], check=True)
        return python
    print(f"installing sbx-rl=={SBX_VERSION} and jax=={JAX_VERSION} into {SBX_VENV} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(SBX_VENV)], check=True)
    import torch

    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, f"torch=={torch.__version__.split('+')[0]}"], check=True)
    subprocess.run(
        [*pip, f"sbx-rl=={SBX_VERSION}", f"jax[cpu]=={JAX_VERSION}", "gymnasium[mujoco]", *atari, "pandas"],
        check=True,
    )
    return python


def spread(values: list[float], fmt: str = ",.0f") -> str:
    """``median (min-max)`` of ``values``; ``-`` when there are none."""
    if not values:
        return "-"
    low, high = min(values), max(values)
    dash = " to " if low < 0 else "-"  # -1,474 to -1,350, not -1,474--1,350
    return f"{statistics.median(values):{fmt}} ({low:{fmt}}{dash}{high:{fmt}})"
