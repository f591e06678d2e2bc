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
