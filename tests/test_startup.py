"""What a command imports, which is most of its start-up (issue 72 item 9; the figures are
benchmarks/bench_startup.py's): ``--help``, ``--version`` and a dry run import no deep-learning
library, scipy.signal or pandas; a torch run imports neither torch's Dynamo (its optimizers would,
~1.3 s: rlexp.algos.torch_common._eager) nor scipy.signal and pandas."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "tensorflow", "torch._dynamo", "scipy.signal", "pandas", "matplotlib")

# `python -m rlexp ARGS`, then the heavy modules it imported, as a JSON line on stderr
PROGRAM = """
import atexit, json, runpy, sys
atexit.register(lambda: print("IMPORTED " + json.dumps(sorted(set({heavy}) & set(sys.modules))), file=sys.stderr))
sys.argv = ["rlexp", *{args}]
runpy.run_module("rlexp", run_name="__main__", alter_sys=True)
"""


def imported(*args: str, says: str = "Run finished") -> list[str]:
    """The modules of HEAVY that ``python -m rlexp ARGS`` imported (it must succeed and print ``says``)."""
    script = PROGRAM.format(heavy=HEAVY, args=list(args))
    res = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and says in res.stdout, res.stdout[-2000:] + res.stderr[-3000:]
    line = next(line for line in res.stderr.splitlines() if line.startswith("IMPORTED "))
    return json.loads(line.removeprefix("IMPORTED "))


@pytest.mark.parametrize(
    "args,says",
    [
        (["--help"], "usage: python -m rlexp"),
        (["algo=sac", "--help"], "--- algo=sac"),
        (["--version"], "rlexp "),
        (["dry_run=true"], "Dry run: the checks passed"),
        (["dry_run=true", "backend=tf", "algo=sac", "env=Pendulum-v1"], "Dry run: the checks passed"),
    ],
)
def test_commands_that_do_not_train_import_no_heavy_library(args, says):
    assert imported(*args, says=says) == []


@pytest.mark.parametrize(
    "algo",
    [
        ["algo=ppo", "algo.steps_per_epoch=300"],
        ["algo=dqn", "algo.optimizer=rmsprop", "algo.steps_per_epoch=300", "algo.update_after=100"],
    ],
)
def test_a_torch_run_imports_neither_dynamo_nor_scipy_signal_nor_pandas(tmp_path, algo):
    args = [*algo, "algo.epochs=2", "logger.console=quiet", f"hydra.run.dir={tmp_path / 'run'}"]
    assert imported(*args) == ["torch"]
    assert (tmp_path / "run" / "checkpoints" / "epoch_000002.pt").is_file()  # trained, saved (state_dict)
    more = ["algo.epochs=3", "logger.console=quiet", f"resume={tmp_path / 'run'}"]
    assert imported(*more, says="Continuing") == ["torch"]  # resumed: the optimizers' load_state_dict
