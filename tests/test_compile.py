"""torch's ``backend.compile`` (issue 74): an off-policy learner's gradient step (DQN's one optimizer step;
DDPG's, TD3's, SAC's, TQC's and CrossQ's critics, policy, alpha and polyak update; CrossQ's running
statistics) as one function compiled by ``torch.compile``. It must take the eager step's steps up to
rounding (the same losses, gradients, clip and optimizer rules; inductor sums in another order), draw
the same random numbers, leave the optimizers' state as torch's own steps do (so that either kind of
learner reads the other's checkpoints), resume exactly (the compiled kernels are deterministic), average
gradients over ranks, and be refused in one line where it cannot run. Each compilation takes seconds:
the cases share their options."""

from __future__ import annotations

import copy
import subprocess
import sys

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.seeding import RankSeeds
from tests.conftest import ROOT, composed, run_cli, train
from tests.test_resume import assert_resumes_exactly, assert_same_run

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
ACTIONS = spaces.Discrete(3)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)

# each option of the loss and the optimizer in at least one case
CASES = {
    # the Huber loss, the global-norm clip, Adam
    "dqn": ("algo=dqn", "algo.max_grad_norm=10"),
    # double Q, the squared error, dueling heads, centred RMSprop, no clip
    "double-mse-dueling-rmsprop": (
        "algo=dqn",
        "algo.double_q=true",
        "algo.loss=mse",
        "algo.dueling=true",
        "algo.optimizer=rmsprop",
        "algo.rms_alpha=0.95",
        "algo.optim_eps=0.01",
        "algo.max_grad_norm=null",
    ),
    # C51, noisy networks (drawn from the learner's stream), dueling, prioritized replay's weights
    "rainbow": ("algo=rainbow",),
    # the quantile Huber loss (its pairwise formula, differentiated by autograd)
    "qrdqn": ("algo=qrdqn", "algo.num_quantiles=7"),
    # critics, policy (its draws from the learner's stream), a fixed alpha, the polyak update
    "sac": ("algo=sac", "algo.alpha=0.1"),
    # the third stage: alpha learned
    "sac-autotune": ("algo=sac", "algo.autotune_alpha=true"),
    # quantile critics, the sorted target atoms with the largest dropped
    "tqc": ("algo=tqc", "algo.n_quantiles=5", "algo.drop_per_critic=1"),
    # a deterministic policy with its target, the target policy's noise, policy_delay 2: two compiled
    # steps, with and without the policy's
    "td3": ("algo=td3",),
    "ddpg": ("algo=ddpg",),
    # batch renormalisation: its running statistics updated inside the critics' and the policy's stages,
    # after its warm-up (r and d clipped); no targets; policy_delay 3. tanh: a ReLU unit active on every
    # row of a batch passes a shift of its bias to the next normalisation, which removes it; that bias's
    # gradient is zero but for rounding, which Adam's steps make +-lr (eager and compiled apart by 2 lr)
    "crossq": ("algo=crossq", "algo.critic_width=16", "algo.renorm_warmup=4", "network.activation=tanh"),
}
# the flat parameters of each kind of learner that the compiled step changes
GROUPS = ("q_flat", "q_targ_flat", "pi_flat", "pi_targ_flat", "log_alpha")


def learner(compiled: bool, *overrides: str, unroll: int = 1):
    cfg = composed(
        *overrides,
        "network.hidden_sizes=[16,16]",
        f"backend.compile={compiled}",
        f"backend.compile_unroll={unroll}",
    )
    actions = ACTIONS if cfg.algo.name in ("dqn",) else BOX
    return ALGOS[cfg.algo.name].learner_class("torch")(OBS, actions, cfg, RankSeeds(0))


