"""The Python API (rlexp.train / rlexp.load / Run / Policy), the score every job returns, and the
Optuna sweeper (hydra/sweeper=optuna)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import rlexp
from rlexp.schema import ScoreConfig
from rlexp.score import score
from tests.conftest import ROOT, run_cli

FAST = ("algo.epochs=2", "algo.steps_per_epoch=400")


def _python(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (as a notebook kernel would), from ``cwd``."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_notebook_session_trains_twice_loads_and_acts(tmp_path):
    # Two trainings in a row in one process (no run_dir: each gets its own outputs/ directory), the
    # same checks as the command line, a run opened again and its policy acting.
    res = _python(
        """
        import sys
        import numpy as np
        import rlexp
        from hydra.core.global_hydra import GlobalHydra

        argv = list(sys.argv)
        a = rlexp.train(["algo.epochs=2", "algo.steps_per_epoch=400", "seed=1"])
        b = rlexp.train(["algo=sac", "env=Pendulum-v1", "algo.epochs=2", "algo.steps_per_epoch=300",
                         "algo.start_steps=100", "algo.update_after=100", "algo.update_every=50"])
        assert a.dir != b.dir and a.dir.parent.parent.name == "outputs", (a.dir, b.dir)
        assert a.finished and b.finished and a.config.seed == 1 and b.config.algo.name == "sac"
        assert list(a.progress["Epoch"]) == [0, 1]
        assert a.score == a.progress["AverageEpRet"].mean()
        assert b.score == b.progress["AverageTestEpRet"].mean()
        run = rlexp.load(a.dir)
        assert run.config == a.config and run.score == a.score
        policy = run.policy()
        obs, _ = policy.env.reset(seed=0)
        assert policy.epoch == 2 and policy(obs) in (0, 1) and policy(obs) == policy(obs)
        pend = rlexp.load(b.dir).policy(deterministic=False)
        obs, _ = pend.env.reset(seed=0)
        acts = np.array([pend(obs) for _ in range(20)])
        assert acts.shape == (20, 1) and np.all(np.abs(acts) <= 2.0) and acts.std() > 0
        assert np.array_equal(pend(obs, deterministic=True), pend(obs, deterministic=True))
        try:
            rlexp.train(["algo.epochs=0"])
        except rlexp.RLExpError as exc:
            print("ERROR:", exc)
        assert sys.argv == argv and not GlobalHydra.instance().is_initialized()
        print("OK")
        """,
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "OK" in res.stdout
    cli = run_cli("algo.epochs=0", f"hydra.run.dir={tmp_path / 'cli'}")
    line = cli.stderr.strip().splitlines()[-1].removeprefix("rlexp: error: ")
    assert f"ERROR: {line}\n" in res.stdout  # the same one line as the command line's
    assert len(list((tmp_path / "outputs").glob("*/*"))) == 2  # the failed call left nothing behind


@pytest.mark.mpi
def test_train_under_mpi_and_continue_a_run(tmp_path):
    res = _python(
        f"""
        import rlexp
        run = rlexp.train(["comm.procs=2", "algo.epochs=1", "algo.steps_per_epoch=400"], run_dir="{tmp_path / "r"}")
        assert run.finished and (run.dir / "checkpoints" / "epoch_000001.rank1.pt").is_file()
        more = rlexp.train([f"resume={{run.dir}}", "algo.epochs=2"])
        assert more.dir == run.dir and list(more.progress["Epoch"]) == [0, 1]
        print("OK")
        """,
        tmp_path,
    )
    assert res.returncode == 0 and "OK" in res.stdout, res.stderr[-3000:]


def test_score_aggregates_the_last_epochs_of_a_column():
    table = pd.DataFrame({"AverageEpRet": [1.0, 2.0, 3.0, 10.0], "LossPi": [4.0, 3.0, 2.0, 1.0]})
    assert score(table, ScoreConfig(column=None, last=2, aggregate="mean")) == 6.5
    assert score(table, ScoreConfig(column=None, last=10, aggregate="median")) == 2.5
    assert score(table, ScoreConfig(column="LossPi", last=3, aggregate="min")) == 1.0
    assert score(table, ScoreConfig(column="LossPi", last=3, aggregate="last")) == 1.0
    table["AverageTestEpRet"] = [5.0, 6.0, 7.0, 8.0]  # off-policy: the test return is Performance
    assert score(table, ScoreConfig(column=None, last=1, aggregate="max")) == 8.0
    assert score(table.iloc[:0], ScoreConfig(column=None, last=1, aggregate="mean")) is None


def test_run_score_reads_progress_txt_as_pandas_does(tmp_path):
    """run_score reads progress.txt without pandas: the same columns, NaN for empty cells, the same scores."""
    from rlexp.score import read_progress, run_score

    path = tmp_path / "progress.txt"
    path.write_text("Epoch\tAverageEpRet\tAverageTestEpRet\n0\t1.5\t\n1\tnan\t-3\n2\t2.5\t4e1\n")
    mine, theirs = read_progress(path), pd.read_table(path)
    assert list(mine) == list(theirs.columns)
    for col in mine:
        np.testing.assert_array_equal(mine[col], theirs[col].to_numpy(dtype=float))
    for cfg in (
        ScoreConfig(column=None, last=5, aggregate="mean"),
        ScoreConfig(column="AverageEpRet", last=2, aggregate="max"),
    ):
        assert run_score(tmp_path, cfg) == score(theirs, cfg)
    assert run_score(tmp_path, ScoreConfig(column=None, last=5, aggregate="mean")) == 18.5
    path.write_text("Epoch\tAverageEpRet\n")
    assert run_score(tmp_path, ScoreConfig(column=None, last=5, aggregate="mean")) is None


def test_a_bad_score_key_is_one_line(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "score.aggregate=best")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1] == (
        "rlexp: error: score.aggregate='best' is unknown; choose one of: mean, median, max, min, last"
    )


def test_an_optuna_sweep_optimises_the_jobs_scores(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun",
        "hydra/sweeper=optuna",
        "algo.lr=interval(1e-4,1e-2)",
        "hydra.sweeper.n_trials=3",
        f"hydra.sweep.dir={sweep}",
        *FAST,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    trials = results["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * 3
    # Each trial's value is the score of its run: the mean AverageEpRet of its (2) epochs.
    for trial in trials:
        lr = trial["params"]["algo.lr"]
        assert 1e-4 <= lr <= 1e-2
        (run,) = sweep.glob(f"{trial['number']}_algo.lr=*")
        assert yaml.safe_load((run / "config.yaml").read_text())["algo"]["pi_lr"] == pytest.approx(lr)
        assert trial["value"] == pytest.approx(pd.read_table(run / "progress.txt")["AverageEpRet"].mean())
    best = max(trials, key=lambda t: t["value"])
    assert results["best_trial"] == best["number"] and results["best_value"] == best["value"]
    assert f"Best trial: {best['number']} (algo.lr={best['params']['algo.lr']!r})" in res.stdout
    # The same sweep (same sampler seed) proposes the same trials.
    again = run_cli(
        "--multirun",
        "hydra/sweeper=optuna",
        "algo.lr=interval(1e-4,1e-2)",
        "hydra.sweeper.n_trials=1",
        f"hydra.sweep.dir={tmp_path / 'again'}",
        *FAST,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    first = yaml.safe_load((tmp_path / "again" / "optimization_results.yaml").read_text())["trials"][0]
    assert first["params"] == trials[0]["params"] and np.isclose(first["value"], trials[0]["value"])


def test_an_optuna_trial_whose_job_fails_is_recorded_and_the_sweep_goes_on(tmp_path):
    """A job that crashes while training (after its checks passed) fails its trial in one line; the
    other trials run and are scored; a stored study holds no trial RUNNING. Fixed overrides, even
    with a prefix (++algo.epochs=2), stay out of the trials' directory names (issue 32)."""
    import optuna

    sweep, db = tmp_path / "sweep", tmp_path / "study.db"
    res = run_cli(
        "--multirun",
        "hydra/sweeper=optuna",
        "env=gym",
        "env.id=tests.envs:RLExpTest/CrashAfter-v0",
        "+env.kwargs.crash_after=choice(0,150)",  # 0: never; 150: in the second of the 2 epochs
        "hydra.sweeper.n_trials=4",
        "hydra.sweeper.sampler=random",
        f"hydra.sweeper.storage=sqlite:///{db}",
        "hydra.sweeper.study_name=crashes",
        f"hydra.sweep.dir={sweep}",
        "++algo.epochs=2",
        "algo.steps_per_epoch=100",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    trials = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["trials"]
    crashing = {t["number"] for t in trials if t["params"]["+env.kwargs.crash_after"] == 150}
    assert crashing and len(crashing) < 4, trials  # the sampler's seed gives both kinds
    for t in trials:
        assert t["state"] == ("FAIL" if t["number"] in crashing else "COMPLETE"), t
    for number in crashing:
        assert (
            f"trial {number} failed (RuntimeError: deliberate crash after 150 steps); counted as failed"
            in res.stdout + res.stderr
        )
    study = optuna.load_study(study_name="crashes", storage=f"sqlite:///{db}")
    assert sorted(t.state.name for t in study.trials) == sorted(t["state"] for t in trials)
    names = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert len(names) == 4 and not any("algo.epochs" in n or "env.id" in n for n in names), names


def test_an_optuna_trial_is_scored_by_several_seeds(tmp_path):
    """hydra.sweeper.seeds=4: each trial runs its settings at seeds 5-8 (from the command line's seed=5)
    and its value is the IQM (the mean of the middle two) of their four scores; optimization_results.yaml
    lists them per seed. A trial whose runs crash is failed, not scored (issue 30)."""
    from scipy import stats

    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "hydra/sweeper=optuna", "env=gym", "env.id=tests.envs:RLExpTest/CrashAfter-v0",
        "+env.kwargs.crash_after=choice(0,150)", "algo.lr=interval(1e-4,1e-2)", "hydra.sweeper.n_trials=3",
        "hydra.sweeper.sampler=random", "hydra.sweeper.seeds=4", "hydra.sweeper.aggregate=iqm", "seed=5",
        f"hydra.sweep.dir={sweep}", "algo.epochs=2", "algo.steps_per_epoch=100",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["seeds_per_trial"] == 4 and results["aggregate"] == "iqm"
    runs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(runs) == 12  # 3 trials x 4 seeds
    assert {t["state"] for t in results["trials"]} == {"FAIL", "COMPLETE"}  # the sampler's seed gives both
    for trial in results["trials"]:
        mine = [r for r in runs if int(r.name.split("_")[0]) // 4 == trial["number"]]
        seeds = [yaml.safe_load((r / "config.yaml").read_text())["seed"] for r in mine]
        assert sorted(seeds) == [5, 6, 7, 8]
        if trial["params"]["+env.kwargs.crash_after"] == 150:
            assert trial["state"] == "FAIL" and trial["value"] is None
            assert (
                f"trial {trial['number']} failed (4 of its 4 runs; RuntimeError: deliberate crash"
                in res.stdout + res.stderr
            )
            continue
        scores = {
            str(s): pd.read_table(r / "progress.txt")["AverageEpRet"].mean()
            for s, r in zip(seeds, mine, strict=True)
        }
        assert trial["seed_scores"] == pytest.approx(scores)
        assert trial["value"] == pytest.approx(stats.trim_mean(list(scores.values()), 0.25))


def test_an_optuna_sweep_with_the_median_pruner_stops_hopeless_trials_early(tmp_path):
    """hydra.sweeper.pruner=median (the zoo's): each run reports its score after every epoch to its trial
    in a real Optuna study (a journal file in the sweep directory) and ends early, as finished, when the
    score is below the median of the completed trials' at that epoch; the sweep tells Optuna PRUNED and
    optimization_results.yaml says after how many epochs. Every episode of the env returns 10 * reward,
    so which trials the pruner must stop is known: replayed here trial by trial."""
    import optuna

    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "hydra/sweeper=optuna", "env=gym", "env.id=tests.envs:RLExpTest/ConstantReward-v0",
        "+env.kwargs.reward=choice(0,1)", "hydra.sweeper.n_trials=7", "hydra.sweeper.sampler=random",
        "hydra.sweeper.seed=3", "hydra.sweeper.pruner=median", "hydra.sweeper.n_startup_trials=2",
        "hydra.sweeper.n_warmup_steps=1", f"hydra.sweep.dir={sweep}", "algo.epochs=4",
        "algo.steps_per_epoch=100",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["pruner"] == "median"
    completed: list[float] = []  # the completed trials' values (each epoch's score is the same)
    pruned_runs = []
    for trial in results["trials"]:
        value = 10.0 * trial["params"]["+env.kwargs.reward"]
        (run,) = sweep.glob(f"{trial['number']}_*")
        epochs_run = len(pd.read_table(run / "progress.txt"))
        if len(completed) >= 2 and value < float(np.median(completed)):
            # pruned at the first epoch the pruner may judge (n_warmup_steps=1), as finished
            assert trial["state"] == "PRUNED" and trial["pruned_after_epochs"] == 1 == epochs_run, trial
            assert f"trial {trial['number']} pruned after 1 epoch (score 0)" in res.stdout + res.stderr
            assert rlexp_finished(run).startswith("pruned by Optuna's median pruner after 1 epoch (score 0)")
            assert rlexp.load(run).finished
            pruned_runs.append(run)
        else:
            assert trial["state"] == "COMPLETE" and trial["value"] == value and epochs_run == 4, trial
            assert "pruned_after_epochs" not in trial
            completed.append(value)
    assert 0 < len(pruned_runs) < 7, results["trials"]  # the sampler's seed gives both
    assert f"{len(pruned_runs)} of 7 trials pruned" in res.stdout
    study = optuna.load_study(
        study_name="sweep",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(sweep / "optuna_journal.log"))
        ),
    )
    assert [t.state.name for t in study.trials] == [t["state"] for t in results["trials"]]
    again = run_cli(f"resume='{pruned_runs[0]}'", "allow_env_import=true")  # finished: nothing continues it
    assert again.returncode == 0, again.stderr[-2000:]
    assert "has finished early (pruned by Optuna" in again.stdout


