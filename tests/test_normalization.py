"""Observation and reward normalisation in every combination (issue 34): none, obs, reward, both, on
both backends, on- and off-policy. Each trains, resumes exactly (N then M == N+M), and loads through
test_policy (the last and the best checkpoint) and the Python API; a damaged statistics entry is one
line naming which statistics do not fit; a torch checkpoint written before the fix (observations
normalised alone: the reward's unused 0-d statistics stored with shape (1,)) still loads and continues.

Before the fix every ``obs`` case on torch failed at resume, test_policy, --best and the API ("does
not fit this run's learner (normalisation statistics of shape (1,) ...)"); the TF cases passed (npz
keeps 0-d arrays).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlexp.checkpoint import best_checkpoint_path, checkpoint_path, latest_checkpoint, save_npz, save_torch
from tests.conftest import ROOT, run_cli, train
from tests.test_resume import OFF_POLICY, assert_resumes_exactly, assert_same_run, cut_back, read_checkpoint

NORMS = {
    "none": (),
    "obs": ("env.normalize_obs=true",),
    "reward": ("env.normalize_reward=true",),
    "both": ("env.normalize_obs=true", "env.normalize_reward=true"),
}
EVALUATE = ("algo.test_every=1", "algo.num_test_episodes=1", "algo.save_freq=1", "algo.epochs=3")
ON_POLICY = (
    "algo=ppo",
    "env=Pendulum-v1",
    "algo.steps_per_epoch=200",
    "algo.train_pi_iters=3",
    "algo.train_v_iters=3",
)
FAMILIES = {  # on TF, PPO steps two envs (the running return is then one per env) and TD3 replaces SAC
    "on-torch": (*ON_POLICY, "backend=torch"),
    "on-tf": (*ON_POLICY, "backend=tf", "env.num_envs=2"),
    "off-torch": ("algo=sac", "backend=torch", *OFF_POLICY),
    "off-tf": ("algo=td3", "backend=tf", *OFF_POLICY),
}
CASES = [(family, norm) for family in FAMILIES for norm in NORMS]


def normalizer_state(path: Path) -> dict | None:
    return read_checkpoint(path)["learner"]["extra"].get("normalizer")


def assert_loads(run_dir: Path) -> None:
    """The run's last and best checkpoints load through test_policy's loader and play an episode, and
    the Python API's policy acts; loading leaves the statistics as saved."""
    import rlexp
    from rlexp.test_policy import load_policy_and_env, run_policy

    for best in (False, True):
        env, get_action, _ = load_policy_and_env(run_dir, best=best)
        ((ret, length),) = run_policy(env, get_action, max_ep_len=20, num_episodes=1)
        assert length == 20 and np.isfinite(ret)
        env.close()
    policy = rlexp.load(run_dir).policy()
    obs, _ = policy.env.reset(seed=0)
    assert policy.env.action_space.contains(policy(obs))
    saved = normalizer_state(latest_checkpoint(run_dir)[1])
    if saved is not None:
        np.testing.assert_array_equal(policy._learner.normalizer.obs_rms.mean, saved["obs"]["mean"])
        np.testing.assert_array_equal(policy._learner.normalizer.ret_rms.var, saved["ret"]["var"])


# One interpreter per family trains its four runs and their resumes (through rlexp.train, the
# command's own job): the imports are paid once, not sixteen times. A case that fails records its error.
DRIVER = """
import json, sys, traceback
from pathlib import Path
import rlexp
from tests.test_resume import cut_back
root, cases, errors = Path(sys.argv[1]), json.loads(sys.argv[2]), {}
for name, overrides in cases.items():
    whole, part = root / name / "whole", root / name / "part"
    try:
        rlexp.train([*overrides, "logger.console=quiet"], run_dir=whole)
        cut_back(whole, part, 1)
        rlexp.train([f"resume={part}"])
    except BaseException:
        errors[name] = traceback.format_exc()
(root / "errors.json").write_text(json.dumps(errors))
"""
_trained: dict[str, Path] = {}


def family_runs(family: str, tmp_path_factory) -> Path:
    """The directory holding ``<norm>/whole`` and ``<norm>/part`` (cut back after epoch 1 and resumed)
    of every normalisation of ``family``, trained on first use."""
    if family not in _trained:
        root = tmp_path_factory.mktemp(family)
        cases = {norm: [*FAMILIES[family], *NORMS[norm], *EVALUATE] for norm in NORMS}
        args = [sys.executable, "-c", DRIVER, str(root), json.dumps(cases)]
        res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        _trained[family] = root
    return _trained[family]


@pytest.mark.parametrize(("family", "norm"), CASES, ids=[f"{f}-{n}" for f, n in CASES])
def test_every_normalisation_trains_resumes_exactly_and_loads(tmp_path_factory, family, norm):
    root = family_runs(family, tmp_path_factory)
    error = json.loads((root / "errors.json").read_text()).get(norm)
    assert error is None, error
    whole, part = root / norm / "whole", root / norm / "part"
    assert_same_run(whole, part)
    state = normalizer_state(latest_checkpoint(part)[1])
    if norm == "none":
        assert state is None
    else:  # the statistics keep their shapes through the file: (3,) for Pendulum, () for the return
        assert np.shape(state["obs"]["mean"]) == (3,) and np.shape(state["ret"]["mean"]) == ()
        assert np.shape(state["ret"]["var"]) == ()
        assert (state["obs"]["count"] > 1) == (norm in ("obs", "both"))  # updated only when normalising
    assert best_checkpoint_path(part, ".npz" if family.endswith("tf") else ".pt").is_file()
    assert_loads(part)