def batches(weights: bool, n: int = 12, size: int = 8, continuous: bool = False) -> list[dict]:
    rng = np.random.default_rng(5)
    f32 = np.float32
    out = []
    for _ in range(n):
        b = {
            "obs": rng.normal(size=(size, 5)).astype(f32),
            "obs2": rng.normal(size=(size, 5)).astype(f32),
            "act": rng.uniform(-1, 1, (size, 2)).astype(f32) if continuous else rng.integers(0, 3, size),
            "rew": rng.normal(size=size).astype(f32),
            "done": (rng.uniform(size=size) < 0.2).astype(f32),
        }
        if not continuous:
            b["discount"] = (0.99 ** rng.integers(1, 4, size)).astype(f32)
        if weights:
            b["weights"] = rng.uniform(0.3, 1.0, size).astype(f32)
        out.append(b)
    return out


def data_for(lrn) -> list[dict]:
    continuous = lrn.algo.name != "dqn"
    return batches(weights=getattr(lrn.algo, "prioritized", False), continuous=continuous)


def groups(lrn) -> dict[str, torch.Tensor]:
    out = {name: getattr(lrn, name).detach() for name in GROUPS if hasattr(lrn, name)}
    for key, module in lrn.modules().items():  # CrossQ's running statistics and step counts
        out.update({f"{key}.{name}": b for name, b in module.named_buffers()})
    return out


def close(a, b, where: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6, err_msg=where)


@pytest.mark.parametrize("case", list(CASES))
def test_a_compiled_step_takes_the_eager_steps_up_to_rounding(case):
    """One step, then a burst of 11: with ``backend.compile_unroll=3`` three calls of 3 steps each
    (with TD3's delay, steps 1-3 and 7-9 skip the policy's first and third, 4-6 its second: two
    programs) and two calls of one step; CrossQ, which averages its running statistics after a step,
    one call a step."""
    from torch._dynamo.utils import counters

    eager, compiled = learner(False, *CASES[case]), learner(True, *CASES[case], unroll=3)
    assert not eager.compiles and compiled.compiles
    assert compiled.unroll == (1 if case == "crossq" else 3)
    counters.clear()
    data = data_for(eager)
    # one step, then a burst: both paths of the loop
    stats = {}
    for name, lrn in (("eager", eager), ("compiled", compiled)):
        first = lrn.update(data[0])
        rest = iter(data[1:])
        stats[name] = [first, *lrn.update_burst(lambda rest=rest: next(rest), len(data) - 1)]
    for i, (a, b) in enumerate(zip(stats["eager"], stats["compiled"], strict=True)):
        assert a.keys() == b.keys() and isinstance(b["LossQ"], float), i
        for key in a:
            close(a[key], b[key], f"step {i} {key}")
    start = groups(learner(True, *CASES[case]))
    for name, value in groups(eager).items():
        close(value, groups(compiled)[name], name)
        # a constant alpha; DQN's target network, which the loop copies at its env steps
        learns = {"log_alpha": getattr(eager, "alpha_optimizer", None) is not None}.get(
            name, name != "q_targ_flat" or eager.algo.name != "dqn"
        )
        if name.endswith(".steps"):  # each training pass counts one
            assert torch.equal(groups(compiled)[name], groups(eager)[name]), name
        assert torch.equal(groups(compiled)[name], start[name]) != learns, name
    # one compilation of a step, or two with a policy delay (steps with and without the policy's), and
    # of a call of 3 steps one or two: no recompiles
    programs = 2 if eager.policy_delay > 1 else 1
    unrolled = 0 if compiled.unroll == 1 else programs
    assert counters["stats"]["unique_graphs"] == programs + unrolled
    # torch's own state: the same keys, dtypes and values (a checkpoint reads into either learner)
    for key, opt in eager.optimizers().items():
        sa, sb = opt.state_dict(), compiled.optimizers()[key].state_dict()
        assert sa["param_groups"] == sb["param_groups"] and sa["state"].keys() == sb["state"].keys(), key
        for name, value in sa["state"][0].items():
            other = sb["state"][0][name]
            assert value.dtype == other.dtype and value.shape == other.shape, (key, name)
            close(value, other, f"{key} {name}")
    # the generator moved as the eager one's (noisy nets, SAC's and TD3's draws come from it at each step)
    assert torch.equal(eager.gen.get_state(), compiled.gen.get_state())
    close(eager.act(data[0]["obs"][0]), compiled.act(data[0]["obs"][0]), "action")
    # a checkpoint of the compiled learner continues in an eager one
    other = learner(False, *CASES[case])
    other.load_state_dict(copy.deepcopy(compiled.state_dict()))  # not sharing the optimizer's tensors
    other.update(data[0])
    compiled.update(data[0])
    for name, value in groups(other).items():
        close(value, groups(compiled)[name], f"{name} after loading")
    lines = compiled.log_lines()
    assert lines[0].startswith("backend.compile: torch.compile built the gradient step in "), lines
    assert len(lines) == programs + unrolled, lines
    assert all("built 3 gradient steps as one call" in line for line in lines[programs:]), lines
    assert compiled.log_lines() == []  # once


