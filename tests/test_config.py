"""Config composition, the algo.lr rule, and one clear line for every bad input a user can give."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

import rlexp.__main__ as entry
from rlexp.algos.ppo import PPOConfig
from rlexp.config import load_config

from .conftest import ROOT


def composed(*overrides: str):
    with initialize_config_dir(config_dir=entry.CONF_DIR, version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def test_defaults_compose_to_ppo_torch_cartpole_one_process():
    cfg = load_config(composed())
    assert isinstance(cfg.algo, PPOConfig)
    assert (cfg.algo.name, cfg.env.id, cfg.backend.name, cfg.comm.procs) == ("ppo", "CartPole-v1", "torch", 1)
    # Spinning Up's PPO defaults
    a = cfg.algo
    assert (a.steps_per_epoch, a.epochs, a.gamma, a.lam, a.clip_ratio) == (4000, 50, 0.99, 0.97, 0.2)
    assert (a.pi_lr, a.vf_lr, a.train_pi_iters, a.train_v_iters, a.target_kl) == (3e-4, 1e-3, 80, 80, 0.01)
    assert cfg.network.hidden_sizes == [64, 64] and cfg.network.activation == "tanh"
    assert cfg.exp_name == "ppo_CartPole-v1"


def test_lr_sets_every_learning_rate_and_unset_keeps_them():
    cfg = load_config(composed("algo.lr=1e-3"))
    assert cfg.algo.pi_lr == cfg.algo.vf_lr == 1e-3
    cfg = load_config(composed("algo.lr=null"))
    assert (cfg.algo.pi_lr, cfg.algo.vf_lr) == (3e-4, 1e-3)


@pytest.mark.parametrize(
    "env",
    [
        "CartPole-v1",
        "Pendulum-v1",
        "HalfCheetah-v4",
        "Hopper-v4",
        "Walker2d-v4",
        "Ant-v4",
        "Swimmer-v4",
        "HalfCheetah-v5",
        "InvertedPendulum-v4",
        "LunarLander-v3",
    ],
)
def test_env_presets_name_real_envs(env):
    from rlexp.envs import make_env

    cfg = load_config(composed(f"env={env}"))
    e = make_env(cfg.env, seed=0)
    assert e.spec.id == env
    e.close()


SPINNING_UP_DEFAULTS = {
    "vpg": dict(
        steps_per_epoch=4000,
        epochs=50,
        gamma=0.99,
        pi_lr=3e-4,
        vf_lr=1e-3,
        train_v_iters=80,
        lam=0.97,
        save_freq=10,
        test_every=0,  # no test episodes: Spinning Up's on-policy progress.txt
        stop_at_return=None,
    ),
    "trpo": dict(
        steps_per_epoch=4000,
        epochs=50,
        gamma=0.99,
        delta=0.01,
        vf_lr=1e-3,
        train_v_iters=80,
        damping_coeff=0.1,
        cg_iters=10,
        backtrack_iters=10,
        backtrack_coeff=0.8,
        lam=0.97,
        save_freq=10,
        variant="trpo",
        test_every=0,
        stop_at_return=None,
    ),
    "ddpg": dict(
        steps_per_epoch=4000,
        epochs=100,
        replay_size=10**6,
        gamma=0.99,
        polyak=0.995,
        pi_lr=1e-3,
        q_lr=1e-3,
        batch_size=100,
        start_steps=10000,
        update_after=1000,
        update_every=50,
        act_noise=0.1,
        num_test_episodes=10,
        test_every=1,  # test episodes after every epoch, as Spinning Up
        stop_at_return=None,
        save_freq=1,
    ),
    "td3": dict(
        steps_per_epoch=4000,
        epochs=100,
        replay_size=10**6,
        gamma=0.99,
        polyak=0.995,
        pi_lr=1e-3,
        q_lr=1e-3,
        batch_size=100,
        start_steps=10000,
        update_after=1000,
        update_every=50,
        act_noise=0.1,
        target_noise=0.2,
        noise_clip=0.5,
        policy_delay=2,
        num_test_episodes=10,
        test_every=1,  # test episodes after every epoch, as Spinning Up
        stop_at_return=None,
        save_freq=1,
    ),
    "sac": dict(
        steps_per_epoch=4000,
        epochs=100,
        replay_size=10**6,
        gamma=0.99,
        polyak=0.995,
        lr=1e-3,
        alpha=0.2,
        batch_size=100,
        start_steps=10000,
        update_after=1000,
        update_every=50,
        num_test_episodes=10,
        test_every=1,  # test episodes after every epoch, as Spinning Up
        stop_at_return=None,
        save_freq=1,
        autotune_alpha=False,
    ),
}


@pytest.mark.parametrize("algo", list(SPINNING_UP_DEFAULTS))
def test_each_algorithm_has_spinning_ups_defaults_and_network(algo):
    cfg = load_config(composed(f"algo={algo}"))
    for key, value in SPINNING_UP_DEFAULTS[algo].items():
        assert getattr(cfg.algo, key) == value, key
    off = algo in ("ddpg", "td3", "sac")
    expected = ([256, 256], "relu") if off else ([64, 64], "tanh")
    assert (cfg.network.hidden_sizes, cfg.network.activation) == expected
    # an explicit network choice still wins over the algorithm's default
    cfg = load_config(composed(f"algo={algo}", "network=mlp400x300_relu"))
    assert cfg.network.hidden_sizes == [400, 300]


@pytest.mark.parametrize(
    "algo,keys",
    [
        ("vpg", ["pi_lr", "vf_lr"]),
        ("trpo", ["vf_lr"]),
        ("ppo", ["pi_lr", "vf_lr"]),
        ("ddpg", ["pi_lr", "q_lr"]),
        ("td3", ["pi_lr", "q_lr"]),
        ("sac", ["lr"]),
        ("tqc", ["lr"]),
        ("crossq", ["lr"]),
    ],
)
def test_lr_reaches_every_rate_of_every_algorithm(algo, keys):
    cfg = load_config(composed(f"algo={algo}", "algo.lr=5e-4"))
    assert all(getattr(cfg.algo, k) == 5e-4 for k in keys)


def test_generic_env_preset_takes_any_registered_id():
    assert load_config(composed("env=gym", "env.id=Acrobot-v1")).env.id == "Acrobot-v1"


# (overrides, a fragment the one-line message must contain)
BAD_INPUTS = [
    (
        ["algo=foo"],
        "unknown algo option 'foo'; choose one of: c51, crossq, ddpg, dqn, ppo, qrdqn, rainbow, sac, td3, tqc, trpo, "
        "vpg",
    ),
    (
        ["env=NoSuchEnv-v0"],
        "unknown env option 'NoSuchEnv-v0' (any gymnasium id: env=gym env.id=NoSuchEnv-v0)",
    ),
    # the close presets first; an env id given as a preset: the preset that takes it
    (["algo=tqcc"], "unknown algo option 'tqcc' (close matches: algo=tqc); choose one of: c51,"),
    (
        ["env=HalfCheetah"],
        "unknown env option 'HalfCheetah' (close matches: env=HalfCheetah-v5, env=HalfCheetah-v4)",
    ),
    (
        ["env=ALE/Pong-v5"],
        "env=ALE/Pong-v5 is not an env preset; an env id goes in env.id: env=atari env.id=ALE/Pong-v5",
    ),
    (
        ["env=MinAtar/Breakout-v1"],
        "an env id goes in env.id: env=minatar env.id=MinAtar/Breakout-v1 (env presets: Acrobot",
    ),
    (["backend=jax"], "unknown backend option 'jax'"),
    (
        ["env=gym", "env.id=CartPol-v1"],
        "env.id='CartPol-v1' is not registered with gymnasium (close matches: CartPole-v1",
    ),
    (["env=gym"], "env.id is required"),
    (["algo.pi_lr=-1"], "algo.pi_lr=-1.0 is out of range"),
    (["algo.lr=-0.1"], "algo.lr=-0.1 is out of range"),
    (
        ["algo.epochs=abc"],
        "algo.epochs: Value 'abc' of type 'str' could not be converted to Integer; use an integer",
    ),
    # what a field of the wrong type takes, null where it may be null
    (
        ["backend.compile=maybe"],
        "backend.compile: Value 'maybe' is not a valid bool (type str); use true, false or null",
    ),
    (["backend.threads=abc"], "use an integer or null"),
    (
        ["algo=sac", "env=Pendulum-v1", "algo.alpha=abc"],
        "algo.alpha: Value 'abc' of type 'str' could not be converted to Float; use a number",
    ),
    (["algo.clip_ratio=1.5"], "algo.clip_ratio=1.5 is out of range"),
    (["comm.procs=0"], "comm.procs=0 is out of range"),
    (["comm.procs=3", "algo.steps_per_epoch=2"], "algo.steps_per_epoch=2 is smaller than comm.procs=3"),
    (["algo.pi_lrr=1"], "unknown key algo.pi_lrr (close matches: algo.pi_lr); algo has: adam_eps, adv_norm,"),
    (
        ["algo.lrr=1"],
        "unknown key algo.lrr (close matches: algo.lr); algo has: adam_eps, adv_norm, anneal_clip,",
    ),
    (
        ["+algo.foo=1"],
        "unknown key algo.foo; algo has: adam_eps, adv_norm, anneal_clip, anneal_lr, clip_ratio,",
    ),
    (["+seeed=1"], "unknown key seeed (close matches: seed); the root config has: algo, allow_env_import,"),
    (["network.activation=swish"], "network.activation='swish' is unknown; choose one of: tanh"),
    (["algo.epochs=[1"], "bad override syntax"),
    (
        ["env=gym", "env.id=tests.envs:RLExpTest/MultiDiscrete-v0"],
        "ppo cannot handle the action space MultiDiscrete([3 3])",
    ),
    (["env=gym", "env.id=Blackjack-v1"], "ppo cannot handle the observation space Tuple("),
    (
        ["comm.procs=2", "comm.mpiexec=/nonexistent/mpiexec"],
        "comm.mpiexec='/nonexistent/mpiexec' is not an executable",
    ),
    (["algo=ddpg"], "ddpg cannot handle the action space Discrete(2) of CartPole-v1; supported: Box"),
    (["algo=sac", "env=gym", "env.id=Blackjack-v1"], "sac cannot handle the observation space Tuple("),
    (
        ["algo=td3", "env=gym", "env.id=tests.envs:RLExpTest/UnboundedActions-v0"],
        "td3 needs finite action bounds",
    ),
    (["algo=td3", "env=Pendulum-v1", "algo.polyak=1.5"], "algo.polyak=1.5 is out of range for td3"),
    (
        ["algo=sac", "env=Pendulum-v1", "algo.replay_size=100", "algo.batch_size=200"],
        "algo.batch_size=200 is larger than algo.replay_size=100",
    ),
    (["algo=td3", "env=Pendulum-v1", "algo.policy_delay=0"], "algo.policy_delay=0 is out of range"),
    (["algo=trpo", "algo.variant=foo"], "algo.variant='foo' is unknown; choose trpo or npg"),
    (["algo=sac", "env=Pendulum-v1", "algo.lr=null"], "algo.lr is required for sac"),
    (["algo=ddpg", "env=Pendulum-v1", "algo.q_lr=0"], "algo.q_lr=0.0 is out of range for ddpg"),
    (["backend.device=gpu"], "backend.device='gpu' is unknown; use cpu, cuda, cuda:N or auto"),
    (["backend.compile_min_steps=-1"], "backend.compile_min_steps=-1 is out of range; use an integer >= 0"),
    (
        ["backend.compile_unroll=0"],
        "backend.compile_unroll=0 is out of range; use an integer >= 1 (1: one compiled call per gradient step)",
    ),
    (["algo.test_every=-1"], "algo.test_every=-1 is out of range; use an integer >= 0 (0: no test episodes)"),
    (["algo.num_test_episodes=-2"], "algo.num_test_episodes=-2 is out of range; use an integer >= 0"),
    (
        ["algo=sac", "env=Pendulum-v1", "algo.num_test_episodes=-1"],
        "algo.num_test_episodes=-1 is out of range",
    ),
    (["algo.stop_at_return=inf"], "algo.stop_at_return=inf is out of range; use a finite number or null"),
    (["algo=tqc"], "tqc cannot handle the action space Discrete(2) of CartPole-v1; supported: Box"),
    (["algo=crossq"], "crossq cannot handle the action space Discrete(2) of CartPole-v1; supported: Box"),
    (
        ["algo=tqc", "env=Pendulum-v1", "algo.drop_per_critic=25"],
        "algo.drop_per_critic=25 drops every atom of the target (each critic has algo.n_quantiles=25)",
    ),
    (["algo=tqc", "env=Pendulum-v1", "algo.n_critics=0"], "algo.n_critics=0 is out of range"),
    (["algo=crossq", "env=Pendulum-v1", "algo.critic_width=0"], "algo.critic_width=0 is out of range"),
    (
        ["algo=crossq", "env=Pendulum-v1", "algo.polyak=0.99"],
        "algo.polyak=0.99 has no meaning for crossq: it has no target networks",
    ),
    (["algo=crossq", "env=Pendulum-v1", "algo.adam_beta1=1"], "algo.adam_beta1=1.0 is out of range"),
    (
        ["algo=crossq", "env=Pendulum-v1", "algo.renorm_momentum=0"],
        "algo.renorm_momentum=0.0 is out of range",
    ),
    # what is neither a flag of Hydra's nor an override, before Hydra's parser answers in its own words
    (["--algo", "sac"], "unknown flag --algo; rlexp takes key=value overrides (algo=sac) and Hydra's flags"),
    (["--seed=3"], "unknown flag --seed=3; rlexp takes key=value overrides (seed=3)"),
    (["--cfg"], "--cfg takes one of job, hydra, all: --cfg job"),
    (
        ["algo.lr", "1e-3"],
        "'algo.lr' is not an override; rlexp takes key=value and group=option (algo.lr=1e-3)",
    ),
    (
        ["seed=0,1"],
        "seed=0,1 has several values: a sweep over them needs --multirun (python -m rlexp --multirun seed=0,1); "
        "a list is written seed=[0,1]",
    ),
    (
        ["train", "algo=sac"],
        "'train' is not an override; rlexp takes key=value and group=option (algo=sac env=",
    ),
]


@pytest.mark.parametrize("overrides,fragment", BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_input_ends_with_one_clear_line(cli, tmp_path, overrides, fragment):
    run_dir = tmp_path / "run"
    res = cli(f"hydra.run.dir={run_dir}", *overrides)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: "), res.stderr
    assert fragment in lines[0], lines[0]
    assert not (run_dir / "config.yaml").exists()  # nothing was written for a rejected run


# `python -m rlexp` with one module made unimportable, as if its package were not installed.
WITHOUT_MODULE = """
import runpy, sys
sys.modules[sys.argv.pop(1)] = None
runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    "module,env_id,package,extra",
    [
        ("Box2D", "LunarLander-v3", "box2d", "box2d"),
        ("Box2D", "BipedalWalker-v3", "box2d", "box2d"),
        ("pygame", "CarRacing-v3", "pygame-ce", "box2d"),
    ],
)
def test_a_missing_optional_package_of_an_env_is_one_line(tmp_path, module, env_id, package, extra):
    """gymnasium's DependencyNotInstalled (Box2D, pygame) becomes one line naming the package and the
    pip command; nothing is left in the run directory."""
    if module != "Box2D" and importlib.util.find_spec("Box2D") is None:
        pytest.skip("Box2D is not installed either, and CarRacing names it first")
    run_dir = tmp_path / "run"
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_MODULE,
            module,
            f"hydra.run.dir={run_dir}",
            "env=gym",
            f"env.id={env_id}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"},
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.splitlines() == [
        f"rlexp: error: env.id={env_id!r} needs the optional package {package}: "
        f'pip install "gymnasium[{extra}]"'
    ]
    assert not run_dir.exists()


