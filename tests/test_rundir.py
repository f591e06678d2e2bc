"""Nothing lost, whatever stops a run (issue 14): launcher death, foreign directories, damaged files.

Each test reproduces a case in which a run lost or damaged data, or ended with a traceback, before
rlexp/rundir.py, rlexp/mpirun.py and the checks they run existed.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlexp.checkpoint import latest_checkpoint, list_checkpoints, load_torch, save_torch
from rlexp.errors import RLExpError
from rlexp.fileio import atomic_write_text
from rlexp.rundir import claim, in_use, training_lock
from tests.conftest import ROOT, composed, run_cli, train

FAST = (
    "algo=ppo",
    "env=CartPole-v1",
    "algo.steps_per_epoch=500",
    "algo.train_pi_iters=5",
    "algo.train_v_iters=5",
)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line(res: subprocess.CompletedProcess, fragment: str, code: int = 2) -> None:
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.returncode == code, res.stdout[-2000:] + res.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("rlexp: error: ") and fragment in lines[0], res.stderr


def _start(*args: str, cwd: Path = ROOT) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    return subprocess.Popen(
        [sys.executable, "-m", "rlexp", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _wait_for(condition, what: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _processes_mentioning(text: str) -> list[int]:
    """PIDs of live (not zombie) processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A PPO run of 2 epochs with a checkpoint after each."""
    run = tmp_path_factory.mktemp("finished") / "ppo"
    train(run, *FAST, "algo.epochs=2", "algo.save_freq=1")
    return run


def _copy(run: Path, tmp: Path) -> Path:
    return Path(shutil.copytree(run, tmp / "run"))


# 1. A run does not outlive its launcher; SIGHUP is a stop with a checkpoint.


@pytest.mark.mpi
def test_killing_the_launcher_ends_its_ranks_within_seconds(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(f"hydra.run.dir={run_dir}", *FAST, "comm.procs=2", "algo.epochs=500")
    _wait_for(
        lambda: (
            (run_dir / "progress.txt").is_file()
            and len((run_dir / "progress.txt").read_text().splitlines()) > 1
        ),
        "a row",
    )
    assert len(_processes_mentioning(f"rlexp.worker {run_dir}")) >= 2  # mpiexec and the ranks
    proc.kill()
    proc.wait()
    _wait_for(lambda: not _processes_mentioning(f"rlexp.worker {run_dir}"), "the ranks to end", timeout=15)
    # Nothing holds the directory any more: the same command continues the run.
    rows = len(pd.read_table(run_dir / "progress.txt"))
    res = run_cli(f"hydra.run.dir={run_dir}", *FAST, "comm.procs=2", "algo.epochs=3", timeout=120)
    assert (
        res.returncode == 2 and "already holds a different run (algo.epochs: 500 there, 3 now)" in res.stderr
    )
    assert len(pd.read_table(run_dir / "progress.txt")) == rows  # the refused job touched nothing


def test_the_directory_stays_claimed_while_a_training_process_lives(tmp_path, finished):
    run = _copy(finished, tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from rlexp.rundir import training_lock\n"
         "with training_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)", str(run)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"  # an orphaned rank of an earlier job
        before = _snapshot(run)
        res = run_cli(f"resume={run}", "algo.epochs=3", timeout=120)
        _one_line(res, "is in use by training processes of an earlier job")
        assert _snapshot(run) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.mpi
def test_sighup_stops_with_a_checkpoint_and_the_run_continues(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(f"hydra.run.dir={run_dir}", *FAST, "comm.procs=2", "algo.epochs=500")
    _wait_for(lambda: len(list_checkpoints(run_dir)) >= 1 or (run_dir / "progress.txt").is_file(), "training")
    proc.send_signal(signal.SIGHUP)
    out, _ = proc.communicate(timeout=120)
    stopped = max(list_checkpoints(run_dir))
    assert proc.returncode == 128 + signal.SIGHUP, out[-3000:]
    assert f"stopped by SIGHUP after {stopped} epoch" in out and ", checkpoint saved" in out
    assert len(pd.read_table(run_dir / "progress.txt")) == stopped
    res = run_cli(f"resume={run_dir}", "algo.epochs=" + str(stopped + 1), timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert len(pd.read_table(run_dir / "progress.txt")) == stopped + 1


# 2. A new run never touches files it did not write; 3. claiming is atomic.


def _foreign_progress(d: Path) -> None:
    (d / "progress.txt").write_text("Epoch\tAverageEpRet\n0\t1.0\n1\t2.0\n")


def _spinup_run(d: Path) -> None:
    _foreign_progress(d)
    (d / "config.json").write_text('{"exp_name": "ppo"}\n')
    (d / "vars.pkl").write_bytes(b"\x80\x04N.")


def _stale_checkpoint(d: Path) -> None:
    (d / "checkpoints").mkdir()
    (d / "checkpoints" / "epoch_000003.pt").write_bytes(b"PK\x05\x06" + b"\0" * 18)


@pytest.mark.parametrize(
    "make", [_foreign_progress, _spinup_run, _stale_checkpoint], ids=["progress", "spinup", "checkpoint"]
)
def test_a_new_run_refuses_a_directory_holding_other_files(tmp_path, make):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    make(run_dir)
    before = _snapshot(tmp_path)
    for _ in range(2):  # the second try too: nothing was left behind by the first
        res = run_cli(f"hydra.run.dir={run_dir}", *FAST, "algo.epochs=1", timeout=120)
        _one_line(res, f"run directory {run_dir} is not empty and holds no rlexp run")
        assert _snapshot(tmp_path) == before and sorted(os.listdir(run_dir)) == sorted(os.listdir(run_dir))
    assert not (run_dir / ".lock").exists() and not (run_dir / "config.yaml").exists()


def test_the_lock_is_taken_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with open(run_dir / ".lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another launcher, between its claim and its first record
        res = run_cli(f"hydra.run.dir={run_dir}", *FAST, "algo.epochs=1", timeout=120)
    _one_line(res, "is in use by another rlexp process")
    assert sorted(os.listdir(run_dir)) == [".lock"]


# 4. A resume that fails changes nothing; 5. progress.txt stays a valid table.


def _few_rows(run: Path) -> None:
    lines = (run / "progress.txt").read_text().splitlines(keepends=True)
    (run / "progress.txt").write_text("".join(lines[:2]))


def _bad_crc(run: Path) -> None:
    path = latest_checkpoint(run)[1]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the tensor data: torch's reader does not notice
    path.write_bytes(bytes(data))


def _cut_row(run: Path) -> None:
    text = (run / "progress.txt").read_text()
    (run / "progress.txt").write_text(text[: len(text) - 40])  # the checkpoint's own row cut off


def _learner_misfit(run: Path) -> None:
    path = latest_checkpoint(run)[1]
    ckpt = load_torch(path)
    weights = ckpt["learner"]["modules"]["ac"]
    key = next(iter(weights))
    weights[key] = weights[key][:-1]  # a tensor of the wrong shape: found only when the learner loads it
    save_torch(path, ckpt)


BAD = {
    "few rows": (_few_rows, "has 1 rows, fewer than the 2 epochs of its checkpoint"),
    "bad CRC": (_bad_crc, "fails the CRC check"),
    "cut-off row": (_cut_row, "line 3 is cut off or damaged"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_failed_resume_changes_nothing(tmp_path, finished, case):
    run = _copy(finished, tmp_path)
    damage, fragment = BAD[case]
    damage(run)
    before = _snapshot(run)
    _one_line(run_cli(f"resume={run}", "algo.epochs=4", timeout=120), fragment)
    assert _snapshot(run) == before
    # The original command is still this run, not "a different run".
    _one_line(run_cli(f"hydra.run.dir={run}", *FAST, "algo.epochs=2", "algo.save_freq=1"), fragment)


def test_a_resume_whose_ranks_fail_puts_the_records_back(tmp_path, finished):
    run = _copy(finished, tmp_path)
    _learner_misfit(run)
    before = {name: (run / name).read_bytes() for name in ("config.yaml", "config.json")}
    res = run_cli(f"resume={run}", "algo.epochs=4", timeout=120)
    assert res.returncode == 2 and "rlexp: error:" in res.stderr, res.stderr[-3000:]
    assert {name: (run / name).read_bytes() for name in before} == before
    assert not list(run.glob("provenance.resume*.json"))


def test_a_cut_off_last_row_after_the_checkpoint_is_repaired(tmp_path, finished):
    run = _copy(finished, tmp_path)
    (list_checkpoints(run)[2]).unlink()  # the newest checkpoint is now epoch 1: row 2 comes again
    with open(run / "progress.txt", "a") as f:
        f.write("2\t17.5\t3.1")  # a crash in the middle of writing a row
    res = run_cli(f"resume={run}", "algo.epochs=2", timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    table = pd.read_table(run / "progress.txt")
    assert table["Epoch"].tolist() == [0, 1] and not table.isna().all(axis=1).any()
    header = (run / "progress.txt").read_text().splitlines()[0].split("\t")
    assert all(
        len(line.split("\t")) == len(header) for line in (run / "progress.txt").read_text().splitlines()
    )


def test_plot_reads_a_cut_off_log_and_names_a_damaged_one(tmp_path, finished):
    run = _copy(finished, tmp_path)
    with open(run / "progress.txt", "a") as f:
        f.write("2\t17.5\t3.1")  # the last row cut off: left out
    res = run_cli(str(run), "-o", str(tmp_path / "fig.png"), module="rlexp.plot", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    (tmp_path / "dir.png").mkdir()
    res = run_cli(str(run), "-o", str(tmp_path / "dir.png"), "--force", module="rlexp.plot", timeout=120)
    _one_line(res, "dir.png is a directory")
    with open(run / "progress.txt", "a") as f:
        f.write("\t".join(["9"] * 40) + "\n")  # a row glued onto it: 40+ fields under the header
    res = run_cli(str(run), "-o", str(tmp_path / "fig2.png"), module="rlexp.plot", timeout=120)
    _one_line(res, "progress.txt is not a whole table")


# 6. A damaged checkpoint is refused, never loaded.


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_test_policy_refuses_a_damaged_checkpoint(tmp_path, finished, damage):
    run = _copy(finished, tmp_path)
    path = latest_checkpoint(run)[1]
    if damage == "flip":
        _bad_crc(run)
        fragment = "fails the CRC check"
    else:
        path.write_bytes(path.read_bytes()[:-100])
        fragment = "truncated or damaged"
    res = run_cli(str(run), "-n", "1", module="rlexp.test_policy", timeout=120)
    _one_line(res, fragment)
    assert "weights_only" not in res.stderr
    # the error names the checkpoint before it and how to go on from there; both ways work
    assert f"the checkpoint before it is epoch_000001.pt: move {path.name} out of" in res.stderr, res.stderr
    res = run_cli(str(run), "-n", "1", "--itr", "1", module="rlexp.test_policy", timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    path.rename(tmp_path / path.name)
    progress = train(run, f"resume={run}", "algo.epochs=3")
    assert (
        len(progress) == 3 and progress["Epoch"].is_unique
    )  # the second epoch again, from the first one's checkpoint


# 7. Loading a run executes no code from it.


def test_loading_a_run_imports_nothing_from_its_directory(tmp_path, finished):
    run = _copy(finished, tmp_path)
    marker = tmp_path / "pwned"
    (run / "evil_envs.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = (run / "config.yaml").read_text().replace("id: CartPole-v1", "id: evil_envs:CartPole-v1")
    (run / "config.yaml").write_text(config)
    for module, args in [
        ("rlexp.test_policy", [str(run), "-n", "1"]),
        ("rlexp", [f"resume={run}", "algo.epochs=3"]),
    ]:
        res = subprocess.run(
            [sys.executable, "-m", module, *args], cwd=run, capture_output=True, text=True, timeout=120
        )
        _one_line(res, "module 'evil_envs' is not installed, only in the current directory")
        assert not marker.exists()
    # The documented opt-in imports it (and the run then fails on its own terms).
    subprocess.run(
        [sys.executable, "-m", "rlexp.test_policy", str(run), "-n", "1", "--allow-env-import"],
        cwd=run, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert marker.exists()


# 8. A stop is a stop at any moment.


@pytest.mark.mpi
def test_a_stop_while_the_ranks_start_is_a_clean_stop(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(f"hydra.run.dir={run_dir}", *FAST, "comm.procs=2", "algo.epochs=50")
    _wait_for(lambda: (run_dir / "config.yaml").exists(), "the run's records")  # mpiexec starts next
    time.sleep(0.3)  # the ranks are importing their libraries
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "stopped by SIGTERM after 1 epoch, checkpoint saved" in out and "exited with status" not in out
    assert list(list_checkpoints(run_dir)) == [1]


def test_a_stop_before_training_starts_is_a_clean_stop(tmp_path):
    run_dir = tmp_path / "run"
    proc = _start(f"hydra.run.dir={run_dir}", *FAST, "algo.epochs=50")

    def handles_sigterm() -> bool:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:")).split()[1], 16)
        return bool(caught & (1 << (signal.SIGTERM - 1)))

    _wait_for(handles_sigterm, "the launcher's stop handler")
    assert not (run_dir / "config.yaml").exists()  # Hydra is still loading: nothing is written yet
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert list(list_checkpoints(run_dir)) == [1] and "stopped by SIGTERM after 1 epoch," in out


# 9. One line, never a traceback.


def test_a_run_directory_that_is_a_file_or_below_one_is_one_line(tmp_path):
    file = tmp_path / "file"
    file.write_text("mine\n")
    for run_dir in (file, file / "run"):
        res = run_cli(f"hydra.run.dir={run_dir}", *FAST, "algo.epochs=1", timeout=120)
        _one_line(res, str(file))
        assert "Traceback" not in res.stderr and file.read_text() == "mine\n"


def test_a_write_error_names_the_file(tmp_path):
    (tmp_path / "a_file").write_text("")
    with pytest.raises(
        RLExpError, match=r"cannot write .*a_file/progress.txt: a part of that path is a file"
    ):
        atomic_write_text(tmp_path / "a_file" / "progress.txt", "x")


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("env.id=..x:Foo-v0", "'..x' is not a module name"),
    ],
)
def test_more_bad_input_is_one_line(tmp_path, override, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", *FAST, "algo.epochs=1", override, timeout=120)
    _one_line(res, fragment)
    assert not (tmp_path / "run").exists()


SBATCH_REFUSED = "sbatch: error: Batch job submission failed: Invalid partition name specified"
NO_RESULT = """Job 17 (task: 0) with path /s/.submitit/17/17_0_result.pkl
has not produced any output (state: FAILED)
Error stream produced:
----------------------------------------
some library's warning
rlexp: error: job 0 (seed=1): env.id='Nope-v0' is unknown
"""
CANCELLED = """Job 17 (task: 0) with path /s/.submitit/17/17_0_result.pkl
has not produced any output (state: CANCELLED by 0)
No error stream produced. Look at stdout: /s/.submitit/17/17_0_log.out
----------------------------------------
epoch 3
"""
RAISED = """Job (task=0) failed during processing with trace:
----------------------
Traceback (most recent call last):
  File "x.py", line 1, in <module>
