"""Which CPU kernel computes the torch networks' large linear products: torch's own (MKL or its BLAS) or
oneDNN's, the kernel library TensorFlow uses. Chosen by measuring on the machine that runs, once, cached.

The choice is a threshold in multiply-adds (rows x in_features x out_features): products from it on go
through oneDNN (:class:`rlexp.nn.torch.Linear`), smaller ones through torch's own kernel; None: torch's
everywhere. No fixed rule holds across CPUs (docs/benchmarks.md, "Kernel choices"): on the 2-vCPU AMD EPYC
where rlexp was first measured, torch's float32 product ran at about half oneDNN's speed from ~6M
multiply-adds on, while on an Intel Xeon (Sapphire Rapids) torch's own was as fast or faster at every
size the networks use.

:func:`onednn_min_macs` measures a forward and backward pass of a few layer shapes of rlexp's networks with
both kernels, interleaved (so that both see the same load) and keeps the fastest of several repetitions
of each; the threshold is the smallest probed size from which oneDNN is at least ``MARGIN`` faster on every
larger probe. The result is cached per CPU model, torch version and thread count in
``$XDG_CACHE_HOME/rlexp/kernels.json`` (``~/.cache`` by default), so the measurement (about a second) is
paid once per machine. ``RLEXP_ONEDNN`` overrides it: ``never`` (torch's kernel), an integer threshold
(``0``: oneDNN for every product), or ``auto`` (the default: measured).

A run keeps the threshold it started with: the learner saves it in every checkpoint and a resumed run
uses the saved one (the kernels round differently, and a resume must repeat the numbers); all MPI ranks
take rank 0's.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlexp.errors import RLExpError

if TYPE_CHECKING:
    import torch

# (rows, in_features, out_features) probed: SAC/TD3 minibatches of Spinning Up's (100) and the zoo's (256)
# through 256-wide and 400x300 layers, CrossQ's joint 512-row batches, and a large product
PROBES = ((64, 256, 256), (100, 256, 256), (256, 256, 256), (256, 400, 300), (512, 256, 256), (512, 512, 512))
MARGIN = 0.95  # oneDNN must take at most this share of torch's time to be chosen
REPEATS = 5  # repetitions per kernel and probe (the fastest counts)
ENV_VAR = "RLEXP_ONEDNN"
# The threshold of runs saved before the choice was measured (the rule of the AMD EPYC): what they resume with
LEGACY_MIN_MACS = 6_000_000


def cache_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlexp" / "kernels.json"


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def choose(timings: dict[tuple[int, int, int], tuple[float, float]]) -> int | None:
    """The threshold from measured times ``{(rows, in, out): (torch's seconds, oneDNN's seconds)}``: the
    smallest probed size (in multiply-adds) from which oneDNN takes at most MARGIN of torch's time on
    every larger probe too; None when it does not on the largest."""
    ordered = sorted(timings.items(), key=lambda item: item[0][0] * item[0][1] * item[0][2])
    threshold = None
    for (rows, n_in, n_out), (native, onednn) in reversed(ordered):
        if onednn > MARGIN * native:
            break
        threshold = rows * n_in * n_out
    return threshold


def measure(probes: tuple[tuple[int, int, int], ...] = PROBES, repeats: int = REPEATS) -> dict:
    """Seconds of one forward and backward pass of each probe's layer with torch's kernel and with
    oneDNN's, the fastest of ``repeats`` interleaved repetitions."""
    import torch

    from rlexp.nn import torch as nn_torch

    timings = {}
    for rows, n_in, n_out in probes:
        layer = torch.nn.Linear(n_in, n_out)
        x = torch.randn(rows, n_in, requires_grad=True)
        grad = torch.randn(rows, n_out)
        native = (torch.nn.functional.linear, x, layer, grad)
        onednn = (nn_torch._OneDNNLinear.apply, x, layer, grad)
        best = {"native": float("inf"), "onednn": float("inf")}
        for f, *args in (native, onednn):
            _pass(f, *args)  # warm-up: the first call of each kernel allocates
        calls = max(1, int(2e7 // (rows * n_in * n_out)))  # about 20M multiply-adds a repetition
        for _ in range(repeats):
            for name, (f, *args) in (("native", native), ("onednn", onednn)):
                start = time.perf_counter()
                for _ in range(calls):
                    _pass(f, *args)
                best[name] = min(best[name], (time.perf_counter() - start) / calls)
        timings[(rows, n_in, n_out)] = (best["native"], best["onednn"])
    return timings


def _pass(
    f: Callable[..., torch.Tensor], x: torch.Tensor, layer: torch.nn.Linear, grad: torch.Tensor
) -> None:
    """One forward and backward pass of ``layer`` on ``x`` through the linear function ``f``."""
    f(x, layer.weight, layer.bias).backward(grad)


def override_value() -> int | str | None:
    """``RLEXP_ONEDNN`` read: ``"auto"`` (unset too), None (``never``) or a threshold; another value is an
    RLExpError (launch checks it before a run starts)."""
    text = os.environ.get(ENV_VAR, "auto").strip()
    if text.lower() in ("auto", "never"):
        return None if text.lower() == "never" else "auto"
    try:
        return max(0, int(text))
    except ValueError:
        raise RLExpError(
            f"{ENV_VAR}={text!r} is unknown; use auto, never or a number of multiply-adds"
        ) from None


def onednn_min_macs(measure_fn: Callable[[], dict] = measure) -> int | None:
    """This machine's threshold (see the module docstring): ``RLEXP_ONEDNN`` if set, else the cached
    measurement, else a new measurement (cached)."""
    override = override_value()
    if override != "auto":
        return override  # type: ignore[return-value]
    import torch

    from rlexp.nn import torch as nn_torch

    if nn_torch._ONEDNN_LINEAR is None:  # a torch built without oneDNN
        return None
    key = f"{cpu_model()} | torch {torch.__version__} | threads {torch.get_num_threads()}"
    path = cache_file()
    cached = _read(path)
    if key in cached:
        return cached[key]["onednn_min_macs"]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 (held until the measurement is written)
    except OSError:
        return choose(measure_fn())  # a read-only home: measured again next time
    with lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)  # processes starting together measure once and agree
        cached = _read(path)
        if key in cached:
            return cached[key]["onednn_min_macs"]
        timings = measure_fn()
        threshold = choose(timings)
        entry = {
            "onednn_min_macs": threshold,
            "probes_ms": {
                f"{r}x{i}x{o}": [round(1e3 * t, 4) for t in ts] for (r, i, o), ts in timings.items()
            },
        }
        try:
            from rlexp.fileio import atomic_write_text

            atomic_write_text(path, json.dumps({**cached, key: entry}, indent=1) + "\n")
        except OSError:
            pass
    return threshold


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