@pytest.mark.skipif(importlib.util.find_spec("ale_py") is not None, reason="ale-py is installed")
def test_an_atari_id_without_ale_py_is_one_line(cli, tmp_path):
    run_dir = tmp_path / "run"
    res = cli(f"hydra.run.dir={run_dir}", "env=gym", "env.id=ALE/Pong-v5")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.splitlines() == [
        "rlexp: error: env.id='ALE/Pong-v5' needs the optional package ale-py: "
        'pip install "gymnasium[atari]"'
    ]
    assert not run_dir.exists()


def test_help_and_cfg_job_work_as_in_any_hydra_app(cli):
    res = cli("--help")  # rlexp's own help (tests/test_console.py); Hydra's is --hydra-help
    assert (
        res.returncode == 0
        and "  algo            c51, crossq, ddpg, dqn, *ppo, qrdqn, rainbow, sac, td3, tqc, trpo, vpg"
        in res.stdout
    )
    res = cli("--hydra-help")
    assert res.returncode == 0 and "Hydra (" in res.stdout
    res = cli("--cfg", "job", "algo.epochs=7", "env=Pendulum-v1")
    assert res.returncode == 0 and "epochs: 7" in res.stdout and "id: Pendulum-v1" in res.stdout


@pytest.mark.parametrize("device", ["cuda", "cuda:3"])
def test_a_gpu_this_machine_lacks_is_refused_in_one_line(cli, tmp_path, device):
    import torch

    if torch.cuda.device_count() > (int(device[5:]) if ":" in device else 0):
        pytest.skip(f"this machine has {device}")
    run_dir = tmp_path / "run"
    res = cli(f"hydra.run.dir={run_dir}", f"backend.device={device}")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert lines == [lines[0]] and lines[0].startswith(
        f"rlexp: error: backend.device={device} but this machine has"
    )
    assert "use backend.device=cpu or auto" in lines[0]
    assert not (run_dir / "config.yaml").exists()


