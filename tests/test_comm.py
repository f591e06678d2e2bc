import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from rlexp import comm
from rlexp.comm.torch import avg_grads, sync_params

HERE = Path(__file__).resolve().parent


def mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


def test_single_process_without_mpi():
    """No launcher: a world of one, statistics still right, torch helpers are no-ops."""
    assert comm.proc_id() == 0 and comm.num_procs() == 1
    mean, std, lo, hi = comm.statistics_scalar([1.0, 2.0, 3.0, 10.0], with_min_and_max=True)
    ref = np.array([1.0, 2.0, 3.0, 10.0])
    assert math.isclose(mean, ref.mean()) and math.isclose(std, ref.std()) and (lo, hi) == (1.0, 10.0)
    assert all(math.isnan(v) for v in comm.statistics_scalar([]))
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 2.0)
    assert avg_grads([p]) == [] and avg_grads([p], [0.5]) == [0.5]
    sync_params([p])
    assert p.grad.tolist() == [2.0, 2.0, 2.0] and p.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.mpi
def test_pooled_statistics_and_gradient_averaging_under_mpiexec():
    env = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMP_NUM_THREADS": "1",
    }
    res = subprocess.run(
        [mpiexec(), "-n", "2", "--oversubscribe", sys.executable, str(HERE / "mpi_checks.py")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=HERE.parent,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK rank 0" in res.stdout and "OK rank 1" in res.stdout