@pytest.mark.mpi
@pytest.mark.parametrize("family", ["on-torch", "off-tf"])
def test_observation_normalisation_alone_with_two_ranks_resumes_exactly_and_loads(tmp_path, family):
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *FAMILIES[family], *NORMS["obs"], *EVALUATE, "comm.procs=2")
    assert_resumes_exactly(whole, part, 1)
    assert_loads(part)


def rewrite(path: Path, change) -> None:
    """Apply ``change`` to the checkpoint's normalisation statistics and write the file back whole."""
    state = read_checkpoint(path)
    change(state["learner"]["extra"]["normalizer"])
    (save_npz if path.suffix == ".npz" else save_torch)(path, state)


@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_damaged_statistics_are_one_line_naming_them(tmp_path, backend):
    from rlexp.errors import RLExpError
    from rlexp.test_policy import load_learner

    run_dir = tmp_path / "run"
    train(run_dir, *FAMILIES[f"on-{backend}"], *NORMS["both"], "algo.epochs=1")
    path = latest_checkpoint(run_dir)[1]
    pristine = tmp_path / "pristine"
    shutil.copy(path, pristine)

    def obs_shape(stats):
        stats["obs"]["mean"] = np.zeros(2)

    def ret_shape(stats):
        stats["ret"]["var"] = np.ones(4)

    def ret_count(stats):
        stats["ret"]["count"] = -1.0

    def ret_missing(stats):
        del stats["ret"]

    cases = [
        (obs_shape, "the observation normalisation statistics (mean of shape (2,)) do not fit shape (3,)"),
        (ret_shape, "the reward normalisation statistics (variance of shape (4,)) do not fit one number"),
        (ret_count, "the reward normalisation statistics have a count of -1.0; it must be one number > 0"),
        (ret_missing, "the checkpoint has no reward normalisation statistics"),
    ]
    for change, message in cases:
        shutil.copy(pristine, path)
        rewrite(path, change)
        with pytest.raises(RLExpError, match="does not fit this run's learner") as err:
            load_learner(run_dir)
        assert message in str(err.value) and str(path) in str(err.value)
    # as a user sees the last one: one line, from test_policy and from resume alike
    for args, module in (
        ([str(run_dir), "-n", "1", "--norender"], "rlexp.test_policy"),
        ([f"resume={run_dir}", "algo.epochs=2"], "rlexp"),
    ):
        res = run_cli(*args, module=module)
        lines = res.stderr.strip().splitlines()
        assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr
        assert message in lines[-1] and str(path) in lines[-1], lines[-1]


def test_a_checkpoint_written_before_the_fix_loads_and_continues_exactly(tmp_path):
    """Observations normalised alone on torch: the checkpoints of rlexp before issue 34 held the unused
    reward statistics with shape (1,). Such a run loads (test_policy) and resumes, and the resumed run
    equals one that never stopped."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *FAMILIES["on-torch"], *NORMS["obs"], *EVALUATE)

    def as_before_the_fix(stats):
        stats["ret"]["mean"], stats["ret"]["var"] = np.zeros(1), np.ones(1)

    rewrite(checkpoint_path(whole, 1), as_before_the_fix)  # the point the cut-back copy resumes from
    cut_back(whole, part, 1)
    assert np.shape(normalizer_state(latest_checkpoint(part)[1])["ret"]["mean"]) == (1,)
    res = run_cli(str(part), "-n", "1", "--norender", module="rlexp.test_policy")
    assert res.returncode == 0, res.stderr
    shutil.rmtree(part)
    assert_resumes_exactly(whole, part, 1)
    assert_loads(part)


def test_an_n_step_return_is_scaled_and_clipped_as_one_reward():
    """Issue 71's check, as documented (rlexp/normalize.py): the off-policy loop scales what the replay
    stored, and with n-step returns that is the discounted sum, so env.clip_reward bounds the sum. Three
    rewards of 2 with gamma 0.5 and a clip of 3: the 3-step return 2 + 1 + 0.5 = 3.5 is clipped to 3
    (each reward alone is below the clip), and without the clip it is scaled as a whole."""
    from rlexp.algos.off_policy import normalized
    from rlexp.buffers import ReplayBuffer
    from rlexp.normalize import EPSILON, Normalizer

    buf = ReplayBuffer(1, 1, 10, n_step=3, gamma=0.5)
    no = np.zeros(1, bool)
    for _ in range(3):
        buf.add(np.zeros((1, 1)), np.zeros((1, 1)), np.full(1, 2.0), np.zeros((1, 1)), no, no)
    assert buf.size == 1 and buf.rew[0] == pytest.approx(3.5)
    std = np.sqrt(1.0 + EPSILON)  # the statistics' start: variance 1
    for clip, expected in ((3.0, 3.0), (10.0, 3.5 / std)):
        norm = Normalizer((1,), False, True, clip_obs=10.0, clip_reward=clip, gamma=0.5)
        batch = normalized(buf.sample_batch(4, np.random.default_rng(0)), norm)
        assert batch["rew"] == pytest.approx(np.full(4, expected, np.float32))