def _files(root):
    """Every path under ``root`` with its size and modification time (what a dry run must leave as is)."""
    return (
        {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}
        if root.exists()
        else {}
    )


def test_dry_run_checks_a_command_as_a_run_does_and_writes_nothing(cli, tmp_path):
    """dry_run=true makes every check of a run (types and ranges, the env's spaces) with the same one
    line, says what would run, and writes nothing; a continuation is checked as resume= checks it."""
    run_dir = tmp_path / "run"
    for overrides, fragment in (
        (["algo.epochs=-5"], "algo.epochs=-5 is out of range; use an integer >= 1"),
        (["algo=dqn", "env=Pendulum-v1"], "dqn cannot handle the action space Box(-2.0, 2.0, (1,), float32)"),
        (
            ["algo=qrdqn", "env=Pendulum-v1"],
            "qrdqn cannot handle the action space Box(-2.0, 2.0, (1,), float32)",
        ),
    ):
        res = cli(f"hydra.run.dir={run_dir}", "dry_run=true", *overrides)
        assert res.returncode == 2 and res.stdout == "", (res.stdout, res.stderr)
        assert (
            res.stderr.startswith("rlexp: error: ") and res.stderr.count("\n") == 1 and fragment in res.stderr
        )
        assert not run_dir.exists()
    res = cli(f"hydra.run.dir={run_dir}", "dry_run=true", "algo.epochs=3", "algo.steps_per_epoch=200")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines() == [
        "Dry run: the checks passed; would train ppo on CartPole-v1 (network mlp [64, 64] tanh, torch on cpu, "
        f"1 process x 1 env, seed 0) for 3 epochs x 200 env steps = 600 steps in {run_dir}; nothing was written"
    ]
    assert not run_dir.exists()
    # a run that exists: continuing it is checked (a changed key is refused), nothing in it changes
    res = cli(f"hydra.run.dir={run_dir}", "algo.epochs=1", "algo.steps_per_epoch=200", "logger.console=quiet")
    assert res.returncode == 0, res.stderr
    before = _files(run_dir)
    res = cli(f"resume={run_dir}", "algo.epochs=3", "dry_run=true")
    assert res.returncode == 0 and res.stdout.strip().endswith(
        f"in {run_dir} from 1 epoch to 3; nothing was written"
    ), res.stdout
    res = cli(f"hydra.run.dir={run_dir}", "algo.epochs=2", "algo.steps_per_epoch=200", "dry_run=true")
    assert res.returncode == 2 and "already holds a different run (algo.epochs: 1 there, 2 now)" in res.stderr
    assert _files(run_dir) == before


