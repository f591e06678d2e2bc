"""The TensorFlow backend end to end, and the separation of the two backends."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlexp.checkpoint import list_checkpoints

from .conftest import ROOT, run_cli, train

ISOLATION = """
import sys
from omegaconf import OmegaConf
from tests.conftest import composed
from rlexp.algos import ALGOS
from rlexp.seeding import RankSeeds
from rlexp.worker import prepare_backend
import gymnasium as gym
for algo in ("ppo", "sac"):
    cfg = composed(f"algo={algo}", "backend={backend}", "env=Pendulum-v1", "network.hidden_sizes=[8]")
    prepare_backend(cfg)
    env = gym.make("Pendulum-v1")
    ALGOS[algo].learner_class("{backend}")(env.observation_space, env.action_space, cfg, RankSeeds(0))
assert "{other}" not in sys.modules, "{backend} run imported {other}"
print("isolated")
"""


@pytest.mark.parametrize("backend,other", [("torch", "tensorflow"), ("tf", "torch")])
def test_a_backend_never_imports_the_other(backend, other):
    script = ISOLATION.replace("{backend}", backend).replace("{other}", other)
    res = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and "isolated" in res.stdout, res.stderr[-2000:]
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import rlexp, rlexp.__main__, rlexp.launch, rlexp.algos.on_policy,"
            " rlexp.algos.off_policy, sys; assert not {'torch', 'tensorflow'} & set(sys.modules)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr[-2000:]


def test_tf_run_writes_npz_checkpoints_that_test_policy_reads(tmp_path):
    run_dir = tmp_path / "run"
    df = train(
        run_dir,
        "backend=tf",
        "algo=sac",
        "env=Pendulum-v1",
        "algo.epochs=2",
        "algo.steps_per_epoch=200",
        "algo.start_steps=100",
        "algo.update_after=100",
        "algo.num_test_episodes=1",
    )
    assert "AverageTestEpRet" in df and len(df) == 2
    ckpts = list_checkpoints(run_dir)
    assert [p.suffix for p in ckpts.values()] == [".npz", ".npz"]
    for det in ([], ["-d"]):
        res = run_cli(str(run_dir), "-n", "2", "-nr", *det, module="rlexp.test_policy")
        assert res.returncode == 0 and res.stdout.count("Episode ") == 2, res.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.parametrize(
    "algo,overrides,column",
    [
        ("ppo", ["env=CartPole-v1", "algo.epochs=8"], "AverageEpRet"),
        (
            "sac",
            [
                "env=Pendulum-v1",
                "algo.steps_per_epoch=1000",
                "algo.start_steps=1000",
                "algo.update_after=500",
                "algo.num_test_episodes=4",
                "network.hidden_sizes=[64,64]",
                "network.activation=relu",
                "algo.epochs=6",
            ],
            "AverageTestEpRet",
        ),
    ],
    ids=["ppo", "sac"],
)
def test_tf_two_ranks_run_and_improve(tmp_path, algo, overrides, column):
    df = train(tmp_path / "run", "backend=tf", f"algo={algo}", "comm.procs=2", *overrides, timeout=300)
    first, last = df[column].iloc[0], df[column].iloc[-1]
    assert last - first > 0.5 * abs(first), df[column].round(1).tolist()


def test_jit_compile_needs_one_process(cli, tmp_path):
    res = cli(f"hydra.run.dir={tmp_path / 'r'}", "backend=tf", "backend.jit_compile=true", "comm.procs=2")
    assert res.returncode == 2 and "backend.jit_compile=true works with comm.procs=1 only" in res.stderr
