"""What a run prints: colours only on a terminal, logger.console (table / line / quiet), epoch numbers
that match progress.txt, no library chatter, and ``--help``."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import run_cli

FAST = ("algo.epochs=3", "algo.steps_per_epoch=400")


def test_no_colour_codes_unless_on_a_terminal(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'a'}", *FAST)
    assert res.returncode == 0 and "Run finished" in res.stdout
    assert "\x1b[" not in res.stdout + res.stderr  # a SLURM log or a pipe gets plain text
    forced = run_cli(f"hydra.run.dir={tmp_path / 'b'}", *FAST, env={"FORCE_COLOR": "1"})
    assert "\x1b[32;1mRun finished" in forced.stdout


@pytest.mark.mpi
def test_mpi_ranks_colour_only_what_the_launcher_colours(tmp_path):
    """Open MPI gives the ranks a pseudo-terminal: they take the launcher's choice (its stdout a pipe
    here), so rank 0's "Logging data to" line is plain when piped and coloured with FORCE_COLOR."""
    args = ("comm.procs=2", "algo.epochs=1", "algo.steps_per_epoch=200")
    res = run_cli(f"hydra.run.dir={tmp_path / 'a'}", *args)
    assert res.returncode == 0 and f"Logging data to {tmp_path / 'a'}" in res.stdout, res.stderr[-2000:]
    assert "\x1b[" not in res.stdout + res.stderr
    forced = run_cli(f"hydra.run.dir={tmp_path / 'b'}", *args, env={"FORCE_COLOR": "1"})
    assert f"\x1b[32;1mLogging data to {tmp_path / 'b'}" in forced.stdout, forced.stdout


def test_console_line_prints_one_line_per_epoch_with_progress_numbers(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", *FAST, "logger.console=line")
    assert res.returncode == 0, res.stderr[-2000:]
    table = pd.read_table(tmp_path / "r" / "progress.txt")
    lines = [line for line in res.stdout.splitlines() if line.startswith("Epoch ")]
    assert len(lines) == 3 and "|" not in res.stdout
    for line, (_, row) in zip(lines, table.iterrows(), strict=True):
        fields = line.split()
        assert fields[:4] == [
            "Epoch",
            str(int(row["Epoch"])),
            "TotalEnvInteracts",
            str(int(row["TotalEnvInteracts"])),
        ]
        assert float(fields[fields.index("AverageEpRet") + 1]) == pytest.approx(row["AverageEpRet"], rel=2e-3)


def test_console_quiet_prints_no_epoch_and_stops_count_epochs_as_progress_does(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", *FAST, "logger.console=quiet")
    assert res.returncode == 0 and "Epoch" not in res.stdout and "|" not in res.stdout
    # Messages count completed epochs and name progress.txt's last Epoch (numbered from 0).
    more = run_cli(f"resume={tmp_path / 'r'}", "algo.epochs=4", "logger.console=quiet")
    assert f"Continuing {tmp_path / 'r'} after 3 epochs" in more.stdout
    policy = run_cli(str(tmp_path / "r"), "--norender", "-n", "1", module="rlexp.test_policy")
    assert "saved after 4 epochs" in policy.stdout
    assert list(pd.read_table(tmp_path / "r" / "progress.txt")["Epoch"]) == [0, 1, 2, 3]


def test_bad_console_value_is_one_line(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "logger.console=verbose")
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1] == (
        "rlexp: error: logger.console='verbose' is unknown; choose one of: table, line, quiet"
    )


def test_library_info_logs_stay_out_of_the_console(tmp_path):
    # PyOpenGL logs "No OpenGL_accelerate module loaded" at INFO when MuJoCo's renderer imports it; a
    # job's logging (Hydra's, at INFO) printed it. An env module that logs the same way stands in.
    (tmp_path / "chatty_env.py").write_text(
        "import logging\n"
        "import gymnasium as gym\n"
        "logging.getLogger('OpenGL.acceleratesupport').info('No OpenGL_accelerate module loaded')\n"
        "gym.register('Chatty-v0', entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    )
    res = run_cli(
        f"hydra.run.dir={tmp_path / 'r'}",
        "env=gym",
        "env.id=chatty_env:Chatty-v0",
        *FAST,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "OpenGL_accelerate" not in res.stdout + res.stderr


def test_help_lists_options_with_the_users_presets_and_key_comments(tmp_path):
    mine = tmp_path / "myconf" / "env"
    mine.mkdir(parents=True)
    (mine / "MyPendulum.yaml").write_text(
        "defaults:\n  - /env/Pendulum-v1@_here_\n  - _self_\nmax_ep_len: 100  # shorter episodes\n"
    )
    res = run_cli("algo=sac", f"hydra.searchpath=[file://{tmp_path / 'myconf'}]", "env=MyPendulum", "--help")
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout
    assert out.startswith("rlexp: Spinning Up's deep-RL algorithms")
    assert "  algo            c51, crossq, ddpg, dqn, ppo, qrdqn, rainbow, *sac, td3, tqc, trpo, vpg" in out
    env_line = next(line for line in out.splitlines() if line.startswith("  env "))
    assert "*MyPendulum" in env_line and "HalfCheetah-v4" in env_line
    assert "hydra/sweeper" in out and "optuna" in out
    assert "# --- algo=sac: the keys algo.* ---" in out
    assert any(line.startswith("alpha: ") and "  # " in line for line in out.splitlines())  # SAC's comments
    assert "max_ep_len: 100  # shorter episodes" in out
    bad = run_cli("algo=nope", "--help")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("rlexp: error: unknown algo option 'nope'")
