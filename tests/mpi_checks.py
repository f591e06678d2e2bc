"""Run under ``mpiexec -n 2``: checks of rlexp.comm against values computed by hand. Exits non-zero on failure."""

from __future__ import annotations

import math
import sys

import numpy as np
import torch

import rlexp.comm.torch as ct
from rlexp import comm


def main() -> None:
    rank, size = comm.proc_id(), comm.num_procs()
    assert size == 2, size

    # pooled statistics over uneven data: all values are [1, 2, 3, 10]
    x = [1.0, 2.0, 3.0] if rank == 0 else [10.0]
    mean, std, lo, hi = comm.statistics_scalar(x, with_min_and_max=True)
    ref = np.array([1.0, 2.0, 3.0, 10.0])
    assert math.isclose(mean, ref.mean()) and math.isclose(std, ref.std()), (mean, std)
    assert (lo, hi) == (1.0, 10.0), (lo, hi)
    # one rank with nothing
    mean, std, lo, hi = comm.statistics_scalar([] if rank == 0 else [5.0, 7.0], with_min_and_max=True)
    assert (mean, std, lo, hi) == (6.0, 1.0, 5.0, 7.0), (mean, std, lo, hi)
    # nothing anywhere: NaN, no crash
    assert all(math.isnan(v) for v in comm.statistics_scalar([], with_min_and_max=True))
    assert comm.mpi_avg(float(rank)) == 0.5 and comm.mpi_sum(np.array([1.0, rank])).tolist() == [2.0, 1.0]

    # parameters start identical after sync_params
    torch.manual_seed(100 + rank)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    ct.sync_params(net.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy()
    gathered = np.zeros((size, flat.size))
    gathered[rank] = flat
    comm.allreduce_(gathered)
    assert np.array_equal(gathered[0], gathered[1]), "parameters differ after sync_params"

    # gradients averaged across ranks, in exactly one allreduce
    def grads_for(r: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(r)
        xb, yb = torch.randn(8, 3, generator=g), torch.randn(8, 2, generator=g)
        net.zero_grad()
        ((net(xb) - yb) ** 2).mean().backward()
        return [p.grad.clone() for p in net.parameters()]

    expected = [(a + b) / 2 for a, b in zip(grads_for(0), grads_for(1), strict=False)]
    grads_for(rank)
    calls = []
    real = ct.allreduce_
    ct.allreduce_ = lambda buf, op="sum": calls.append(buf.size) or real(buf, op)
    ct.avg_grads(net.parameters())
    ct.allreduce_ = real
    assert len(calls) == 1 and calls[0] == flat.size, calls
    for p, e in zip(net.parameters(), expected, strict=False):
        assert torch.allclose(p.grad, e, atol=1e-6), "averaged gradient is wrong"

    # scalars (PPO's KL) averaged in the same single allreduce as the gradients
    grads_for(rank)
    calls.clear()
    ct.allreduce_ = lambda buf, op="sum": calls.append(buf.size) or real(buf, op)
    extras = ct.avg_grads(net.parameters(), [rank + 0.25, 3.0 * rank])
    ct.allreduce_ = real
    assert len(calls) == 1 and calls[0] == flat.size + 2, calls
    assert extras == [0.75, 1.5], extras
    for p, e in zip(net.parameters(), expected, strict=False):
        assert torch.allclose(p.grad, e, atol=1e-6), "averaged gradient is wrong (with extras)"
    print(f"OK rank {rank}")


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
