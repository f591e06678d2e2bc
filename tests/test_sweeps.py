"""Sweeps: every job checked before any starts, experiment presets, and the user's own presets."""

from __future__ import annotations

from tests.conftest import composed, run_cli


def test_a_bad_value_in_one_combination_stops_the_sweep_before_it_starts(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_cli("--multirun", f"hydra.sweep.dir={sweep}", "seed=0,1", "algo.lr=1e-3,-1", "algo.epochs=1")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip() == (
        "rlexp: error: sweep job 1 (seed=0 algo.lr=-1 algo.epochs=1): algo.lr=-1.0 is out of range for ppo; "
        "a learning rate must be > 0; nothing was started"
    )
    assert not sweep.exists()


def test_an_env_that_does_not_fit_one_combination_is_found_first(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_cli("--multirun", f"hydra.sweep.dir={sweep}", "algo=sac", "env=Pendulum-v1,CartPole-v1")
    assert res.returncode == 2 and "sweep job 1 (algo=sac env=CartPole-v1)" in res.stderr
    assert "sac cannot handle the action space Discrete(2)" in res.stderr and not sweep.exists()


def test_spinning_up_benchmark_presets():
    on = composed("+experiment=spinup_bench_onpolicy", "algo=trpo")
    assert (on.algo.name, on.network.hidden_sizes, on.network.activation) == ("trpo", [64, 32], "tanh")
    assert on.algo.steps_per_epoch * on.algo.epochs == 3_000_000
    off = composed("+experiment=spinup_bench_offpolicy", "algo=td3")
    assert (off.algo.name, off.network.hidden_sizes, off.network.activation) == ("td3", [256, 256], "relu")
    assert off.algo.steps_per_epoch * off.algo.epochs == 3_000_000 and off.algo.batch_size == 100


def test_a_preset_sweeps_five_envs_and_ten_seeds(tmp_path):
    res = run_cli("+experiment=spinup_bench_onpolicy", "--cfg", "hydra", "--package", "hydra.sweeper.params")
    assert res.returncode == 0, res.stderr
    assert "env: HalfCheetah-v4,Hopper-v4,Walker2d-v4,Swimmer-v4,Ant-v4" in res.stdout
    assert "seed: range(0,100,10)" in res.stdout
    # The preset's sweep reaches the sweeper (its first job is checked and named), without training.
    res = run_cli(
        "--multirun",
        f"hydra.sweep.dir={tmp_path / 's'}",
        "+experiment=spinup_bench_onpolicy",
        "hydra.sweeper.params.seed=90",
        "algo.epochs=-1",
    )
    assert res.returncode == 2
    assert (
        "sweep job 0 (env=HalfCheetah-v4 seed=90 +experiment=spinup_bench_onpolicy algo.epochs=-1)"
        in res.stderr
    )


def test_users_keep_their_own_presets_outside_the_repository(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /env: Pendulum-v1\n  - override /algo: td3\n"
        "algo:\n  act_noise: 0.3\n"
    )
    res = run_cli(f"hydra.searchpath=[file://{tmp_path}]", "+experiment=mine", "--cfg", "job")
    assert res.returncode == 0, res.stderr
    assert "name: td3" in res.stdout and "act_noise: 0.3" in res.stdout and "id: Pendulum-v1" in res.stdout


def test_the_slurm_launcher_without_slurm_is_one_line_and_writes_nothing(tmp_path):
    """On a machine without SLURM's commands (PATH without srun and sbatch), hydra/launcher=slurm stops
    before the sweep directory (multirun.yaml) is written. No SLURM command is run."""
    import os
    import sys

    sweep = tmp_path / "sweep"
    empty = tmp_path / "bin"
    empty.mkdir()
    path = f"{os.path.dirname(sys.executable)}:{empty}"  # this Python only: no srun, whatever the machine has
    for sweeper in ("rlexp", "optuna"):
        extra = ["algo.lr=interval(1e-4,1e-3)"] if sweeper == "optuna" else ["seed=0,1"]
        res = run_cli(
            "--multirun", f"hydra.sweep.dir={sweep}", "hydra/launcher=slurm", f"hydra/sweeper={sweeper}",
            "algo.epochs=1", *extra, env={"PATH": path},
        )  # fmt: skip
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.splitlines() == [
            "rlexp: error: hydra/launcher=slurm submits the jobs to SLURM, but this machine has no srun on its "
            "PATH (no SLURM client); run the sweep on a SLURM login node, or drop hydra/launcher=slurm to run "
            "the jobs here; nothing was started"
        ]
        assert not sweep.exists()
