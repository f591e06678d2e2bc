"""Sweeps: every job checked before any starts, experiment presets, and the user's own presets."""

from __future__ import annotations

import pytest
import yaml

from rlexp.config import normalize_overrides
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


def test_a_sweep_over_algorithms_takes_keys_that_only_they_have(tmp_path):
    """Hydra composes a sweep's master config with the group's default option (ppo), which has no
    update_after: rlexp sets a swept group's keys per job, and job directories name the swept key only."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", f"hydra.sweep.dir={sweep}", "algo=dqn,c51", "algo.update_after=150", "algo.epochs=1",
        "algo.steps_per_epoch=200", "algo.batch_size=16", "logger.console=quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["0_algo=dqn", "1_algo=c51"]
    for job, distributional in (("0_algo=dqn", "null"), ("1_algo=c51", "c51")):
        config = (sweep / job / "config.yaml").read_text()
        assert "update_after: 150" in config and f"distributional: {distributional}" in config
    # an option without the key is found before any job starts, and named
    res = run_cli(
        "--multirun", f"hydra.sweep.dir={tmp_path / 'bad'}", "algo=dqn,ppo", "algo.update_after=150"
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.startswith("rlexp: error: sweep job 1 (algo=ppo algo.update_after=150): unknown key")
    assert res.stderr.strip().endswith("; nothing was started") and not (tmp_path / "bad").exists()


def test_a_swept_env_id_with_a_namespace_is_one_job_directory(tmp_path):
    """env.id=MinAtar/Breakout-v1,... names each job's directory without a folder per namespace."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", f"hydra.sweep.dir={sweep}", "algo=dqn", "env=minatar",
        "env.id=MinAtar/Breakout-v1,MinAtar/Freeway-v1", "algo.epochs=1", "algo.steps_per_epoch=100",
        "algo.update_after=50", "algo.batch_size=8", "logger.console=quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == ["0_env.id=MinAtar-Breakout-v1", "1_env.id=MinAtar-Freeway-v1"]
    assert "id: MinAtar/Freeway-v1" in (sweep / jobs[1] / "config.yaml").read_text()


def test_a_sweep_over_a_groups_options_sets_the_plain_keys_per_job():
    """algo=dqn,c51 or tuned=dqn,qrdqn (which selects the algo): every plain dotted key is set per job;
    additions, Hydra's keys, root keys and sweeps without a swept group stay as they are."""
    args = [
        "--multirun", "algo=dqn,c51", "algo.update_after=150", "algo.x='a,b'", "+algo.y=1", "env.id=E",
        "hydra.sweep.dir=D", "seed=0",
    ]  # fmt: skip
    assert normalize_overrides(args) == [
        "--multirun", "algo=dqn,c51", "algo.update_after=choice(150)", "algo.x=choice('a,b')", "+algo.y=1",
        "env.id=choice(E)", "hydra.sweep.dir=D", "seed=0",
    ]  # fmt: skip
    tuned = ["-m", "tuned=dqn,qrdqn", "algo.update_after=150"]
    assert normalize_overrides(tuned) == ["-m", "tuned=dqn,qrdqn", "algo.update_after=choice(150)"]
    assert normalize_overrides(args[1:]) == args[1:]  # one run: nothing swept
    seeds = ["--multirun", "seed=0,1", "algo.update_after=150"]
    assert normalize_overrides(seeds) == seeds  # no group swept: Hydra's master config has the keys
    other = [*args, "hydra/sweeper=basic"]
    assert normalize_overrides(other) == other  # a sweeper not rlexp's may read a one-value choice otherwise


