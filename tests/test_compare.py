"""python -m rlexp.compare (issue 30): aggregate statistics over seeds and envs with rliable, on synthetic
run directories whose answers are known, its one-line errors, and the learning benchmark's table
reproduced from the runs the benchmark keeps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rlexp.config import CONF_DIR
from tests.conftest import ROOT, composed, run_cli


def write_run(
    root: Path, cond: str, env: str, seed: int, finals: list[float] | float, steps: int = 5
) -> Path:
    """A run directory of condition ``algo.lr=cond`` on ``env`` whose AverageEpRet rises linearly to
    ``finals`` (its last ``steps`` rows all ``finals`` when that is a number)."""
    run = root / f"{cond}_{env.replace('/', '-')}_{seed}"
    run.mkdir(parents=True)
    (run / "overrides.yaml").write_text(f"- algo.lr={cond}\n- env={env}\n- seed={seed}\n")
    (run / "config.yaml").write_text(
        f"exp_name: ppo\nalgo:\n  name: ppo\n  lr: {cond}\nenv:\n  id: {env}\n  wrappers: []\nseed: {seed}\n"
    )
    n = 10
    values = np.linspace(0.0, float(np.mean(finals)), n)
    values[-steps:] = finals
    pd.DataFrame(
        {
            "Epoch": range(n),
            "AverageEpRet": values,
            "TotalEnvInteracts": 100 * np.arange(1, n + 1),
            "Time": range(1, n + 1),
        }
    ).to_csv(run / "progress.txt", sep="\t", index=False)
    return run


def compare(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, "--reps", "500", module="rlexp.compare")


def read_csv(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "compare.csv").set_index(["condition", "metric"])


def test_iqm_and_optimality_gap_by_hand(tmp_path):
    """Returns 2, 5, 12, 9 on an env whose random and reference returns are 0 and 10: normalised 0.2,
    0.5, 1.2, 0.9; the IQM is the mean of the middle two (0.5 + 0.9) / 2 = 0.7, the optimality gap the
    mean shortfall below 1, (0.8 + 0.5 + 0 + 0.1) / 4 = 0.35, the mean 0.7, the median 0.7."""
    for seed, final in enumerate([2.0, 5.0, 12.0, 9.0]):
        write_run(tmp_path / "runs", "0.001", "Toy-v0", seed, final)
    for seed, final in enumerate([1.0, 1.0, 1.0, 1.0]):
        write_run(tmp_path / "runs", "0.01", "Toy-v0", seed, final)
    (tmp_path / "scores.yaml").write_text("Toy-v0: {random: 0.0, reference: 10.0}\n")
    res = compare(
        str(tmp_path / "runs"), "--scores", str(tmp_path / "scores.yaml"), "--out", str(tmp_path / "out")
    )
    assert res.returncode == 0, res.stderr[-2000:]
    table = read_csv(tmp_path / "out")
    est = table["estimate"]
    assert est["algo.lr=0.001", "IQM"] == pytest.approx(0.7)
    assert est["algo.lr=0.001", "Optimality Gap"] == pytest.approx(0.35)
    assert est["algo.lr=0.001", "Mean"] == pytest.approx(0.7)
    assert est["algo.lr=0.001", "Median"] == pytest.approx(0.7)
    assert est["algo.lr=0.01", "IQM"] == pytest.approx(0.1) and est[
        "algo.lr=0.01", "Optimality Gap"
    ] == pytest.approx(0.9)
    for name in ("aggregates.png", "performance_profile.png", "sample_efficiency.png", "compare.md"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| algo.lr=0.001 | 7.0 (2.0 to 12.0) |" in md  # raw median (min-max) over seeds


def test_probability_of_improvement_is_1_for_a_dominating_condition_and_half_for_equal_ones(tmp_path):
    runs = tmp_path / "runs"
    for env in ("CartPole-v1", "Acrobot-v1"):
        for seed in range(3):
            write_run(runs, "1", env, seed, 400.0 + seed if env == "CartPole-v1" else -100.0 + seed)  # better
            write_run(runs, "2", env, seed, 100.0 + seed if env == "CartPole-v1" else -400.0 + seed)  # worse
            write_run(runs, "3", env, seed, 100.0 + seed if env == "CartPole-v1" else -400.0 + seed)  # = 2
    res = compare(
        str(runs), "--pairs", "algo.lr=1:algo.lr=2", "algo.lr=2.0:algo.lr=3e0", "--out", str(tmp_path / "out")
    )  # a number spelled as on a command line (3e0 for 3) names its condition too
    assert res.returncode == 0, res.stderr[-2000:]
    table = read_csv(tmp_path / "out")["estimate"]
    assert table["algo.lr=1 > algo.lr=2", "probability_of_improvement"] == pytest.approx(1.0)
    assert table["algo.lr=2 > algo.lr=3", "probability_of_improvement"] == pytest.approx(0.5)
    assert (tmp_path / "out" / "probability_of_improvement.png").is_file()


def test_the_confidence_interval_narrows_with_more_seeds(tmp_path):
    rng = np.random.default_rng(0)
    widths = []
    for n in (3, 12):
        runs = tmp_path / f"runs{n}"
        for env in ("CartPole-v1", "Acrobot-v1"):
            lo, hi = (23.7, 500.0) if env == "CartPole-v1" else (-497.1, -76.6)
            for seed in range(n):
                write_run(runs, "0.001", env, seed, lo + (hi - lo) * float(rng.uniform(0.3, 0.9)))
        res = compare(str(runs), "--out", str(tmp_path / f"out{n}"))
        assert res.returncode == 0, res.stderr[-2000:]
        row = read_csv(tmp_path / f"out{n}").loc[("ppo", "IQM")]
        widths.append(row["ci_high"] - row["ci_low"])
    assert widths[1] < 0.7 * widths[0], widths


@pytest.mark.parametrize(
    "layout,args,fragment",
    [
        ({("1", "CartPole-v1"): 3, ("1", "Acrobot-v1"): 3, ("2", "CartPole-v1"): 3}, (),
         "condition 'algo.lr=2' has runs on CartPole-v1 but none on Acrobot-v1; every condition needs runs on every env"),
        ({("1", "CartPole-v1"): 3, ("1", "Acrobot-v1"): 2}, (),
         "condition 'ppo' has 2 on Acrobot-v1, 3 on CartPole-v1; the stratified bootstrap needs the same number"),
        ({("1", "CartPole-v1"): 1}, (), "has 1 run per env; a confidence interval needs at least 2 seeds"),
        ({("1", "Toy-v0"): 2}, (), "env Toy-v0 has no random and reference return in rlexp's table (conf/scores.yaml); give --scores FILE"),
        ({("1", "CartPole-v1"): 2}, ("--value", "AverageTestEpRet"), "column 'AverageTestEpRet' is not in"),
        ({("1", "CartPole-v1"): 2, ("2", "CartPole-v1"): 2}, ("--pairs", "algo.lr=1:x"), "--pairs 'algo.lr=1:x': give X:Y with two conditions of: algo.lr=1, algo.lr=2"),
        ({("1", "CartPole-v1"): 2, ("1", "Acrobot-v1"): 2}, ("--raw",), "--raw compares one env's returns, but the runs are on 2 envs"),
    ],
)  # fmt: skip
def test_runs_that_cannot_be_compared_are_one_line(tmp_path, layout, args, fragment):
    for (cond, env), n in layout.items():
        for seed in range(n):
            write_run(tmp_path / "runs", cond, env, seed, 100.0)
    res = compare(str(tmp_path / "runs"), *args, "--out", str(tmp_path / "out"))
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr, res.stderr
    assert not (tmp_path / "out").exists()


def test_existing_results_are_kept_unless_forced(tmp_path):
    for seed in range(2):
        write_run(tmp_path / "runs", "1", "CartPole-v1", seed, 100.0)
    out = tmp_path / "out"
    assert compare(str(tmp_path / "runs"), "--out", str(out)).returncode == 0
    before = (out / "compare.md").read_text()
    again = compare(str(tmp_path / "runs"), "--out", str(out))
    assert again.returncode == 2 and f"{out / 'compare.md'} exists; give --force" in again.stderr
    assert (out / "compare.md").read_text() == before
    assert compare(str(tmp_path / "runs"), "--out", str(out), "--force").returncode == 0


def test_the_learning_benchmarks_table_comes_out_of_compare_with_the_same_numbers(tmp_path):
    """bench_learning's test column (the mean AverageTestEpRet of the last 10 evaluations per run, the
    median over seeds) is compare's raw score with --value AverageTestEpRet --last 10."""
    bench = [
        sys.executable, str(ROOT / "benchmarks" / "bench_learning.py"), "--algo", "sac", "--kinds", "defaults",
        "--envs", "Pendulum-v1", "--seeds", "0", "1", "--steps", "1200", "--out", str(tmp_path / "out"),
        "--results", str(tmp_path / "results"), "--set", "algo.steps_per_epoch=100", "algo.start_steps=200",
        "algo.update_after=200", "algo.batch_size=32", "network.hidden_sizes=[32,32]", "algo.num_test_episodes=1",
    ]  # fmt: skip
    subprocess.run(bench, cwd=ROOT, check=True, capture_output=True, timeout=600)
    tests = [json.loads(p.read_text())["test"] for p in sorted((tmp_path / "results").glob("*.json"))]
    res = compare(
        str(tmp_path / "out"),
        "--value",
        "AverageTestEpRet",
        "--last",
        "10",
        "--raw",
        "--out",
        str(tmp_path / "cmp"),
    )
    assert res.returncode == 0, res.stderr[-2000:]
    md = (tmp_path / "cmp" / "compare.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| sac |"))  # exp_name less its task
    median = float(row.split("|")[2].split("(")[0].replace(",", ""))
    assert median == pytest.approx(float(np.median(tests)), abs=0.05)  # the table shows one decimal


