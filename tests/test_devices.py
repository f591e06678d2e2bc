"""backend.device is where a run computes, not what it computes.

Everywhere (CI included): a run that a GPU trained is watched, evaluated and continued
(``resume=RUN backend.device=cpu``) on a machine without one, from the checkpoint the GPU wrote.

Where torch sees a CUDA GPU (skipped elsewhere; docs/benchmarks.md, "On a GPU", says where they
ran): every torch learner computes on the GPU what it computes on the CPU (from the same weights,
on the same batch and pre-drawn noise, to float32 tolerance), a CNN's updates give the same numbers
every time, every algorithm (and a CNN) trains through the CLI, a run resumes exactly on the GPU,
two ranks share one GPU, and a run moves between the GPU and the CPU at a resume.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.checkpoint import latest_checkpoint, load_torch, save_torch
from rlexp.seeding import RankSeeds
from tests import test_dqn, test_images, test_parity, test_recurrent
from tests.conftest import composed, run_cli, train
from tests.test_resume import OFF_POLICY, ON_POLICY, TIMING, assert_resumes_exactly, cut_back

CUDA = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not CUDA, reason="no CUDA GPU")
SAC = ("algo=sac", *OFF_POLICY, "algo.save_freq=1")
# what torch.cuda's generator saves (seed and offset, 8 bytes each); a CPU generator saves 5,056 bytes
CUDA_RNG_STATE = torch.tensor(list(range(16)), dtype=torch.uint8)


def as_if_a_gpu_trained(run_dir: Path) -> None:
    """Make a CPU run look like one that trained with backend.device=cuda: the config says so and
    the newest checkpoint holds a CUDA generator's state (its tensors load onto the CPU either way)."""
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("device: cpu", "device: cuda"))
    path = latest_checkpoint(run_dir)[1]
    state = load_torch(path)
    state["learner"]["torch_rng"] = CUDA_RNG_STATE
    save_torch(path, state)


def progress(run_dir: Path) -> pd.DataFrame:
    return pd.read_table(run_dir / "progress.txt").drop(columns=TIMING)


# --- on any machine ---------------------------------------------------------------------------------
def test_a_gpu_run_plays_and_continues_on_a_machine_without_one(tmp_path):
    gpu_run = tmp_path / "gpu_run"
    train(gpu_run, *SAC, "algo.epochs=2")
    as_if_a_gpu_trained(gpu_run)
    copy = tmp_path / "copy"
    shutil.copytree(gpu_run, copy)

    played = run_cli(str(gpu_run), "-n", "2", "-l", "20", "-nr", "-d", module="rlexp.test_policy")
    assert played.returncode == 0, played.stderr[-2000:]
    assert played.stdout.count("Episode ") == 2

    if not CUDA:  # it continues where it trained unless told otherwise, and says how in one line
        res = run_cli(f"resume={gpu_run}", "algo.epochs=3")
        assert res.returncode == 2 and res.stderr.strip().splitlines() == [
            "rlexp: error: backend.device=cuda but this machine has no CUDA GPU; use backend.device=cpu or auto"
        ]
    for run_dir in (gpu_run, copy):
        res = run_cli(f"resume={run_dir}", "algo.epochs=3", "backend.device=cpu")
        assert res.returncode == 0, res.stderr[-2000:]
        assert "device: cpu" in (run_dir / "config.yaml").read_text()  # what it trains with from now on
        assert len(progress(run_dir)) == 3
    # the learner's random stream goes on from a seed drawn from the saved CUDA state: every time alike
    pd.testing.assert_frame_equal(progress(gpu_run), progress(copy), check_exact=True)


# --- on a GPU ---------------------------------------------------------------------------------------
def device_pair(algo: str, obs_space: spaces.Space, act_space: spaces.Space, *overrides: str):
    """(CPU learner, CUDA learner) of one config: the same initial weights (both are built on the CPU
    from the ``init`` stream, then moved)."""
    cfg = composed(f"algo={algo}", "backend=torch", *overrides)
    cpu = ALGOS[algo].learner_class("torch")(obs_space, act_space, cfg, RankSeeds(0))
    gpu_cfg = dataclasses.replace(cfg, backend=dataclasses.replace(cfg.backend, device="cuda"))
    gpu = ALGOS[algo].learner_class("torch")(obs_space, act_space, gpu_cfg, RankSeeds(0))
    assert all(p.is_cuda for m in gpu.modules().values() for p in m.parameters())
    assert_same_params(cpu, gpu, rtol=0, atol=0)
    return cpu, gpu


