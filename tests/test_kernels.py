"""The CPU kernel of the torch networks' large products (rlexp.nn.kernels): chosen by measuring on the
machine, cached, overridable, and kept by a run across resumes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from rlexp.nn import kernels

from .conftest import run_cli
from .test_resume import assert_same_run, cut_back


def test_the_threshold_is_where_onednn_wins_on_every_larger_probe():
    fast, slow = (1.0, 0.5), (1.0, 1.0)  # (torch's seconds, oneDNN's seconds)
    probes = [(64, 256, 256), (100, 256, 256), (256, 256, 256), (512, 512, 512)]
    assert kernels.choose(dict(zip(probes, [slow, fast, fast, fast], strict=True))) == 100 * 256 * 256
    assert kernels.choose(dict(zip(probes, [fast, slow, fast, fast], strict=True))) == 256 * 256 * 256
    assert (
        kernels.choose(dict(zip(probes, [fast, fast, fast, slow], strict=True))) is None
    )  # the largest: torch
    assert kernels.choose(dict(zip(probes, [fast] * 4, strict=True))) == 64 * 256 * 256
    near = (1.0, 0.97)  # within the margin: not worth switching
    assert kernels.choose(dict(zip(probes, [near] * 4, strict=True))) is None


def test_the_machine_is_measured_once_and_the_result_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kernels.ENV_VAR, raising=False)
    calls = []

    def measured() -> dict:
        calls.append(1)
        return {(100, 256, 256): (1.0, 1.2), (256, 256, 256): (1.0, 0.8), (512, 512, 512): (1.0, 0.5)}

    assert kernels.onednn_min_macs(measured) == 256 * 256 * 256
    assert kernels.onednn_min_macs(measured) == 256 * 256 * 256 and len(calls) == 1
    (entry,) = json.loads((tmp_path / "rlexp" / "kernels.json").read_text()).values()
    assert entry["onednn_min_macs"] == 256 * 256 * 256 and entry["probes_ms"]["100x256x256"] == [
        1000.0,
        1200.0,
    ]
    monkeypatch.setenv(kernels.ENV_VAR, "never")
    assert kernels.onednn_min_macs(measured) is None
    monkeypatch.setenv(kernels.ENV_VAR, "0")
    assert kernels.onednn_min_macs(measured) == 0 and len(calls) == 1


def test_a_bad_kernel_override_is_one_line(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "algo.epochs=1", env={kernels.ENV_VAR: "fast"})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [
        "rlexp: error: RLEXP_ONEDNN='fast' is unknown; use auto, never or a number of multiply-adds"
    ]
    assert not (tmp_path / "r").exists()  # refused before the run directory is made


# SAC at Spinning Up's batch of 100 through 256-wide layers: 6.6M multiply-adds a product, where the two
# kernels' roundings differ
SAC = (
    "algo=sac",
    "env=Pendulum-v1",
    "algo.steps_per_epoch=300",
    "algo.start_steps=200",
    "algo.update_after=200",
    "algo.num_test_episodes=1",
    "algo.keep_checkpoints=null",
    "algo.epochs=3",
)


def test_a_run_resumes_with_the_kernels_it_started_with(tmp_path):
    onednn, torch_own = {kernels.ENV_VAR: "0"}, {kernels.ENV_VAR: "never"}
    whole, part, other = tmp_path / "whole", tmp_path / "part", tmp_path / "other"
    res = run_cli(f"hydra.run.dir={whole}", *SAC, env=onednn)
    assert res.returncode == 0, res.stderr[-2000:]
    res = run_cli(f"hydra.run.dir={other}", *SAC, env=torch_own)
    assert res.returncode == 0, res.stderr[-2000:]
    a, b = pd.read_table(whole / "progress.txt"), pd.read_table(other / "progress.txt")
    assert not a["LossQ"].equals(b["LossQ"])  # the kernels round differently: a resume could tell them apart
    cut_back(whole, part, 1)
    res = run_cli(f"resume={part}", env=torch_own)  # this machine would now choose torch's own kernel
    assert res.returncode == 0, res.stderr[-3000:]
    assert_same_run(whole, part)


@pytest.mark.parametrize("value", [None, "12345"])
def test_a_learner_takes_the_machines_threshold_and_saves_it(monkeypatch, value):
    from rlexp.algos import ALGOS
    from rlexp.nn import torch as nn_torch
    from rlexp.seeding import RankSeeds

    from .conftest import composed
    from .test_parity import BOX, OBS

    monkeypatch.setenv(kernels.ENV_VAR, "never" if value is None else value)
    cfg = composed("algo=sac", "network.hidden_sizes=[8]")
    lrn = ALGOS["sac"].learner_class("torch")(OBS, BOX, cfg, RankSeeds(0))
    want = None if value is None else int(value)
    assert lrn.onednn_min_macs == nn_torch.ONEDNN_MIN_MACS == want
    assert lrn.state_dict()["extra"]["onednn_min_macs"] == (-1 if want is None else want)
    extra = lrn.state_dict()["extra"]
    del extra["onednn_min_macs"]  # a checkpoint saved before the choice was measured: the old rule
    lrn.load_extra_state(extra)
    assert lrn.onednn_min_macs == nn_torch.ONEDNN_MIN_MACS == kernels.LEGACY_MIN_MACS
    nn_torch.set_onednn_min_macs(kernels.LEGACY_MIN_MACS)
