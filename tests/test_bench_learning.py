"""The learning benchmark survives being stopped (issue 27): SIGKILL of the whole benchmark mid-run,
then the same command again, gives the figures of a benchmark that never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from tests.conftest import ROOT

BENCH = str(ROOT / "benchmarks" / "bench_learning.py")
TINY = (  # SAC on Pendulum, 6 epochs of 300 steps, a checkpoint after each
    "--algo", "sac", "--kinds", "defaults", "--envs", "Pendulum-v1", "--seeds", "0", "--steps", "1800",
    "--set", "algo.steps_per_epoch=300", "algo.start_steps=200", "algo.update_after=200", "algo.batch_size=32",
    "network.hidden_sizes=[32,32]", "algo.num_test_episodes=2", "algo.save_freq=1",
)  # fmt: skip
NAME = "sac-defaults_Pendulum-v1_s0"


def bench(tmp: Path, **kwargs) -> subprocess.Popen:
    args = [sys.executable, BENCH, *TINY, "--out", str(tmp / "out"), "--results", str(tmp / "results")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(args, cwd=ROOT, env=env, text=True, **kwargs)


def pids_with(text: str) -> list[int]:
    """The processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_benchmark_killed_mid_run_and_started_again_gives_the_uninterrupted_figures(tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert bench(whole, stdout=subprocess.DEVNULL).wait(timeout=300) == 0

    proc = bench(cut, stdout=subprocess.DEVNULL, start_new_session=True)
    checkpoint = cut / "out" / NAME / "checkpoints" / "epoch_000003.pt"
    deadline = time.time() + 240
    while not checkpoint.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the benchmark ended before it could be killed"
    # the whole benchmark at once, mid-epoch: its process and the training process (its own session)
    training = [pid for pid in pids_with(str(cut / "out")) if pid != proc.pid]
    assert training, "no training process found"
    os.killpg(proc.pid, signal.SIGKILL)
    for pid in training:
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    assert not (cut / "results" / f"{NAME}.json").exists()
    progress = pd.read_table(cut / "out" / NAME / "progress.txt")
    assert 3 <= len(progress) < 6  # stopped part-way

    again = bench(cut, stdout=subprocess.PIPE)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"{NAME}: continuing" in out
    a = json.loads((whole / "results" / f"{NAME}.json").read_text())
    b = json.loads((cut / "results" / f"{NAME}.json").read_text())
    for key in ("test", "det10", "last100", "steps", "settings"):
        assert a[key] == b[key], key
    assert a["steps"] == 1800
    # the logs too: the resumed run logged the epochs after its checkpoint once, as the whole run did
    assert (whole / "out" / NAME / "episodes.csv").read_text() == (
        cut / "out" / NAME / "episodes.csv"
    ).read_text()
    timing = ["Time", "SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm"]
    pa, pb = (pd.read_table(d / "out" / NAME / "progress.txt").drop(columns=timing) for d in (whole, cut))
    pd.testing.assert_frame_equal(pa, pb)
    # a third run reuses the finished result
    third = bench(cut, stdout=subprocess.PIPE)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0 and "training" not in out and "continuing" not in out