def test_an_optuna_search_over_algorithms_takes_keys_only_they_have(tmp_path):
    """rlexp's Optuna sweeper gives every trial the one value of such a key (not a search dimension)."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={sweep}",
        "algo=dqn,c51", "algo.update_after=150", "algo.lr=interval(1e-4,1e-3)", "algo.epochs=1",
        "algo.steps_per_epoch=200", "algo.batch_size=16", "logger.console=quiet",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert [sorted(t["params"]) for t in results["trials"]] == [["algo", "algo.lr"]] * 2
    for trial in results["trials"]:
        (run,) = sweep.glob(f"{trial['number']}_*")
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["algo"]["update_after"] == 150 and "update_after" not in run.name


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


def test_a_sweep_ends_with_its_summary_and_a_failed_job_does_not_stop_the_others(tmp_path):
    """Job 0 fails with a user error after training (score.column names no column); job 1 still runs.
    The sweep ends with its directory, the counts and the commands for all its runs (the jobs print no
    commands of their own), then one line naming the failed job, with that job's exit status."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", f"hydra.sweep.dir={sweep}", "score.column=Foo,AverageEpRet", "algo.epochs=1",
        "algo.steps_per_epoch=200", "logger.console=quiet",
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert (
        sweep / "1_score.column=AverageEpRet" / "progress.txt"
    ).is_file()  # the job after the failed one ran
    assert "watch it:" not in res.stdout and "plot it:" not in res.stdout.split("Sweep ended")[0]
    assert res.stdout.splitlines()[-3:] == [
        f"Sweep ended: {sweep} (2 runs: 1 finished, 1 failed)",
        f"  plot it:     python -m rlexp.plot {sweep} --table",
        f"  compare it:  python -m rlexp.compare {sweep}",
    ]
    errors = res.stderr.splitlines()
    assert (
        errors[0].startswith("rlexp: error: job 0 (score.column=Foo ") and "score.column='Foo'" in errors[0]
    )
    assert errors[1:] == ["rlexp: error: 1 of the sweep's 2 runs failed (job 0; each one's line is above)"]


def test_jobs_that_run_at_once_label_every_line_and_print_whole_tables(tmp_path):
    """hydra/launcher=parallel: each line of a job (its tables, its closing line) starts with [job N], and
    an epoch table is never cut by the other job's lines. The sweep's summary is its own."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "hydra/launcher=parallel", f"hydra.sweep.dir={sweep}", "seed=0,1", "algo.epochs=2",
        "algo.steps_per_epoch=200", "algo.train_pi_iters=2", "algo.train_v_iters=2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[-3:] == [
        f"Sweep finished: {sweep} (2 runs: 2 finished)",
        f"  plot it:     python -m rlexp.plot {sweep} --table",
        f"  compare it:  python -m rlexp.compare {sweep}",
    ]
    jobs = [ln for ln in lines[:-3] if "[HYDRA]" not in ln]
    assert jobs and all(ln.startswith(("[job 0] ", "[job 1] ")) for ln in jobs), jobs
    for job in (0, 1):
        assert f"[job {job}] Run finished: {sweep / f'{job}_seed={job}'}" in jobs
    tables = 0
    for i, line in enumerate(jobs):
        if line.split("] ", 1)[1].startswith("|") and "Epoch |" in line:  # a table's first row
            prefix = line.split("] ", 1)[0]
            body = jobs[i - 1 : i + 26]  # its top rule, its rows and its bottom rule
            assert all(ln.startswith(prefix + "] ") for ln in body), body
            assert body[0].endswith("-" * 30) and body[-1].endswith("-" * 30), body
            tables += 1
    assert tables == 4  # 2 jobs x 2 epochs


@pytest.mark.mpi
def test_the_mpi_ranks_lines_of_a_parallel_job_are_labelled_too(tmp_path):
    """Rank 0 prints the epochs of a comm.procs=2 run through mpiexec: the job passes its lines on with
    its label."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "hydra/launcher=parallel", "hydra.launcher.n_jobs=1", f"hydra.sweep.dir={sweep}",
        "seed=0", "comm.procs=2", "algo.epochs=2", "algo.steps_per_epoch=200", "logger.console=line",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    epochs = [ln for ln in res.stdout.splitlines() if "Epoch " in ln and "TotalEnvInteracts" in ln]
    assert len(epochs) == 2 and all(ln.startswith("[job 0] Epoch ") for ln in epochs), res.stdout
    assert f"[job 0] Logging data to {sweep / '0'}/progress.txt" in res.stdout.splitlines()