def write_preset_run(
    root: Path, name: str, overrides: list[str], config: str, final: float, choices: dict | None = None
) -> Path:
    """A run directory with these overrides and config.yaml text (and Hydra's choices in its
    provenance.json when given, as rlexp records them since issue 71) whose AverageEpRet ends at ``final``."""
    run = root / name
    run.mkdir(parents=True)
    (run / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (run / "config.yaml").write_text(config)
    if choices is not None:
        (run / "provenance.json").write_text(json.dumps({"overrides": overrides, "choices": choices}))
    pd.DataFrame(
        {"Epoch": range(3), "AverageEpRet": [0.0, final / 2, final], "TotalEnvInteracts": [100, 200, 300]}
    ).to_csv(run / "progress.txt", sep="\t", index=False)
    return run


DQN_CONFIG = "exp_name: dqn_CartPole-v1\nalgo:\n  name: dqn\nenv:\n  id: CartPole-v1\n  wrappers: []\n"


def conditions(out: Path) -> list[str]:
    return sorted(set(read_csv(out).index.get_level_values("condition")))


def test_a_preset_that_extends_another_algorithm_is_its_own_condition(tmp_path):
    """Issue 71: algo=rainbow is dqn with its extensions on and keeps ``name: dqn``; its runs are a
    condition apart from algo=dqn's, whether the preset is known from the recorded choices (a preset
    chosen by an experiment, not on the command line) or, for runs recorded before them, from the
    override; --pairs names them."""
    runs = tmp_path / "runs"
    for seed in range(2):  # recorded before the choices were: the override tells them apart
        write_preset_run(runs, f"dqn_{seed}", ["algo=dqn", f"seed={seed}"], DQN_CONFIG, 10.0 + seed)
        write_preset_run(runs, f"rainbow_{seed}", ["algo=rainbow", f"seed={seed}"], DQN_CONFIG, 50.0 + seed)
    res = compare(
        str(runs), "--last", "1", "--raw", "--pairs", "algo=rainbow:algo=dqn", "--out", str(tmp_path / "out")
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert conditions(tmp_path / "out") == ["algo=dqn", "algo=rainbow", "algo=rainbow > algo=dqn"]
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| algo=dqn | 10.5 (10.0 to 11.0) |" in md and "| algo=rainbow | 50.5 (50.0 to 51.0) |" in md
    res = run_cli(str(runs), "-y", "AverageEpRet", "--output", str(tmp_path / "p.png"), module="rlexp.plot")
    assert res.returncode == 0, res.stderr[-2000:]
    labels = sorted(line.rsplit("[", 1)[1] for line in res.stdout.splitlines() if line.startswith("  "))
    assert labels == ["algo=dqn]", "algo=dqn]", "algo=rainbow]", "algo=rainbow]"], res.stdout

    newer = tmp_path / "newer"  # rainbow chosen by an experiment preset: only the recorded choice says so
    for seed in range(2):
        write_preset_run(
            newer,
            f"dqn_{seed}",
            ["algo=dqn", f"seed={seed}"],
            DQN_CONFIG,
            10.0,
            {"algo": "dqn", "env": "CartPole-v1"},
        )
        write_preset_run(
            newer, f"exp_{seed}", ["+experiment=mine", f"seed={seed}"], DQN_CONFIG, 50.0,
            {"algo": "rainbow", "env": "CartPole-v1", "experiment": "mine"},
        )  # fmt: skip
    res = compare(str(newer), "--last", "1", "--raw", "--out", str(tmp_path / "out2"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "algo=rainbow" in conditions(tmp_path / "out2")[1], conditions(tmp_path / "out2")
    assert conditions(tmp_path / "out2")[0].startswith("algo=dqn")


def test_runs_of_a_preset_alone_are_named_by_the_preset_not_the_algorithm_it_runs(tmp_path):
    """algo=rainbow's runs keep dqn's default exp_name (dqn_<env>); plotted or compared alone, they are
    the condition rainbow (the recorded choice), not dqn."""
    runs = tmp_path / "runs"
    for env in ("CartPole-v1", "Acrobot-v1"):
        config = DQN_CONFIG.replace("CartPole-v1", env)
        for seed in range(2):
            write_preset_run(
                runs, f"{env}_{seed}", ["algo=rainbow", f"env={env}", f"seed={seed}"], config, 10.0 + seed,
                {"algo": "rainbow", "env": env},
            )  # fmt: skip
    res = compare(str(runs), "--last", "1", "--raw", "--select", "CartPole", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert conditions(tmp_path / "out") == ["rainbow"]
    res = run_cli(str(runs / "Acrobot-v1_0"), "--table", module="rlexp.plot")
    assert res.returncode == 0 and "| rainbow_Acrobot-v1 |" in res.stdout, res.stdout + res.stderr


def test_dqn_and_rainbow_runs_of_one_sweep_compare_as_two_conditions(tmp_path):
    """Issue 71's command, end to end: a sweep over algo=dqn,rainbow records each job's preset, and
    compare tells them apart (it printed one condition of four seeds)."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun", "algo=dqn,rainbow", "env=CartPole-v1", "seed=0,1", "algo.epochs=1",
        "algo.steps_per_epoch=150", "algo.num_test_episodes=1", "logger.console=quiet",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    choices = json.loads(next(sweep.glob("*algo=rainbow*/provenance.json")).read_text())["choices"]
    assert choices["algo"] == "rainbow" and choices["env"] == "CartPole-v1"
    res = compare(str(sweep), "--raw", "--pairs", "algo=dqn:algo=rainbow", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert conditions(tmp_path / "out") == ["algo=dqn", "algo=dqn > algo=rainbow", "algo=rainbow"]


def test_the_task_of_a_family_preset_is_its_env_id(tmp_path):
    """Issue 71: env=minatar (or atari) without env.id trains on the preset's id, MinAtar/Breakout-v1,
    which conf/scores.yaml has; a preset named as an env id that wraps another env
    (CartPoleNoVel-v1) stays a task of its own."""
    runs = tmp_path / "runs"
    minatar = (
        "exp_name: dqn_MinAtar/Breakout-v1\nalgo:\n  name: dqn\nenv:\n  id: MinAtar/Breakout-v1\n"
        "  wrappers:\n  - rlexp.atari:MinAtarObservations\n"
    )
    novel = (
        "exp_name: ppo_CartPole-v1\nalgo:\n  name: ppo\nenv:\n  id: CartPole-v1\n  wrappers:\n"
        "  - MaskObservation: {indices: [1, 3]}\n"
    )
    for seed in range(2):
        write_preset_run(runs, f"minatar_{seed}", ["env=minatar", f"seed={seed}"], minatar, 5.0 + seed)
        write_preset_run(runs, f"novel_{seed}", ["env=CartPoleNoVel-v1", f"seed={seed}"], novel, 300.0 + seed)
    res = compare(str(runs), "--last", "1", "--select", "minatar", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| condition | MinAtar/Breakout-v1 |" in md, md
    iqm = read_csv(tmp_path / "out")["estimate"]["dqn", "IQM"]  # the condition: exp_name less its task
    assert iqm == pytest.approx((5.5 - 0.4) / (10.0 - 0.4))  # conf/scores.yaml: random 0.4, reference 10
    res = compare(str(runs), "--last", "1", "--select", "novel", "--out", str(tmp_path / "out2"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert "| condition | CartPoleNoVel-v1 |" in (tmp_path / "out2" / "compare.md").read_text()


def test_every_env_preset_has_a_random_and_a_reference_return():
    """rlexp.compare normalises by conf/scores.yaml: every env preset (a task by its name), and the
    default id of each family preset (env=atari, env=minatar), is in it with reference > random."""
    table = yaml.safe_load((Path(CONF_DIR) / "scores.yaml").read_text())
    tasks = [
        p.stem for p in (Path(CONF_DIR) / "env").glob("*.yaml") if p.stem not in ("gym", "atari", "minatar")
    ]
    tasks += [composed(f"env={family}").env.id for family in ("atari", "minatar")]
    missing = [t for t in tasks if t not in table]
    assert not missing, f"conf/scores.yaml lacks {missing}"
    assert all(float(table[t]["reference"]) > float(table[t]["random"]) for t in tasks)


def test_select_given_twice_keeps_the_runs_that_match_both(tmp_path):
    """Issue 71: docs/guide.md's ``--select sac-tuned ... --select Hopper`` form: every --select counts
    (argparse kept the last one only), for compare and for plot."""
    runs = tmp_path / "runs"
    for env in ("CartPole-v1", "Acrobot-v1"):
        for cond in ("1", "2"):
            for seed in range(2):
                write_run(runs, cond, env, seed, 100.0 * float(cond))
    res = compare(
        str(runs), "--select", "algo.lr=1", "--raw", "--select", "CartPole", "--out", str(tmp_path / "out")
    )
    assert res.returncode == 0, res.stderr[-2000:]
    md = (tmp_path / "out" / "compare.md").read_text()
    assert "| condition | CartPole-v1 |" in md and "| ppo | 100.0 (100.0 to 100.0) |" in md, md
    assert conditions(tmp_path / "out") == ["ppo"]
    res = run_cli(
        str(runs), "--select", "algo.lr=1", "--select", "CartPole", "--exclude", "seed=0", "--exclude", "zzz",
        "-y", "AverageEpRet", "--output", str(tmp_path / "p.png"), module="rlexp.plot",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    plotted = [line for line in res.stdout.splitlines() if line.startswith("  ")]
    assert len(plotted) == 1 and "1_CartPole-v1_1" in plotted[0], res.stdout


def test_the_figures_are_the_same_every_time_at_one_seed(tmp_path):
    """Issue 71: every bootstrap, the performance profile's bands included, is drawn from --seed: two
    comparisons of the same runs write the same tables and the same images."""
    runs = tmp_path / "runs"
    rng = np.random.default_rng(3)
    for env in ("CartPole-v1", "Acrobot-v1"):
        lo, hi = (23.7, 500.0) if env == "CartPole-v1" else (-497.1, -76.6)
        for cond in ("1", "2"):
            for seed in range(5):
                write_run(runs, cond, env, seed, lo + (hi - lo) * float(rng.uniform(0.1, 0.9)))
    for out in ("a", "b"):
        res = compare(str(runs), "--pairs", "algo.lr=1:algo.lr=2", "--out", str(tmp_path / out))
        assert res.returncode == 0, res.stderr[-2000:]
    for name in ("performance_profile.png", "compare.csv", "aggregates.png", "sample_efficiency.png",
                 "probability_of_improvement.png"):  # fmt: skip
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_plot_table_and_compare_score_a_run_alike_and_say_how(tmp_path):
    """One definition of a run's score for plot --table and compare: the mean of its last --last (5)
    values; runs of 3 epochs count all 3, and both tables say so. The last epoch alone would differ."""
    runs = tmp_path / "runs"
    returns = {("0.001", 0): [10.0, 30.0, 50.0], ("0.001", 1): [20.0, 40.0, 90.0]}
    returns |= {("0.01", 0): [0.0, 5.0, 10.0], ("0.01", 1): [5.0, 5.0, 20.0]}
    for (cond, seed), values in returns.items():
        run = write_run(runs, cond, "Toy-v0", seed, 0.0)
        pd.DataFrame(
            {
                "Epoch": range(3),
                "AverageEpRet": values,
                "TotalEnvInteracts": [100, 200, 300],
                "Time": [1, 2, 3],
            }
        ).to_csv(run / "progress.txt", sep="\t", index=False)
    words = "mean of its last 5 values (of all its values where it has fewer: the shortest run has 3)"
    res = run_cli(
        str(runs), "--table", str(tmp_path / "t.csv"), "-o", str(tmp_path / "p.png"), module="rlexp.plot"
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"Performance per condition (a run's score: the {words};" in res.stdout
    table = pd.read_csv(tmp_path / "t.csv").set_index("condition")
    res = compare(str(runs), "--raw", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    md = (tmp_path / "out" / "compare.md").read_text()
    assert md.startswith(f"# Performance: a run's score is the {words}\n")
    for cond in ("0.001", "0.01"):
        scores = [float(np.mean(returns[cond, seed])) for seed in (0, 1)]  # 40.0, 50.0; 5.0, 10.0
        assert table.loc[f"algo.lr={cond}", "score_mean"] == pytest.approx(np.mean(scores))
        # compare: the median of two seeds is their mean, the same number
        assert (
            f"| algo.lr={cond} | {np.median(scores):,.1f} ({min(scores):,.1f} to {max(scores):,.1f}) |" in md
        )


def test_one_algorithm_on_several_envs_is_one_condition(tmp_path):
    """A sweep over envs alone (``algo=ppo env=CartPole-v1,Acrobot-v1 seed=0,1``): the default exp_names
    (``ppo_CartPole-v1``, ``ppo_Acrobot-v1``) name the task, not the condition, so the runs are one
    condition, ``ppo``, scored on both tasks (it was refused: every condition needs runs on every env)."""
    runs = tmp_path / "runs"
    for env, final in (("CartPole-v1", 500.0), ("Acrobot-v1", -100.0)):
        config = f"exp_name: ppo_{env}\nalgo:\n  name: ppo\nenv:\n  id: {env}\n  wrappers: []\n"
        for seed in range(2):
            write_preset_run(runs, f"{env}_{seed}", [f"env={env}", f"seed={seed}"], config, final)
    res = compare(str(runs), "--last", "1", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr[-2000:]
    assert conditions(tmp_path / "out") == ["ppo"]