def test_a_compiled_step_takes_the_products_that_eager_runs_on_onednn(monkeypatch):
    """Wide layers' products run on oneDNN in the eager step (``rlexp.nn.torch.linear``); inside a
    compiled step they are inductor's (whose lowering of oneDNN's op wants constant weights: compiling
    1024-wide CrossQ critics failed), with the eager step's numbers."""
    import rlexp.nn.torch as nt

    eager, compiled = learner(False, *CASES["sac"]), learner(True, *CASES["sac"])
    monkeypatch.setattr(nt, "ONEDNN_MIN_MACS", 1)  # every product of the eager step on oneDNN
    data = data_for(eager)
    for batch in data[:2]:
        a, b = eager.update(batch), compiled.update(batch)
        for key in a:
            close(a[key], b[key], key)
    for name, value in groups(eager).items():
        close(value, groups(compiled)[name], name)


def test_each_learner_compiles_its_own_step():
    """Dynamo keeps a function's compiled programs with its code object (8 at most): the learners of
    one process (these tests, an in-process sweep) must not share one list, or one past the limit
    fails. With the limit at 1, two learners each compile their step."""
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=1):
        for _ in range(2):
            lrn = learner(True, *CASES["dqn"])
            lrn.update(batches(weights=False)[0])


CARTPOLE = (
    "algo=dqn", "env=CartPole-v1", "algo.steps_per_epoch=300", "algo.start_steps=100",
    "algo.update_after=100", "algo.update_every=50", "algo.batch_size=16", "algo.num_test_episodes=1",
    "algo.target_update_every=100", "network.hidden_sizes=[16,16]", "algo.keep_checkpoints=null",
    "backend.compile=true",
)  # fmt: skip


# TD3: two compiled steps (with and without the policy's), the target policy's noise from the stream
PENDULUM = (
    "algo=td3", "env=Pendulum-v1", "algo.steps_per_epoch=200", "algo.start_steps=100",
    "algo.update_after=100", "algo.update_every=50", "algo.batch_size=16", "algo.num_test_episodes=1",
    "network.hidden_sizes=[16,16]", "algo.keep_checkpoints=null", "backend.compile=true",
)  # fmt: skip


# CrossQ: its running statistics (buffers that the compiled step updates) in the checkpoints
CROSSQ = (*PENDULUM, "algo=crossq", "algo.critic_width=16")


@pytest.mark.parametrize("args", [CARTPOLE, PENDULUM, CROSSQ], ids=["dqn", "td3", "crossq"])
def test_a_compiled_run_says_how_long_it_compiled_and_resumes_exactly(tmp_path, args):
    whole = tmp_path / "whole"
    res = run_cli(f"hydra.run.dir={whole}", *args, "algo.epochs=3", "algo.save_freq=1")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.count("backend.compile: torch.compile built the gradient step in") == 1
    # bursts of 50 steps (a multiple of TD3's delay): 6 calls of 8 (backend.compile_unroll), 2 of one;
    # CrossQ one call a step
    unrolled = "backend.compile: torch.compile built 8 gradient steps as one call (backend.compile_unroll) in"
    assert res.stdout.count(unrolled) == (0 if args is CROSSQ else 1)
    assert_resumes_exactly(whole, tmp_path / "part", 1)


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("args", "stats"),
    [
        (CARTPOLE, ("LossQ", "AverageQVals")),
        # three stages (critics, policy, alpha), each gradient averaged before its rule
        (
            (*PENDULUM, "algo=sac", "algo.autotune_alpha=true"),
            ("LossQ", "AverageQ1Vals", "LossPi", "AverageLogPi", "LossAlpha"),
        ),
        # the running statistics averaged over the ranks after each compiled step
        (CROSSQ, ("LossQ", "AverageQ1Vals", "LossPi", "AverageLogPi")),
    ],
    ids=["dqn", "sac", "crossq"],
)
def test_with_two_ranks_a_compiled_run_averages_the_gradients_as_the_eager_one(tmp_path, args, stats):
    """Two compiled calls per stage around the allreduce: the run stays the eager run up to rounding."""
    args = (*args, "algo.epochs=1", "comm.procs=2", "algo.num_test_episodes=0")
    compiled = train(tmp_path / "compiled", *args)
    eager = train(tmp_path / "eager", *args, "backend.compile=false")
    for key in stats:
        np.testing.assert_allclose(compiled[key], eager[key], rtol=1e-3, err_msg=key)


