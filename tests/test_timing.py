"""The throughput columns and the console progress line (rlexp/timing.py)."""

from __future__ import annotations

import pytest

from rlexp import timing
from rlexp.logger import EpochLogger
from rlexp.timing import EpochTimer, format_duration


def test_format_duration():
    assert [format_duration(s) for s in (0.4, 45, 200, 3720)] == ["0s", "45s", "3m20s", "1h02m"]


def test_epoch_timer_logs_shares_of_the_epoch_and_restarts(capsys, monkeypatch):
    logger = EpochLogger(None)
    timer = EpochTimer(epochs=4)
    timer.epoch_start -= 2.0  # the epoch started 2 s ago ...
    timer.add("env", timer.now() - 0.5)  # ... of which 0.5 s stepping the env
    timer.add("act", timer.now() - 0.25)
    timer.update(timer.now() - 1.0, timing.comm.seconds())
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
