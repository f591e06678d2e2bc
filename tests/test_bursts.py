"""Compiled bursts (issue 74): with ``backend.compile_bursts`` a TF learner runs the gradient steps of one
off-policy burst as one compiled loop over minibatches drawn up front. It must take exactly the steps
that one compiled call per step takes: the same weights, optimizer moments, generator state and
statistics, bit for bit; whole runs the same, and resumed runs as uninterrupted ones."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.algos.tf_common import OffPolicyTFLearner
from rlexp.seeding import RankSeeds
from tests.conftest import composed, train
from tests.test_resume import OFF_POLICY, assert_resumes_exactly, assert_same, assert_same_run

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = spaces.Discrete(3)

# (algo and its options, whether its bursts compile): every update with no policy delay does
CASES = {
    "dqn": (("algo=dqn",), True),
    "rainbow-c51-noisy": (("algo=rainbow", "algo.distributional=c51", "algo.prioritized=false"), True),
    "qrdqn": (("algo=qrdqn",), True),
    "sac": (("algo=sac",), True),
    "sac-autotune": (("algo=sac", "algo.autotune_alpha=true"), True),
    "tqc": (("algo=tqc",), True),
    "ddpg": (("algo=ddpg",), True),
    "td3": (("algo=td3",), False),  # a policy step every second step: one call per step
    "crossq": (("algo=crossq", "algo.critic_width=16"), False),  # and its statistics averaged after each
}


def learner(compile_bursts: bool, *overrides: str):
    cfg = composed(
        *overrides, "backend=tf", "network.hidden_sizes=[16,16]", f"backend.compile_bursts={compile_bursts}"
    )
    act_space = DISCRETE if cfg.algo.name == "dqn" else BOX
    return ALGOS[cfg.algo.name].learner_class("tf")(OBS, act_space, cfg, RankSeeds(0))


def sampler(discrete: bool, batch: int = 8):
    """Minibatches from a fixed stream, as the loop's ``sample`` draws them from the replay."""
    rng = np.random.default_rng(3)
    f32 = np.float32

    def sample() -> dict:
        out = {
            "obs": rng.normal(size=(batch, 5)).astype(f32),
            "obs2": rng.normal(size=(batch, 5)).astype(f32),
            "rew": rng.normal(size=batch).astype(f32),
            "done": (rng.uniform(size=batch) < 0.2).astype(f32),
        }
        if discrete:
            out["act"] = rng.integers(0, 3, batch)
            out["discount"] = (0.99 ** rng.integers(1, 4, batch)).astype(f32)
        else:
            out["act"] = rng.uniform(-1, 1, (batch, 2)).astype(f32)
        return out

    return sample


def assert_same_learners(a, b) -> None:
    assert_same(a.state_dict(), b.state_dict(), "learner")


def assert_same_stats(sa: list[dict], sb: list[dict]) -> None:
    assert len(sa) == len(sb)
    for x, y in zip(sa, sb, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert type(x[k]) is type(y[k]) and np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("case", list(CASES))
def test_a_compiled_burst_takes_the_steps_of_one_call_each_exactly(case, monkeypatch):
    overrides, compiles = CASES[case]
    eager, compiled = learner(False, *overrides), learner(True, *overrides)
    calls = []
    run = compiled._burst
    monkeypatch.setattr(compiled, "_burst", lambda b: calls.append(int(b["obs"].shape[0])) or run(b))
    assert not eager.compiles_bursts and compiled.compiles_bursts is compiles
    discrete = eager.cfg.algo.name == "dqn"
    out = {}
    for name, lrn in (("eager", eager), ("compiled", compiled)):
        sample = sampler(discrete)
        out[name] = [s for steps in (5, 1, 7, 2) for s in lrn.update_burst(sample, steps)]
    assert_same_stats(out["eager"], out["compiled"])
    assert_same_learners(eager, compiled)
    assert compiled.n_updates == 15
    assert calls == ([5, 7, 2] if compiles else [])  # a burst of one step is an ordinary step
    if compiles:  # a step's statistics as update() gives them: floats and per-sample arrays
        assert isinstance(out["compiled"][0]["LossQ"], float)
    # the numpy copy that acting uses is re-taken after a burst
    obs = np.linspace(-1, 1, 5).astype(np.float32)
    assert np.array_equal(eager.act(obs), compiled.act(obs))


def test_a_burst_longer_than_its_byte_budget_takes_several_calls(monkeypatch):
    """A burst stacks at most BURST_BYTES of minibatches: a longer one is several compiled calls (and
    a single minibatch left over an ordinary step), with the same numbers."""
    eager, compiled = learner(False, "algo=sac"), learner(True, "algo=sac")
    one = sum(v.nbytes for v in sampler(False)().values())
    monkeypatch.setattr(OffPolicyTFLearner, "BURST_BYTES", 2 * one + 1)  # two minibatches a call
    sizes = []
    run = compiled._burst
    monkeypatch.setattr(compiled, "_burst", lambda b: sizes.append(int(b["obs"].shape[0])) or run(b))
    a = eager.update_burst(sampler(False), 5)
    b = compiled.update_burst(sampler(False), 5)
    assert sizes == [2, 2]  # and the fifth step alone
    assert_same_stats(a, b)
    assert_same_learners(eager, compiled)


def test_a_run_with_compiled_bursts_is_the_run_without_and_resumes_exactly(tmp_path):
    """Whole runs (SAC in TF, bursts of 50 steps) with and without compiled bursts: the same log and
    the same final state; and the compiled run stopped after 2 epochs and resumed ends as it did."""
    args = ("algo=sac", "backend=tf", *OFF_POLICY, "algo.epochs=4", "algo.save_freq=1")
    train(tmp_path / "compiled", *args)
    train(tmp_path / "eager", *args, "backend.compile_bursts=false")
    assert_same_run(tmp_path / "compiled", tmp_path / "eager")
    assert_resumes_exactly(tmp_path / "compiled", tmp_path / "part", 2)


def test_a_tf_run_from_before_compile_bursts_reads_with_it(tmp_path):
    """A run recorded before the key existed takes the preset's value (it changes no number)."""
    import yaml

    from rlexp.config import load_run_config, to_container

    run = tmp_path / "old"
    run.mkdir()
    saved = to_container(composed("algo=sac", "backend=tf"))
    del saved["backend"]["compile_bursts"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_run_config(run).backend.compile_bursts is True


@pytest.mark.mpi
def test_with_two_ranks_a_compiled_burst_averages_each_steps_gradients_as_before(tmp_path):
    """With MPI every rank runs the compiled loop; each step's allreduce is inside it, in order: the
    run is the run of one call per step."""
    args = ("algo=sac", "backend=tf", *OFF_POLICY, "algo.epochs=2", "comm.procs=2")
    train(tmp_path / "compiled", *args)
    train(tmp_path / "eager", *args, "backend.compile_bursts=false")
    assert_same_run(tmp_path / "compiled", tmp_path / "eager")
