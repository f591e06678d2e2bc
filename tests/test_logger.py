import json
import math

import pandas as pd
import pytest

from rlexp.errors import RLExpError
from rlexp.logger import EpochLogger


def test_progress_file_format_and_pooled_stats(tmp_path, capsys):
    log = EpochLogger(tmp_path, exp_name="demo")
    for epoch in range(2):
        log.store(EpRet=[1.0, 2.0], Loss=0.5)
        log.store(EpRet=[3.0], Loss=1.5)
        log.log_tabular("Epoch", epoch)
        log.log_tabular("EpRet", with_min_and_max=True)
        log.log_tabular("Loss", average_only=True)
        log.dump_tabular()
    log.close()
    lines = (tmp_path / "progress.txt").read_text().splitlines()
    assert lines[0].split("\t") == ["Epoch", "AverageEpRet", "StdEpRet", "MaxEpRet", "MinEpRet", "Loss"]
    df = pd.read_table(tmp_path / "progress.txt")
    assert len(df) == 2 and df["AverageEpRet"].tolist() == [2.0, 2.0] and df["MaxEpRet"][0] == 3.0
    assert math.isclose(df["StdEpRet"][0], pd.Series([1.0, 2.0, 3.0]).std(ddof=0))
    assert df["Loss"].tolist() == [1.0, 1.0]
    out = capsys.readouterr().out
    assert "|    AverageEpRet |               2 |" in out  # aligned console table


def test_epoch_without_episode_logs_nan_instead_of_crashing(tmp_path):
    log = EpochLogger(tmp_path)
    log.log_tabular("EpRet", with_min_and_max=True)  # nothing stored this epoch
    log.log_tabular("EpLen", average_only=True)
    log.dump_tabular()
    log.close()
    df = pd.read_table(tmp_path / "progress.txt")
    assert df.isna().all(axis=None)


def test_never_overwrites_existing_progress(tmp_path):
    (tmp_path / "progress.txt").write_text("old results\n")
    with pytest.raises(RLExpError, match="refusing to overwrite"):
        EpochLogger(tmp_path)
    assert (tmp_path / "progress.txt").read_text() == "old results\n"


def test_new_key_after_first_row_is_rejected(tmp_path):
    log = EpochLogger(tmp_path)
    log.log_tabular("A", 1)
    log.dump_tabular()
    with pytest.raises(KeyError, match="new key"):
        log.log_tabular("B", 2)
    log.close()


def test_config_json_sorted_with_exp_name_and_never_overwritten(tmp_path):
    log = EpochLogger(tmp_path, exp_name="exp")
    log.save_config({"b": 1, "a": (1, 2), "fn": len})
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg == {"a": [1, 2], "b": 1, "exp_name": "exp", "fn": "len"}
    assert list(cfg) == sorted(cfg)
    with pytest.raises(RLExpError):
        log.save_config({"b": 2})
    assert json.loads((tmp_path / "config.json").read_text())["b"] == 1
    log.close()


@pytest.mark.mpi
def test_the_episode_log_holds_every_ranks_episodes_and_resumes_with_the_run(tmp_path):
    """logger.episodes=true: episodes.csv has one line per training episode of either rank, in the row
    (Epoch) that counts it; a run cut back after epoch 1 and resumed writes the same file."""
    from tests.conftest import train
    from tests.test_resume import assert_resumes_exactly

    whole = tmp_path / "whole"
    args = ("env=CartPole-v1", "algo.steps_per_epoch=400", "algo.epochs=3", "algo.save_freq=1")
    progress = train(whole, *args, "comm.procs=2", "logger.episodes=true", "logger.console=quiet")
    episodes = pd.read_csv(whole / "episodes.csv")
    assert list(episodes.columns) == ["Epoch", "EpRet", "EpLen"]
    assert (episodes["EpRet"] == episodes["EpLen"]).all()  # CartPole: +1 per step
    by_epoch = episodes.groupby("Epoch")["EpRet"]
    assert by_epoch.mean().to_numpy() == pytest.approx(progress["AverageEpRet"].to_numpy())
    assert by_epoch.max().to_numpy() == pytest.approx(progress["MaxEpRet"].to_numpy())
    assert_resumes_exactly(whole, tmp_path / "part", 1)
    assert (tmp_path / "part" / "episodes.csv").read_text() == (whole / "episodes.csv").read_text()
