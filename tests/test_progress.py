"""The bar inside each epoch (``logger.progress``, rlexp/progress.py): on a terminal by default, off when
piped or quiet, forced on or off by the key, rank 0's only, and nothing in progress.txt changes."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading

import pandas as pd
import pytest

import rlexp.progress as progress
from tests.conftest import ROOT, run_cli

FAST = ("algo.epochs=2", "algo.steps_per_epoch=400")
BAR = re.compile(r"epoch (\d)/2: +\d+%\|.*\| *(\d+)/(\d+) \[")  # tqdm's line: epoch 1/2:  50%|##  | 200/400 [
TIMES = ("Time", "SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm")


def on_a_terminal(*args: str, timeout: float = 300) -> tuple[int, str]:
    """``python -m rlexp ARGS`` with its stdout on a pseudo-terminal; its exit status and what it printed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))  # 150 columns
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "NO_COLOR", "FORCE_COLOR")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlexp", *args], cwd=ROOT, stdout=follower, stderr=subprocess.PIPE, env=env
    )
    os.close(follower)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=timeout)
        stderr = proc.stderr.read().decode() if proc.stderr else ""
    finally:
        proc.kill()
        reader.join(10)
        os.close(leader)
    assert status == 0, stderr[-3000:]
    return status, b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def bars(output: str) -> list[tuple[int, int, int]]:
    """(epoch, steps, total) of every state of the bar in ``output``."""
    return [(int(e), int(n), int(t)) for e, n, t in BAR.findall(output.replace("\r", "\n"))]


def same_records(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    cols = [c for c in a.columns if c not in TIMES]
    return list(a.columns) == list(b.columns) and a[cols].equals(b[cols])


def test_the_bar_shows_on_a_terminal_and_changes_no_record(tmp_path):
    _, shown = on_a_terminal(f"hydra.run.dir={tmp_path / 'tty'}", *FAST)
    seen = bars(shown)
    assert {e for e, _, _ in seen} == {1, 2} and all(t == 400 for _, _, t in seen), shown[-3000:]
    assert (2, 400, 400) in seen  # the epoch's steps all counted, then cleared before the row
    assert "finishing the epoch" in shown and "| TotalEnvInteracts |" in shown
    piped = run_cli(f"hydra.run.dir={tmp_path / 'pipe'}", *FAST)
    assert piped.returncode == 0 and bars(piped.stdout) == [] and "steps/s" not in piped.stdout
    tty, pipe = (pd.read_table(tmp_path / d / "progress.txt") for d in ("tty", "pipe"))
    assert same_records(tty, pipe)


def test_the_key_forces_the_bar_on_or_off(tmp_path):
    forced = run_cli(f"hydra.run.dir={tmp_path / 'a'}", *FAST, "logger.progress=true")
    assert forced.returncode == 0 and {e for e, _, _ in bars(forced.stdout)} == {1, 2}
    _, off = on_a_terminal(f"hydra.run.dir={tmp_path / 'b'}", *FAST, "logger.progress=false")
    assert bars(off) == [] and "Run finished" in off
    _, quiet = on_a_terminal(f"hydra.run.dir={tmp_path / 'c'}", *FAST, "logger.console=quiet")
    assert bars(quiet) == [] and "Run finished" in quiet  # auto: only where epochs are printed


def test_off_policy_bar_counts_every_env(tmp_path):
    args = ("algo=sac", "env=Pendulum-v1", "env.num_envs=2", "algo.start_steps=100", "algo.update_after=100")
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", *args, *FAST, "logger.progress=TRUE")
    assert res.returncode == 0, res.stderr[-2000:]
    seen = bars(res.stdout)
    assert (1, 400, 400) in seen and (2, 400, 400) in seen and all(n % 2 == 0 for _, n, _ in seen)


@pytest.mark.mpi
def test_with_two_ranks_the_bar_is_rank_0s_and_follows_the_launchers_terminal(tmp_path):
    args = ("comm.procs=2", "env.num_envs=2", *FAST)
    _, shown = on_a_terminal(f"hydra.run.dir={tmp_path / 'tty'}", *args)
    seen = bars(shown)
    assert (1, 400, 400) in seen and (2, 400, 400) in seen and all(n % 4 == 0 for _, n, _ in seen), shown
    # one bar: rank 1 draws none (each bar says once that its steps are done)
    done = [s for s in shown.replace("\r", "\n").splitlines() if "finishing the epoch" in s]
    assert [s.split(":")[0] for s in done] == ["epoch 1/2", "epoch 2/2"], done
    piped = run_cli(f"hydra.run.dir={tmp_path / 'pipe'}", *args)  # the ranks' own pseudo-terminal aside
    assert piped.returncode == 0 and bars(piped.stdout) == [], piped.stdout[-2000:]


def test_bad_progress_value_is_one_line(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "logger.progress=sometimes")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "rlexp: error: logger.progress='sometimes' is unknown; choose one of: auto, true, false"
    ]
    assert not (tmp_path / "r").exists()


def test_an_epoch_without_the_bar_iterates_a_plain_range(monkeypatch):
    """Off, the loops get range(n) itself: nothing is paid per step."""
    monkeypatch.delenv(progress.TERMINAL_VARIABLE, raising=False)
    monkeypatch.setattr(sys, "stdout", open(os.devnull, "w"))  # noqa: SIM115 (pytest restores stdout)
    assert type(progress.EpochProgress("auto", "table", 3, 1).steps(1, 10)) is range
    assert type(progress.EpochProgress("false", "table", 3, 1).steps(1, 10)) is range
    monkeypatch.setenv(progress.TERMINAL_VARIABLE, "1")  # a rank whose launcher writes to a terminal
    assert progress.progress_wanted("auto", "line") and not progress.progress_wanted("auto", "quiet")
    monkeypatch.setattr(progress.comm, "proc_id", lambda: 1)
    assert not progress.progress_wanted("true", "table")  # rank 0 only
