"""The throughput columns and the console progress line (rlexp/timing.py)."""

from __future__ import annotations

import pytest

from rlexp import timing
from rlexp.logger import EpochLogger
from rlexp.timing import EpochTimer, format_duration


def test_format_duration():
    assert [format_duration(s) for s in (0.4, 45, 200, 3720)] == ["0s", "45s", "3m20s", "1h02m"]


class Clocks:
    """Stand-ins for time.perf_counter and rlexp.comm.seconds that move only when told to."""

    def __init__(self, monkeypatch) -> None:
        self.wall = self.mpi = 100.0
        monkeypatch.setattr(timing, "perf_counter", lambda: self.wall)
        monkeypatch.setattr(timing.comm, "seconds", lambda: self.mpi)


def test_epoch_timer_logs_shares_of_the_epoch_and_restarts(capsys, monkeypatch):
    clocks = Clocks(monkeypatch)
    logger = EpochLogger(None)
    timer = EpochTimer(epochs=4)
    with timer.phase("env"):  # a 2 s epoch, of which 0.5 s stepping the env ...
        clocks.wall += 0.5
    with timer.phase("act"):
        clocks.wall += 0.25
    with timer.phase("update"):
        clocks.wall += 1.0
    clocks.wall += 0.25  # ... and 0.25 s in none of the phases (logging)
    timer.log(logger, epoch=1, env_steps=1000)
    row = logger.dump_tabular()
    assert row["SPS"] == pytest.approx(500, rel=0.01)
    assert row["FracEnv"] == pytest.approx(0.25, rel=0.01)
    assert row["FracAct"] == pytest.approx(0.125, rel=0.01)
    assert row["FracUpdate"] == pytest.approx(0.5, rel=0.01)
    assert row["FracComm"] == 0.0  # one process: no MPI
    assert timer.spent == {"env": 0.0, "act": 0.0, "update": 0.0}

    capsys.readouterr()
    timer.progress(logger)  # a 4-epoch run of a few ms: no progress line
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(timing, "PROGRESS_AFTER_S", 0.0)
    timer.progress(logger)
    assert "epoch 1/4  500 SPS  ETA" in capsys.readouterr().out.replace(",", "")


def test_mpi_time_inside_a_phase_counts_as_comm(monkeypatch):
    clocks = Clocks(monkeypatch)
    logger = EpochLogger(None)
    timer = EpochTimer(epochs=4)
    with timer.phase("update"):  # 1 s of learning, 0.25 s of it in MPI collectives
        clocks.wall += 1.0
        clocks.mpi += 0.25
    timer.log(logger, epoch=1, env_steps=100)
    row = logger.dump_tabular()
    assert row["FracUpdate"] == pytest.approx(0.75) and row["FracComm"] == pytest.approx(0.25)


def test_the_eta_counts_the_epochs_after_the_off_policy_warm_up(capsys, monkeypatch):
    """Epochs 1-2 are warm-up (random actions, no gradient steps: 1 s each), epoch 3 learns (5 s): the
    ETA after the warm-up is provisional and says so, then it counts the learning epochs only."""
    clocks = Clocks(monkeypatch)
    monkeypatch.setattr(timing, "PROGRESS_AFTER_S", 0.0)
    logger = EpochLogger(None)
    timer = EpochTimer(epochs=10, warmup=200, steps_per_epoch=100)
    assert timer.warmup_note() == (
        "Warm-up until env step 200: random actions and no gradient steps (epochs 1-2 of 10); the epochs "
        "after it are slower, and the ETA counts from them"
    )
    lines = []
    for epoch, seconds in ((1, 1.0), (2, 1.0), (3, 5.0)):
        clocks.wall += seconds
        timer.log(logger, epoch=epoch, env_steps=100)
        logger.dump_tabular()
        capsys.readouterr()
        timer.progress(logger)
        lines.append(capsys.readouterr().out.strip())
    assert lines[1].endswith("ETA 8s (provisional: measured in the warm-up, before env step 200)")
    assert lines[2].endswith("SPS  ETA 35s")  # 7 epochs left at 5 s (all 3 epochs' mean would give 16s)
    # DQN's default warm-up (100 of 4,000 steps) is no warm-up to speak of; a resumed run past it neither
    assert EpochTimer(epochs=10, warmup=100, steps_per_epoch=4000).warmup_note() is None
    assert EpochTimer(epochs=10, first_epoch=2, warmup=200, steps_per_epoch=100).warmup_note() is None
    # a warm-up that no whole epoch follows: the whole run, or the share of it that it is
    note = EpochTimer(epochs=1, warmup=1000, steps_per_epoch=800).warmup_note()
    assert note is not None and note.endswith("(the whole run of 1 epoch)")
    note = EpochTimer(epochs=1, warmup=400, steps_per_epoch=800).warmup_note()
    assert note is not None and note.endswith("(the first 50% of the run's 800 steps)")
    note = EpochTimer(epochs=2, warmup=1500, steps_per_epoch=1000).warmup_note()
    assert note is not None and note.endswith("(the first 75% of the run's 2,000 steps)")


def test_a_run_in_a_long_warm_up_says_so_before_its_first_epoch_and_quiet_says_nothing(tmp_path, capsys):
    from tests.conftest import run_cli

    args = (
        "algo=dqn",
        "algo.epochs=3",
        "algo.steps_per_epoch=200",
        "algo.start_steps=400",
        "algo.update_after=400",
    )
    res = run_cli(f"hydra.run.dir={tmp_path / 'a'}", *args, "logger.console=line", "algo.num_test_episodes=1")
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    note = "Warm-up until env step 400: random actions and no gradient steps (epochs 1-2 of 3)"
    assert any(
        ln.startswith(note)
        for ln in lines[: lines.index(next(ln for ln in lines if ln.startswith("Epoch 1 ")))]
    )
    EpochLogger(None, console="quiet").log("a message")  # quiet (and ranks other than 0) print nothing
    assert capsys.readouterr().out == ""