def test_a_new_runs_directory_names_the_algo_option_and_the_env_id_in_one_part(cli):
    """algo=rainbow runs dqn: its directory and its dry run say rainbow; MinAtar/Breakout-v1 is one
    directory name (MinAtar-Breakout-v1), not a folder MinAtar with the game inside."""
    res = cli("algo=rainbow", "env=minatar", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "would train rainbow (dqn) on MinAtar/Breakout-v1 (network minatar_cnn [128] relu," in res.stdout
    run_dir = Path(res.stdout.split(" steps in ")[1].split("; nothing was written")[0])
    assert run_dir.parent.parent.name == "outputs"  # outputs/<date>/<one part>
    assert re.fullmatch(r"\d\d-\d\d-\d\d_rainbow_MinAtar-Breakout-v1_s0_[0-9a-f]{4}", run_dir.name), run_dir
    # a setting the run would not use as given: the dry run says so, as the run would before its first epoch
    res = cli("algo=rainbow", "algo.eps_start=0.5", "dry_run=true")
    assert res.returncode == 0 and len(res.stdout.splitlines()) == 2, res.stdout + res.stderr
    assert res.stdout.startswith("algo.noisy=true explores by its noisy layers: epsilon-greedy is off")


def test_the_dry_run_names_the_networks_that_train(cli):
    """The dry run's network: an encoder without dense layers has no empty list after it, and CrossQ's
    critics, whose width is a key of their own (2048 with tuned=crossq), are named beside the policy's."""
    res = cli("algo=crossq", "tuned=crossq", "env=HalfCheetah-v4", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "(network mlp [256, 256] relu, critics [2048, 2048], torch on cpu," in res.stdout, res.stdout
    res = cli("algo=crossq", "env=Pendulum-v1", "algo.critic_width=null", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "(network mlp [256, 256] relu, torch" in res.stdout, res.stdout
    if importlib.util.find_spec("ale_py") is not None:  # the Nature CNN: its 512 units are the encoder's
        res = cli("algo=dqn", "env=atari", "dry_run=true")
        assert res.returncode == 0, res.stderr
        assert "(network nature_cnn relu, torch" in res.stdout, res.stdout


def test_a_run_of_an_env_preset_that_is_its_own_task_is_named_by_the_preset(cli):
    """env=PendulumNoVel-v1 is Pendulum-v1 with its velocity masked: another task under the same id. Its run
    directory and dry run name the preset (as plot and compare do), so its runs and Pendulum-v1's are told
    apart; with env.id= given, the id is the task again."""
    res = cli("env=PendulumNoVel-v1", "dry_run=true")
    assert res.returncode == 0, res.stderr
    assert "would train ppo on PendulumNoVel-v1 (env.id Pendulum-v1, network mlp" in res.stdout
    run_dir = Path(res.stdout.split(" steps in ")[1].split("; nothing was written")[0])
    assert re.fullmatch(r"\d\d-\d\d-\d\d_ppo_PendulumNoVel-v1_s0_[0-9a-f]{4}", run_dir.name), run_dir
    res = cli("env=PendulumNoVel-v1", "env.id=Acrobot-v1", "dry_run=true")
    assert res.returncode == 0 and "would train ppo on Acrobot-v1 (network" in res.stdout, res.stdout
    assert "_ppo_Acrobot-v1_s0_" in res.stdout


def test_a_dry_run_of_a_sweep_checks_every_job_and_lists_them(cli, tmp_path):
    sweep = tmp_path / "sweep"
    res = cli("--multirun", f"hydra.sweep.dir={sweep}", "dry_run=true", "seed=0,1", "algo.epochs=1,-1")
    assert res.returncode == 2 and not sweep.exists()
    assert res.stderr.strip() == (
        "rlexp: error: sweep job 1 (seed=0 algo.epochs=-1): algo.epochs=-1 is out of range; use "
        "an integer >= 1; nothing was started"
    )
    res = cli("--multirun", f"hydra.sweep.dir={sweep}", "dry_run=true", "seed=0,1", "algo.epochs=1,2")
    assert res.returncode == 0 and not sweep.exists(), res.stderr
    assert res.stdout.splitlines() == [
        f"Dry run: the checks of all 4 jobs passed; the sweep would start 4 runs in {sweep}:",
        "  job 0: seed=0 algo.epochs=1",
        "  job 1: seed=0 algo.epochs=2",
        "  job 2: seed=1 algo.epochs=1",
        "  job 3: seed=1 algo.epochs=2",
        "nothing was written",
    ]