def test_a_compiled_learner_that_only_acts_does_not_import_dynamo():
    """``torch.compile`` imports Dynamo (~1.3 s): a learner built to act (rlexp.load, test_policy of a
    compiled run) must not pay it; the first gradient step does."""
    code = (
        "import sys, numpy as np\n"
        "from tests.test_compile import learner, batches, CASES\n"
        "lrn = learner(True, *CASES['dqn'])\n"
        "lrn.act(np.zeros(5, np.float32))\n"
        "print('torch._dynamo' in sys.modules)\n"
        "lrn.update(batches(False)[0])\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["False", "True"]


@pytest.mark.parametrize(
    ("overrides", "env", "message"),
    [
        (
            ("algo=ppo", "env=Pendulum-v1"),
            {},
            "backend.compile=true compiles the gradient step of the off-policy algorithms (algo=ddpg, td3, sac, "
            "tqc, crossq, dqn, c51, qrdqn, rainbow); algo=ppo has none to compile: set backend.compile=false",
        ),
        (
            ("algo=dqn",),
            {"CXX": "no-such-compiler"},
            "backend.compile=true needs the C++ compiler that torch.compile calls, no-such-compiler ($CXX, else "
            "g++), which is not on PATH; install one or set backend.compile=false",
        ),
    ],
)
def test_where_it_cannot_compile_it_says_so_in_one_line(tmp_path, overrides, env, message):
    res = run_cli(f"hydra.run.dir={tmp_path / 'run'}", *overrides, "backend.compile=true", env=env)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines() == [f"rlexp: error: {message}"]
    assert not (tmp_path / "run").exists()


# backend.compile=null (the default): the run decides, from the gradient steps it plans per rank
def auto_learner(*overrides: str):
    cfg = composed("algo=dqn", "network.hidden_sizes=[16,16]", "backend.compile=null", *overrides)
    return ALGOS["dqn"].learner_class("torch")(OBS, ACTIONS, cfg, RankSeeds(0))


def test_by_default_a_learner_is_eager_until_the_run_decides():
    """A learner built to act or to be tested (rlexp.load, test_policy) stays eager; the loop decides."""
    assert composed("algo=dqn").backend.compile is None
    assert auto_learner().compiles is False


@pytest.mark.parametrize(
    ("overrides", "planned", "env", "compiles", "note"),
    [
        (
            (),
            20_000,
            {},
            True,
            "backend.compile=null: each gradient step compiled by torch.compile (20,000 planned "
            "per rank, at least backend.compile_min_steps=20,000); backend.compile=false runs them eagerly",
        ),
        ((), 19_999, {}, False, None),
        (
            ("backend.compile_min_steps=10",),
            10,
            {},
            True,
            "backend.compile=null: each gradient step compiled",
        ),
        (
            (),
            50_000,
            {"CXX": "no-such-compiler"},
            False,
            "backend.compile=null: eager gradient steps; compiling "
            "would pay here, but no-such-compiler ($CXX, else g++) is not on PATH",
        ),
        (("backend.compile=false",), 10**6, {}, False, None),
        (("backend.compile=true",), 0, {}, True, None),
    ],
    ids=["at-the-threshold", "below", "lower-threshold", "no-compiler", "false", "true"],
)
def test_the_run_compiles_where_its_planned_gradient_steps_pay_for_it(
    monkeypatch, overrides, planned, env, compiles, note
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    lrn = auto_learner(*overrides)
    choice, line = lrn.choose_compile(planned)
    assert choice is compiles and lrn.compiles is compiles
    assert (line is None) if note is None else line.startswith(note)


def test_a_continued_run_keeps_the_choice_of_its_checkpoint(tmp_path):
    """The choice is part of the learner's state: a resumed run rounds as it did, whatever it now plans."""
    first = auto_learner()
    first.choose_compile(10**6)
    second = auto_learner()
    second.load_extra_state(first.extra_state())
    assert second.choose_compile(0) == (True, None) and second.compiles
    # a checkpoint from before backend.compile=null records no choice: the run decides as a new one
    state = first.extra_state()
    del state["compiles"]
    third = auto_learner()
    third.load_extra_state(state)
    assert third.choose_compile(0) == (False, None)


def test_a_run_from_before_compile_unroll_keeps_one_compiled_call_a_step(tmp_path):
    """Unrolled steps round differently: a run recorded before the key continues with one call a step."""
    import yaml

    from rlexp.config import load_run_config, to_container

    run = tmp_path / "old"
    run.mkdir()
    saved = to_container(composed("algo=sac", "backend.compile=true"))
    assert saved["backend"]["compile_unroll"] == 8  # the default of a new run
    del saved["backend"]["compile_unroll"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_run_config(run).backend.compile_unroll == 1


# CartPole's 300 env steps an epoch, a gradient step per 4 (DQN's utd_ratio), none in the first 100: the
# first epoch plans 50, each later one 75
AUTO = (*CARTPOLE[:-1], "backend.compile=null", "backend.compile_min_steps=150", "algo.save_freq=1")


def test_a_run_of_the_default_compiles_when_long_enough_and_resumes_with_its_choice(tmp_path):
    """3 epochs plan 200 gradient steps (>= 150): compiled, said once. A 1-epoch run plans 50: eager;
    continued to 3 epochs it stays eager, and ends as the 3-epoch eager run did, exactly."""
    long = tmp_path / "long"
    res = run_cli(f"hydra.run.dir={long}", *AUTO, "algo.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (
        res.stdout.count("backend.compile=null: each gradient step compiled by torch.compile (200 planned")
        == 1
    )
    assert res.stdout.count("backend.compile: torch.compile built the gradient step in") == 1
    short, eager = tmp_path / "short", tmp_path / "eager"
    train(short, *AUTO, "algo.epochs=1")
    train(eager, *AUTO, "algo.epochs=3", "backend.compile=false")
    res = run_cli(f"resume={short}", "algo.epochs=3")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "backend.compile" not in res.stdout
    assert_same_run(eager, short)


WARMUP_ONLY = (
    "algo=dqn",
    "env=CartPole-v1",
    "algo.epochs=1",
    "algo.steps_per_epoch=500",
    "algo.update_after=500",
)


@pytest.mark.parametrize(
    ("overrides", "procs", "planned"),
    [
        (("algo=sac",), 1, 399_000),  # Spinning Up's 100 epochs of 4000 steps, from step 1000, one a step
        (("algo=sac", "comm.procs=2"), 2, 199_500),  # each rank half the env steps: half the gradient steps
        (("algo=dqn", "tuned=dqn", "env=CartPole-v1"), 1, 24_576),  # the zoo's: 128 every 256 of 50k steps
        (WARMUP_ONLY, 1, 0),
    ],
    ids=["sac", "sac-2-ranks", "dqn-zoo-cartpole", "warm-up-only"],
)
def test_planned_gradient_steps_count_a_whole_run_of_one_rank(overrides, procs, planned):
    from rlexp.algos.off_policy import planned_gradient_steps

    cfg = composed(*overrides)
    assert planned_gradient_steps(cfg.algo, procs, cfg.env.num_envs) == planned