def rlexp_finished(run: Path) -> str:
    """Why ``run`` ended before its epochs, from its last checkpoint."""
    from rlexp.checkpoint import finished_reason, latest_checkpoint

    latest = latest_checkpoint(run)
    assert latest is not None
    return str(finished_reason(latest[1]))


def test_a_pruner_with_several_seeds_per_trial_is_one_line(tmp_path):
    res = run_cli(
        "--multirun", "hydra/sweeper=optuna", "algo.lr=interval(1e-4,1e-2)", "hydra.sweeper.pruner=median",
        "hydra.sweeper.seeds=3", f"hydra.sweep.dir={tmp_path / 's'}",
    )  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert res.stderr.strip().splitlines()[-1] == (
        "rlexp: error: hydra.sweeper.pruner=median prunes a trial's one run by its score per epoch, but "
        "hydra.sweeper.seeds=3; use seeds=1 with a pruner, or pruner=none"
    )
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "space,fragment",
    [
        ("algo.lr=interval(-1,1e-2)", "sweep edge trial 0 (algo.lr=-1.0): algo.lr=-1.0 is out of range"),
        ("seed=0", "an Optuna sweep needs a search space"),
        ("algo.lr=interval(1e-2,1e-4)", "algo.lr=interval(0.01,0.0001): the interval needs low < high"),
        (
            "algo.pi_lr=tag(log,interval(0,1e-2))",
            "algo.pi_lr=tag(log,interval(0.0,0.01)): a log scale needs low > 0",
        ),
        (
            "algo.epochs=tag(int,log,interval(0.5,5))",
            "algo.epochs=tag(int,log,interval(0.5,5.0)): a log scale needs low > 0 (as an integer)",
        ),
        ("hydra.sweeper.n_trials=0", "rlexp: error: hydra.sweeper.n_trials=0, n_jobs=1 are out of range"),
    ],
)
def test_an_optuna_sweep_checks_its_space_before_any_trial(tmp_path, space, fragment):
    res = run_cli("--multirun", "hydra/sweeper=optuna", space, f"hydra.sweep.dir={tmp_path / 's'}")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-3000:]
    assert fragment in res.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "s").exists()


