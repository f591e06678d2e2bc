"""Recurrent policies (issue 29): LSTM and GRU networks on both backends and in numpy acting, training
sequences cut at episode starts, exact resume with several envs and ranks, using a trained recurrent
policy, the partially observed presets, and learning where a feed-forward policy cannot."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.buffers import GAEBuffer
from rlexp.nn import Sequences
from rlexp.seeding import RankSeeds
from tests.conftest import composed, run_cli, train
from tests.test_parity import assert_same_params, assert_same_stats
from tests.test_resume import assert_resumes_exactly, final_state

OBS = spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = spaces.Discrete(3)


def pair(algo: str, act_space: spaces.Space, *overrides: str):
    """(torch learner, tf learner) of a recurrent network, the tf weights copied from torch."""
    cfg = composed(
        f"algo={algo}",
        "backend=tf",
        "network.hidden_sizes=[16]",
        "network.recurrent_size=8",
        "env.num_envs=3",
        *overrides,
    )
    f = ALGOS[algo].learner_class("tf")(OBS, act_space, cfg, RankSeeds(0))
    t_cfg = dataclasses.replace(cfg, backend=composed("backend=torch").backend)
    t = ALGOS[algo].learner_class("torch")(OBS, act_space, t_cfg, RankSeeds(0))
    f.set_weights({k: [p.detach().numpy() for p in m.parameters()] for k, m in t.modules().items()})
    return t, f


def sequences_batch(t, act_space: spaces.Space, n_envs: int = 3, steps: int = 40, seq_len: int = 16) -> dict:
    """An epoch of 3 envs through a real GAEBuffer (episodes of random lengths), acting with ``t``."""
    rng = np.random.default_rng(1)
    layout = {
        "pi": len(t.acting.pi_cell.zero_state()),
        **({"v": len(t.acting.v_cell.zero_state())} if t.acting.v_cell else {}),
    }
    act_shape = () if isinstance(act_space, spaces.Discrete) else act_space.shape
    act_dtype = np.int64 if isinstance(act_space, spaces.Discrete) else np.float32
    buf = GAEBuffer(
        5, act_shape, act_dtype, steps, 0.99, 0.95, num_envs=n_envs, recurrent=(layout, 8, seq_len),
    )  # fmt: skip
    starts = np.ones(n_envs, np.bool_)
    for _ in range(steps):
        obs = rng.uniform(-1, 1, (n_envs, 5)).astype(np.float32)
        states = np.stack([t.acting.state(i) for i in range(n_envs)])
        steps_out = [t.step(obs[i], i) for i in range(n_envs)]
        a = np.stack([s[0] for s in steps_out])
        v, logp = np.array([s[1] for s in steps_out]), np.array([s[2] for s in steps_out])
        buf.store(obs, a, rng.normal(size=n_envs), v, logp, states, starts)
        ended = rng.uniform(size=n_envs) < 0.08
        for i in np.flatnonzero(ended):
            buf.finish_path(0.0, i)
            t.reset_state(i)
        starts = ended
    for i in range(n_envs):
        buf.finish_path(0.0, i)
    return buf.get()


# --- the data path ---------------------------------------------------------------------------------
def test_sequences_are_cut_at_episode_starts_and_every_seq_len_steps_and_keep_the_row_order():
    t, _ = pair("ppo", DISCRETE, "network.recurrent=lstm")
    batch = sequences_batch(t, DISCRETE)
    seqs = batch["obs"]
    assert isinstance(seqs, Sequences)
    lengths = seqs.valid.sum(axis=1)
    assert lengths.sum() == len(batch["adv"]) == 3 * 40 and lengths.max() <= 16
    assert all(row[:n].all() and not row[n:].any() for row, n in zip(seqs.valid, lengths, strict=True))
    # the valid steps, sequence after sequence, are the epoch's observations env after env
    flat_obs = seqs.obs[seqs.valid]
    assert flat_obs.shape == (120, 5)
    # a sequence that starts an episode starts from zeros; the others from the acting state recorded
    assert set(seqs.states) == {"pi", "v"} and all(len(x) == 2 for x in seqs.states.values())  # LSTM: h, c
    zero = np.all(seqs.states["pi"][0] == 0, axis=1)
    assert zero.any() and (~zero).any()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_numpy_acting_follows_the_networks_own_sequence_pass(kind, backend):
    """Acting step by step in numpy (float64) gives the outputs the backend's network computes over the
    whole sequence at once, to float32 precision: the same LSTM/GRU equations."""
    t, f = pair("ppo", BOX, f"network.recurrent={kind}")
    lrn = t if backend == "torch" else f
    obs = np.random.default_rng(0).uniform(-1, 1, (1, 12, 5)).astype(np.float32)
    values = [lrn.step(o, 0)[1] for o in obs[0]]
    state = {
        k: tuple(np.zeros((1, 8), np.float32) for _ in range(2 if kind == "lstm" else 1)) for k in ("pi", "v")
    }
    seqs = Sequences(obs, np.ones((1, 12), np.bool_), state)
    if backend == "torch":
        with torch.no_grad():
            v = t.ac.v(t.tensors({"obs": seqs, "act": np.zeros((12, 2), np.float32)})["obs"]).numpy()
    else:
        v = f.ac.v(f.tensors({"obs": seqs, "act": np.zeros((12, 2), np.float32)})["obs"]).numpy()
    np.testing.assert_allclose(values, v, rtol=1e-4, atol=1e-5)


# --- parity ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "algo,overrides,space",
    [
        ("ppo", ["network.recurrent=lstm", "algo.num_minibatches=3", "algo.update_epochs=2"], BOX),
        (
            "ppo",
            ["network.recurrent=gru", "network.recurrent_critic=shared", "algo.train_pi_iters=5"],
            DISCRETE,
        ),
        ("vpg", ["network.recurrent=lstm", "network.recurrent_critic=shared"], DISCRETE),
        ("trpo", ["network.recurrent=gru"], BOX),
    ],
    ids=["ppo-lstm-minibatch", "ppo-gru-shared", "vpg-lstm-shared", "trpo-gru"],
)
def test_recurrent_update_parity(algo, overrides, space):
    t, f = pair(algo, space, "algo.train_v_iters=5", *overrides)
    batch = sequences_batch(t, space)
    st, sf = t.update(dict(batch)), f.update(dict(batch))
    assert_same_stats(st, sf, rtol=1e-3)
    assert_same_params(t, f, rtol=1e-3, atol=1e-4)


def test_a_shared_critic_reads_the_policys_layer_without_changing_it():
    t, _ = pair("ppo", BOX, "network.recurrent=lstm", "network.recurrent_critic=shared")
    v_params = {id(p) for p in t.ac.v.parameters()}
    rnn = t.ac.pi.encoder.rnn
    assert not v_params & {id(p) for p in rnn.parameters()}  # not V's to optimise
    assert "encoder" not in {k.split(".")[0] for k in t.ac.v.state_dict()}
    before = [p.detach().clone() for p in rnn.parameters()]
    batch = t.tensors(sequences_batch(t, BOX))
    t.vf_optimizer.zero_grad()
    t.loss_v(batch).backward()
    assert all(p.grad is None or not p.grad.any() for p in rnn.parameters())
    t.vf_optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, rnn.parameters(), strict=True))


# --- whole runs -----------------------------------------------------------------------------------
RECURRENT = (
    "algo=ppo", "env=CartPoleNoVel-v1", "network.recurrent=lstm", "network.recurrent_size=16",
    "network.hidden_sizes=[16]", "network.seq_len=12", "algo.num_minibatches=4", "algo.update_epochs=2",
)  # fmt: skip


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_recurrent_runs_resume_exactly_with_4_envs_and_2_ranks(tmp_path, backend):
    """N then M epochs equal N + M: every env's recurrent state (and its next step's episode start)
    is in the checkpoint."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = (
        *RECURRENT, f"backend={backend}", "env.num_envs=4", "comm.procs=2", "comm.oversubscribe=true",
        "algo.steps_per_epoch=400", "algo.epochs=3", "algo.save_freq=1",
    )  # fmt: skip
    train(whole, *args)
    loop = final_state(whole)["loop"]
    assert np.asarray(loop["recurrent_states"]).shape == (4, 4 * 16)  # 4 envs x (h, c of pi and of V)
    assert_resumes_exactly(whole, part, 1)


