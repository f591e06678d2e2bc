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

from tests.conftest import ROOT, run_cli


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
        str(runs), "--pairs", "algo.lr=1:algo.lr=2", "algo.lr=2:algo.lr=3", "--out", str(tmp_path / "out")
    )
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
    row = next(line for line in md.splitlines() if line.startswith("| sac_Pendulum-v1 |"))
    median = float(row.split("|")[2].split("(")[0].replace(",", ""))
    assert median == pytest.approx(float(np.median(tests)), abs=0.05)  # the table shows one decimal