def test_the_readmes_custom_env_recipe(tmp_path):
    # README "Your own environment": a module that registers an env, used by id, then by a preset
    # (here in a folder on hydra.searchpath instead of conf/env/, to leave the checkout alone).
    (tmp_path / "my_envs.py").write_text(
        "import gymnasium as gym\n"
        "gym.register('MyPendulum-v0', entry_point='gymnasium.envs.classic_control:PendulumEnv',"
        " max_episode_steps=200)\n"
    )
    readme = (ROOT / "README.md").read_text()
    preset = readme.split("cat > conf/env/MyPendulum-v0.yaml <<'YAML'\n")[1].split("YAML\n")[0]
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "MyPendulum-v0.yaml").write_text(preset)
    env = {"PYTHONPATH": str(tmp_path)}
    short = ("algo.epochs=1", "algo.steps_per_epoch=200", "algo.start_steps=100", "algo.update_after=100")
    by_id = run_cli(
        "algo=sac",
        "env=gym",
        "env.id=my_envs:MyPendulum-v0",
        "+env.kwargs.g=9.81",
        *short,
        f"hydra.run.dir={tmp_path / 'a'}",
        env=env,
    )
    assert by_id.returncode == 0, by_id.stderr[-3000:]
    by_preset = run_cli(
        "algo=sac",
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]",
        "env=MyPendulum-v0",
        *short,
        f"hydra.run.dir={tmp_path / 'b'}",
        env=env,
    )
    assert by_preset.returncode == 0, by_preset.stderr[-3000:]
    config = yaml.safe_load((tmp_path / "b" / "config.yaml").read_text())
    preset_keys = {"id": "my_envs:MyPendulum-v0", "max_ep_len": 100, "kwargs": {"g": 9.81}}
    assert {k: config["env"][k] for k in preset_keys} == preset_keys
    assert config["env"]["wrappers"] == [] and not config["env"]["normalize_obs"]  # the pipeline's defaults
    assert pd.read_table(tmp_path / "b" / "progress.txt")["EpLen"].iloc[0] == 100