def test_a_recurrent_policy_keeps_its_memory_until_reset(tmp_path):
    import rlexp

    run_dir = tmp_path / "run"
    train(run_dir, *RECURRENT, "algo.steps_per_epoch=400", "algo.epochs=1")
    policy = rlexp.load(run_dir).policy()
    obs, _ = policy.env.reset(seed=0)
    lrn = policy._learner
    first = [policy(obs) for _ in range(3)]
    state = lrn.acting.state(-1).copy()
    assert np.abs(state).sum() > 0  # it remembers
    policy.reset()
    assert np.abs(lrn.acting.state(-1)).sum() == 0
    assert [policy(obs) for _ in range(3)] == first  # the same observations from a reset: the same actions
    res = run_cli(str(run_dir), "-n", "2", module="rlexp.test_policy")
    assert res.returncode == 0 and "EpRet" in res.stdout, res.stderr[-2000:]


def test_test_episodes_start_each_from_a_zero_state(tmp_path):
    """Two evaluations of the same policy and test env seed give the same returns only if each test
    episode starts from zero, not from the last one's state."""
    from rlexp.algos.evaluation import test_agent
    from rlexp.logger import EpochLogger

    run_dir = tmp_path / "run"
    # Pendulum's continuous actions: any difference in memory changes the return
    train(run_dir, *RECURRENT, "env=PendulumNoVel-v1", "algo.steps_per_epoch=400", "algo.epochs=1")
    import rlexp

    policy = rlexp.load(run_dir).policy()
    lrn = policy._learner
    returns = []
    for _ in range(2):
        env = rlexp.load(run_dir).policy().env  # a fresh PendulumNoVel-v1
        env.reset(seed=3)
        logger = EpochLogger(None)
        lrn.acting.states[-1] = {k: tuple(x + 5.0 for x in v) for k, v in lrn.acting.states[-1].items()}
        test_agent(env, lrn, policy._to_env, 2, logger)
        returns.append(list(logger.epoch_dict["TestEpRet"]))
    assert returns[0] == returns[1]