def assert_same_params(cpu, gpu, rtol: float = test_parity.RTOL, atol: float = test_parity.ATOL) -> None:
    for name, module in cpu.modules().items():
        theirs = gpu.modules()[name].parameters()
        for i, (p, q) in enumerate(zip(module.parameters(), theirs, strict=True)):
            np.testing.assert_allclose(
                p.detach().numpy(), q.detach().cpu().numpy(), rtol=rtol, atol=atol, err_msg=f"{name}[{i}]"
            )


@pytest.fixture
def exact_convolutions():
    """cuDNN's convolutions in float32 rather than TF32 (torch's default for them), for the CNN cases."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


ON_POLICY_CASES = {
    "vpg": ("vpg", []),
    "ppo": ("ppo", ["algo.target_kl=0.002", "algo.pi_lr=1e-3"]),
    "ppo-minibatch": ("ppo", ["algo.num_minibatches=4", "algo.update_epochs=3"]),
    "trpo": ("trpo", []),
    "npg": ("trpo", ["algo.variant=npg"]),
}


@needs_gpu
@pytest.mark.parametrize("space", [test_parity.BOX, test_parity.DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("case", list(ON_POLICY_CASES))
def test_on_policy_updates_on_the_gpu_equal_the_cpus(case, space):
    algo, overrides = ON_POLICY_CASES[case]
    cpu, gpu = device_pair(
        algo, test_parity.OBS, space, "network.hidden_sizes=[32,32]", "algo.train_v_iters=20", *overrides
    )
    batch = test_parity.on_policy_batch(cpu, space)
    sc, sg = cpu.update(dict(batch)), gpu.update(dict(batch))
    # TRPO's conjugate gradient amplifies float32 rounding (tests/test_parity.py gives the measurements)
    rtol, atol = (
        (1e-3, 2e-4) if algo == "trpo" and space is test_parity.BOX else (test_parity.RTOL, test_parity.ATOL)
    )
    test_parity.assert_same_stats(sc, sg, rtol=rtol)
    assert_same_params(cpu, gpu, atol=atol)
    for key in ("StopIter", "BacktrackIters"):
        assert sc.get(key) == sg.get(key)


@needs_gpu
@pytest.mark.parametrize("algo,overrides", [("ddpg", []), ("td3", []), ("sac", []), ("sac", ["algo.autotune_alpha=true"])],
                         ids=["ddpg", "td3", "sac", "sac-autotune"])  # fmt: skip
def test_off_policy_updates_and_acting_on_the_gpu_equal_the_cpus(algo, overrides):
    cpu, gpu = device_pair(algo, test_parity.OBS, test_parity.BOX, "network.hidden_sizes=[32,32]", *overrides)
    obs = np.random.default_rng(5).uniform(-1, 1, 5).astype(np.float32)
    noise = {"td3": ("target_noise",), "sac": ("noise", "noise2")}.get(algo, ())
    for _ in range(3):  # TD3: the policy and the targets move on updates 0 and 2 only
        batch = {k: v for k, v in test_parity.off_policy_batch().items()
                 if k in ("obs", "obs2", "act", "rew", "done", *noise)}  # fmt: skip
        sc, sg = cpu.update(dict(batch)), gpu.update(dict(batch))
        test_parity.assert_same_stats(sc, sg)
        assert_same_params(cpu, gpu)
        np.testing.assert_allclose(gpu.act(obs), cpu.act(obs), rtol=test_parity.RTOL, atol=test_parity.ATOL)


@needs_gpu
@pytest.mark.parametrize("option", list(test_dqn.OPTIONS))
def test_dqn_updates_on_the_gpu_equal_the_cpus_per_option(option):
    cpu, gpu = device_pair(
        "dqn", test_dqn.OBS, test_dqn.ACTIONS, "network.hidden_sizes=[32,32]", *test_dqn.OPTIONS[option]
    )
    obs = np.random.default_rng(5).uniform(-1, 1, 5).astype(np.float32)
    for step in range(3):
        batch = test_dqn.batch_of(seed=step, weights=cpu.algo.prioritized)
        sc, sg = cpu.update(dict(batch)), gpu.update(dict(batch))
        test_parity.assert_same_stats(sc, sg)
        for lrn in (cpu, gpu):
            lrn.advance(10_000 * (step + 1))  # a target update each time
        assert_same_params(cpu, gpu)
        np.testing.assert_allclose(
            gpu.q_values(obs), cpu.q_values(obs), rtol=test_parity.RTOL, atol=test_parity.ATOL
        )


@needs_gpu
@pytest.mark.parametrize("algo,overrides,space", [
    ("ppo", ["network.recurrent=lstm", "algo.num_minibatches=3", "algo.update_epochs=2"], test_recurrent.BOX),
    ("ppo", ["network.recurrent=gru", "network.recurrent_critic=shared", "algo.train_pi_iters=5"], test_recurrent.DISCRETE),
    ("trpo", ["network.recurrent=gru"], test_recurrent.BOX),
], ids=["ppo-lstm-minibatch", "ppo-gru-shared", "trpo-gru"])  # fmt: skip
def test_recurrent_updates_on_the_gpu_equal_the_cpus(algo, overrides, space):
    cpu, gpu = device_pair(algo, test_recurrent.OBS, space, "network.hidden_sizes=[16]", "network.recurrent_size=8",
                           "env.num_envs=3", "algo.train_v_iters=5", *overrides)  # fmt: skip
    batch = test_recurrent.sequences_batch(cpu, space)
    sc, sg = cpu.update(dict(batch)), gpu.update(dict(batch))
    test_parity.assert_same_stats(sc, sg, rtol=1e-3)
    assert_same_params(cpu, gpu, rtol=1e-3, atol=1e-4)


@needs_gpu
@pytest.mark.parametrize("algo", ["ppo", "sac", "dqn"])
def test_cnn_updates_and_acting_on_the_gpu_equal_the_cpus(algo, exact_convolutions):
    act_space = test_images.BOX if algo == "sac" else test_images.DISCRETE
    network = "nature_cnn_256x256" if algo == "sac" else "nature_cnn"
    few = ("algo.train_pi_iters=3", "algo.train_v_iters=3") if algo == "ppo" else ()
    cpu, gpu = device_pair(
        algo, test_images.IMAGE, act_space, f"network={network}", "network.hidden_sizes=[16]", *few
    )
    obs = test_images.images(4, seed=7)
    for o in obs:
        np.testing.assert_allclose(
            gpu.act(o, deterministic=True), cpu.act(o, deterministic=True), rtol=1e-4, atol=1e-5
        )
    if algo == "ppo":
        batch = test_images.on_policy_batch(cpu)
    elif algo == "sac":
        batch = test_images.off_policy_batch(noise=True, noise2=True)
    else:
        batch = {
            **test_images.off_policy_batch(),
            "act": np.arange(8) % 3,
            "discount": np.full(8, 0.99, np.float32),
        }
    sc, sg = cpu.update(dict(batch)), gpu.update(dict(batch))
    test_parity.assert_same_stats(sc, sg, rtol=1e-3)
    assert_same_params(cpu, gpu, rtol=1e-3, atol=1e-4)


def nature_cnn_twins(device: str, steps: int) -> list[torch.Tensor]:
    """Two DQN learners of the Nature CNN on Atari's shapes (4 x 84 x 84 frames, batch 32) built from one
    seed on ``device``, ``steps`` gradient steps on the same batches: each one's parameters."""
    cfg = composed("algo=dqn", "tuned=dqn", "env=atari", "network=nature_cnn", f"backend.device={device}")
    obs_space, batches = spaces.Box(0, 255, (4, 84, 84), np.uint8), []
    rng = np.random.default_rng(0)
    for _ in range(steps):
        frames = rng.integers(0, 256, (2, 32, 4, 84, 84), dtype=np.uint8)
        batches.append({
            "obs": frames[0], "obs2": frames[1], "act": rng.integers(0, 6, 32),
            "rew": rng.normal(size=32).astype(np.float32), "done": (rng.uniform(size=32) < 0.1).astype(np.float32),
            "discount": np.full(32, 0.99, np.float32),
        })  # fmt: skip
    params = []
    for _ in range(2):
        lrn = ALGOS["dqn"].learner_class("torch")(obs_space, spaces.Discrete(6), cfg, RankSeeds(0))
        for batch in batches:
            lrn.update(dict(batch))
        params.append(lrn.q_flat.detach().cpu())
    return params