ValueError: boom
----------------------
You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:
  - /s/17_0_log.err
  - /s/17_0_log.out"""


@pytest.mark.parametrize(
    "error,text,line",
    [
        (
            "FailedJobError",
            SBATCH_REFUSED,
            "SLURM refused the job: sbatch: Batch job submission failed: Invalid partition name specified",
        ),
        (
            "UncompletedJobError",
            NO_RESULT,
            "SLURM job 17 (task 0) failed: job 0 (seed=1): env.id='Nope-v0' is unknown",
        ),
        (
            "UncompletedJobError",
            CANCELLED,
            "SLURM job 17 (task 0) ended without a result (state CANCELLED by 0) "
            "(logs: /s/.submitit/17/17_0_log.out)",
        ),
        ("FailedJobError", RAISED, "a SLURM job (task 0) failed: ValueError: boom (logs: /s/17_0_log.out)"),
    ],
)
def test_a_slurm_failure_is_one_readable_line(error, text, line):
    # submitit's errors as its SLURM executor raises them (sbatch's stderr, a job without a result, a
    # job that raised); the first read "SLURM sbatch: error: ... failed: " before.
    from submitit.core import utils

    from rlexp.explain import user_message

    assert user_message(getattr(utils, error)(text)) == line


@pytest.mark.parametrize(
    "override,fragment",
    [
        (
            "+env.kwargs.g=oops",
            "env.id='Pendulum-v1' with env.kwargs={'g': 'oops'} fails on its first reset/step",
        ),
        ("algo.replay_size=100000000000", "algo.replay_size=100000000000 needs"),
    ],
)
def test_bad_env_settings_are_one_line(tmp_path, override, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", "algo=sac", "env=Pendulum-v1", override, timeout=120)
    _one_line(res, fragment)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_sac_without_hidden_layers_is_a_linear_policy_like_the_other_algorithms(tmp_path, backend):
    off = (
        "algo.steps_per_epoch=300",
        "algo.start_steps=100",
        "algo.update_after=100",
        "algo.update_every=50",
    )
    run_dir = tmp_path / "run"
    train(run_dir, "algo=sac", "env=Pendulum-v1", f"backend={backend}", "network.hidden_sizes=[]",
          "algo.epochs=1", "algo.num_test_episodes=1", *off)  # fmt: skip
    import rlexp

    learner = rlexp.load(run_dir).policy()._learner
    # the deterministic action is tanh(W o + b): atanh of it is affine in the observation
    rng = np.random.default_rng(0)
    x, y = rng.uniform(-0.3, 0.3, (2, 3))

    def pre_tanh(o):
        return np.arctanh(np.asarray(learner.act(o.astype(np.float32), deterministic=True), np.float64))

    for a, b in ((0.3, 0.7), (2.0, -1.0)):
        mixed = pre_tanh(a * x + b * y) - pre_tanh(np.zeros(3)) * (1 - a - b)
        np.testing.assert_allclose(mixed, a * pre_tanh(x) + b * pre_tanh(y), rtol=1e-3, atol=1e-4)
    # and it is not constant: a hidden layer of width 0 would be
    assert not np.allclose(pre_tanh(x), pre_tanh(y), atol=1e-5)


def test_unsupported_action_boxes_are_one_line():
    from gymnasium import spaces

    from rlexp.envs import check_spaces

    algo = composed("algo=sac").algo
    obs = spaces.Box(-1, 1, (3,))
    with pytest.raises(RLExpError, match=r"needs a flat action vector"):
        check_spaces(algo, "X-v0", obs, spaces.Box(-1, 1, (2, 2)))
    with pytest.raises(RLExpError, match=r"high <= low"):
        check_spaces(algo, "X-v0", obs, spaces.Box(low=np.array([-1.0, 0.5]), high=np.array([1.0, 0.5])))


def test_a_dollar_in_exp_name_plots(tmp_path, finished):
    run = _copy(finished, tmp_path)
    (run / "config.yaml").write_text(
        (run / "config.yaml").read_text().replace("exp_name: ppo_CartPole-v1", "exp_name: a$x^$b")
    )
    res = run_cli(str(run), "-o", str(tmp_path / "fig.png"), module="rlexp.plot", timeout=120)
    assert res.returncode == 0 and (tmp_path / "fig.png").is_file(), res.stderr[-2000:]


@pytest.mark.mpi
def test_failed_ranks_exit_with_their_status(tmp_path):
    run = tmp_path / "run"
    train(run, *FAST, "algo.epochs=1", "comm.procs=2")
    _learner_misfit(run)
    res = run_cli(f"resume={run}", "algo.epochs=2", timeout=120)
    lines = [line for line in res.stderr.splitlines() if "rlexp: error: the 2 MPI ranks" in line]
    assert res.returncode == 2 and lines and "exited with status 2" in lines[0], res.stderr[-3000:]


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_any_seed_trains(tmp_path, backend):
    """Every random stream is derived by numpy's SeedSequence, which takes any integer >= 0 (2**64 and
    beyond), and hands each library a 63-bit seed: no backend sees the run's seed itself."""
    train(tmp_path / "run", *FAST, f"backend={backend}", "algo.epochs=1", "seed=18446744073709551616")


# 10. One thread per rank by default.


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_one_thread_per_rank_by_default(backend):
    cfg = composed(f"backend={backend}", "comm.procs=2")
    assert cfg.backend.threads == 1 and cfg.backend.threads_per_rank(2) == 1


def test_in_use_tells_whether_a_job_holds_the_directory(tmp_path):
    """What bench_learning asks before it continues a run: held while a launcher claims it, free after,
    and asking creates no file."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert not in_use(run_dir) and list(run_dir.iterdir()) == []
    with claim(run_dir):
        assert in_use(run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", ".ranks.lock"]  # left behind, free
    assert not in_use(run_dir)
    with training_lock(run_dir):  # a rank of an earlier job still ending
        assert in_use(run_dir)
    assert not in_use(run_dir)