def test_the_learning_benchmarks_det10_starts_each_episode_from_a_zero_state(tmp_path, monkeypatch):
    """bench_learning's det10 (10 deterministic episodes of the final policy) equals the mean over
    episodes each played by a freshly loaded policy, even when the policy's memory is not zero after the
    env's reset (as after a previous episode): each episode starts from a zero state."""
    import importlib.util

    import rlexp
    from tests.conftest import ROOT

    run_dir = tmp_path / "run"
    # Pendulum's continuous actions: any difference in memory changes the return
    train(run_dir, *RECURRENT, "env=PendulumNoVel-v1", "algo.steps_per_epoch=400", "algo.epochs=1")
    returns = []
    for i in range(10):  # bench_learning's EVAL_EPISODES, reset seeds 10,000 + i
        policy = rlexp.load(run_dir).policy(deterministic=True)
        obs, _ = policy.env.reset(seed=10_000 + i)
        done, total = False, 0.0
        while not done:
            obs, r, terminated, truncated, _ = policy.env.step(policy(obs))
            total += float(r)
            done = terminated or truncated
        returns.append(total)

    real_load = rlexp.load

    def load_with_memory_left(path):  # the policy's env reset leaves a non-zero memory behind
        run = real_load(path)
        make_policy = run.policy

        def policy(**kwargs):
            pol = make_policy(**kwargs)
            env_reset, states = pol.env.reset, pol._learner.acting.states

            def reset(**reset_kwargs):
                out = env_reset(**reset_kwargs)
                states[-1] = {k: tuple(x + 5.0 for x in v) for k, v in states[-1].items()}
                return out

            pol.env.reset = reset
            return pol

        run.policy = policy
        return run

    monkeypatch.setattr(rlexp, "load", load_with_memory_left)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # bench_learning imports its neighbour common
    spec = importlib.util.spec_from_file_location("bench_learning", ROOT / "benchmarks" / "bench_learning.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.evaluate(str(run_dir)) == pytest.approx(np.mean(returns), abs=1e-9)


@pytest.mark.parametrize(
    "overrides,fragment",
    [
        (
            ("algo=sac", "network.recurrent=lstm"),
            "network.recurrent=lstm is for the algorithms that train on sequences (ppo, trpo, vpg), not sac",
        ),
        (("network.recurrent=rnn",), "network.recurrent='rnn' is unknown; choose one of: lstm, gru or null"),
        (
            ("network.recurrent=gru", "network.recurrent_critic=none"),
            "network.recurrent_critic='none' is unknown",
        ),
        (("network.recurrent=gru", "network.seq_len=0"), "network.seq_len=0 is out of range"),
        (
            ("network.recurrent=lstm", "algo.num_minibatches=64"),
            "algo.num_minibatches=64 is more than the 32 sequences",
        ),
        (
            ("env=CartPole-v1", "env.wrappers=[{MaskObservation:{indices:[7]}}]"),
            "indices [7] are out of range for observations of 4 entries",
        ),
    ],
)
def test_bad_recurrent_settings_are_one_line(tmp_path, overrides, fragment):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", *overrides)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and fragment in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_the_novel_presets_hide_the_velocities():
    from rlexp.envs import make_env

    for preset, hidden in (("CartPoleNoVel-v1", [1, 3]), ("PendulumNoVel-v1", [2])):
        env = make_env(composed(f"env={preset}").env, seed=0)
        for _ in range(20):
            obs, *_ = env.step(env.action_space.sample())
            assert np.all(obs[hidden] == 0) and np.any(obs != 0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "tf"])
def test_memory_learns_cartpole_without_velocities(tmp_path, backend):
    """The zoo's recurrent settings (tuned=ppo on CartPoleNoVel-v1) reach a mean return of 150+ within
    15,000 steps at seed 0; feed-forward PPO with the same settings stays below 60 (random play: ~22).
    The clip range stays at 0.2: annealed over these 59 epochs instead of the preset's 391 it shrinks
    6.6x as fast as in the preset's run."""
    lstm = train(
        tmp_path / "lstm",
        "tuned=ppo",
        "env=CartPoleNoVel-v1",
        f"backend={backend}",
        "algo.epochs=59",
        "algo.anneal_clip=false",
        timeout=600,
    )
    assert lstm["AverageEpRet"].iloc[-5:].mean() >= 150, lstm["AverageEpRet"].round(0).tolist()
    if backend == "torch":
        ff = train(
            tmp_path / "ff",
            "tuned=ppo",
            "env=CartPoleNoVel-v1",
            "network.recurrent=null",
            "algo.epochs=59",
            "algo.anneal_clip=false",
        )
        assert ff["AverageEpRet"].iloc[-5:].mean() < 60, ff["AverageEpRet"].round(0).tolist()