@needs_gpu
def test_cnn_updates_on_the_gpu_give_the_same_numbers_every_time():
    """cuDNN's default convolution algorithms sum in any order (atomics): two learners from one seed
    drifted apart within a gradient step on Atari's shapes. rlexp asks for deterministic ones."""
    first, second = nature_cnn_twins("cuda", 20)
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert torch.equal(first, second), (first - second).abs().max()


@needs_gpu
@pytest.mark.parametrize("algo", ["dqn", "sac"])
def test_a_cnn_run_on_the_gpu_resumes_exactly(tmp_path, algo):
    """The CLI's whole run with a CNN on cuda: stopped after one epoch and continued, it ends bit for bit
    as the uninterrupted run (the replay's uint8 images and cuDNN's convolutions included)."""
    env = test_images.PIXELS if algo == "dqn" else test_images.CONTINUOUS
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, f"algo={algo}", *env, *test_images.OFF_POLICY, "backend.device=cuda", "algo.epochs=3",
          "algo.save_freq=1")  # fmt: skip
    assert_resumes_exactly(whole, part, 1, "allow_env_import=true")  # tests.envs is not installed


NO_PI_ITERS = tuple(arg for arg in ON_POLICY if not arg.startswith("algo.train_pi_iters"))  # PPO's key
TINY = {
    "vpg": ("algo=vpg", *NO_PI_ITERS),
    "trpo": ("algo=trpo", *NO_PI_ITERS),
    "ppo": ("algo=ppo", *ON_POLICY),
    "ppo-lstm": ("algo=ppo", "env=CartPoleNoVel-v1", "network.recurrent=lstm", "network.recurrent_size=16",
                 "algo.steps_per_epoch=400", "algo.num_minibatches=4", "algo.update_epochs=2"),
    "ddpg": ("algo=ddpg", *OFF_POLICY),
    "td3": ("algo=td3", *OFF_POLICY),
    "sac": SAC,
    "dqn": ("algo=dqn", "env=CartPole-v1", "algo.steps_per_epoch=400", "algo.target_update_every=200",
            "algo.num_test_episodes=1", "network.hidden_sizes=[32,32]", "algo.keep_checkpoints=null"),
    "rainbow": ("algo=rainbow", "env=CartPole-v1", "algo.steps_per_epoch=400", "algo.target_update_every=200",
                "algo.num_test_episodes=1", "network.hidden_sizes=[32,32]", "algo.keep_checkpoints=null"),
}  # fmt: skip