def test_the_version_and_the_public_names_of_import_rlexp(tmp_path):
    """python -m rlexp --version is rlexp's (Hydra's beside it); rlexp.__version__ is the installed
    distribution's; dir(rlexp) lists the API (train, load, ...) and not typing's names; none of it
    imports the API, Hydra or a deep-learning library."""
    from importlib.metadata import version

    import hydra

    res = run_cli("--version")
    assert res.returncode == 0 and res.stdout == f"rlexp {version('rlexp')} (Hydra {hydra.__version__})\n"
    probe = (
        "import sys, rlexp; names = dir(rlexp); v = rlexp.__version__; "
        "print(v); print(' '.join(names)); "
        "print(' '.join(m for m in ('rlexp.api', 'hydra', 'torch', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    v, names, heavy = out.stdout.split("\n")[:3]
    assert v == version("rlexp")
    assert {"train", "load", "compose", "Run", "Policy", "RLExpError", "ConfigError", "__version__"} <= set(
        names.split()
    )
    assert not {"Any", "TYPE_CHECKING", "annotations"} & set(names.split()), names
    assert heavy == ""


def test_train_with_dry_run_checks_writes_nothing_and_returns_none(tmp_path, capsys):
    import rlexp

    assert rlexp.train(["dry_run=true", "algo.epochs=1"], run_dir=tmp_path / "run") is None
    assert "Dry run: the checks passed; would train ppo on CartPole-v1" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()
    with pytest.raises(rlexp.RLExpError, match="dqn cannot handle the action space Box"):
        rlexp.train(["dry_run=true", "algo=dqn", "env=Pendulum-v1"], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("overrides", [["--multirun", "seed=0,1"], ["seed=0,1"], ["-m"]])
def test_a_sweep_asked_of_the_api_says_how_to_sweep_from_python(overrides, tmp_path):
    """The command line's flags, or a value with a comma that the command line would sweep, are one
    RLExpError that says how to sweep from Python (a loop of rlexp.train calls); nothing is written."""
    with pytest.raises(rlexp.RLExpError, match=r"a sweep from Python is a loop of rlexp.train calls") as info:
        rlexp.train(overrides, run_dir=tmp_path / "run")
    assert "--multirun (" not in str(info.value)
    assert not (tmp_path / "run").exists()