@needs_gpu
@pytest.mark.parametrize("case", list(TINY))
def test_every_algorithm_trains_on_the_gpu_and_resumes_exactly(tmp_path, case):
    """Three epochs on cuda; the same run stopped after one and continued ends bit for bit alike; the
    provenance names the GPU."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *TINY[case], "backend.device=cuda", "algo.epochs=3", "algo.save_freq=1")
    assert len(progress(whole)) == 3
    placement = json.loads((whole / "provenance.json").read_text())["placement"]
    assert [row["device"] for row in placement] == ["cuda:0"]
    assert_resumes_exactly(whole, part, 1)


@needs_gpu
@pytest.mark.mpi
def test_two_ranks_share_one_gpu_and_resume_exactly(tmp_path):
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *SAC, "backend.device=cuda", "comm.procs=2", "comm.oversubscribe=true", "algo.epochs=3")
    placement = json.loads((whole / "provenance.json").read_text())["placement"]
    assert [row["device"] for row in placement] == ["cuda:0", "cuda:0"]
    assert_resumes_exactly(whole, part, 1)


@needs_gpu
def test_a_run_moves_between_the_gpu_and_the_cpu_at_a_resume(tmp_path):
    """GPU -> CPU and CPU -> GPU: each continues (its learner stream from a seed drawn from the saved
    one), the same way from the same checkpoint, and its config then names its new device."""
    for first, then in (("cuda", "cpu"), ("cpu", "cuda")):
        whole = tmp_path / f"{first}_whole"
        train(whole, *SAC, f"backend.device={first}", "algo.epochs=2")
        moved = [tmp_path / f"{first}_to_{then}_{i}" for i in range(2)]
        for run_dir in moved:
            cut_back(whole, run_dir, 1)
            res = run_cli(f"resume={run_dir}", f"backend.device={then}")
            assert res.returncode == 0, res.stderr[-2000:]
            assert f"device: {then}" in (run_dir / "config.yaml").read_text()
        pd.testing.assert_frame_equal(progress(moved[0]), progress(moved[1]), check_exact=True)
        played = run_cli(str(moved[0]), "-n", "1", "-l", "20", "-nr", "-d", module="rlexp.test_policy",
                         env={"CUDA_VISIBLE_DEVICES": ""})  # fmt: skip
        assert played.returncode == 0, played.stderr[-2000:]
