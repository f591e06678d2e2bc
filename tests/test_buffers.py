import itertools

import numpy as np
import pytest

from rlexp.buffers import GAEBuffer, discount_cumsum


def brute_discount_cumsum(x, d):
    return np.array([sum(d**k * x[t + k] for k in range(len(x) - t)) for t in range(len(x))])


def brute_gae(rews, vals, last_val, gamma, lam):
    """GAE straight from its definition: A_t = sum_l (gamma*lam)^l delta_{t+l}."""
    v = [*list(vals), last_val]
    deltas = [rews[t] + gamma * v[t + 1] - v[t] for t in range(len(rews))]
    adv = [sum((gamma * lam) ** k * deltas[t + k] for k in range(len(rews) - t)) for t in range(len(rews))]
    ret = [
        sum(gamma**k * ([*list(rews), last_val])[t + k] for k in range(len(rews) + 1 - t))
        for t in range(len(rews))
    ]
    return np.array(adv), np.array(ret)


def test_discount_cumsum_matches_loop():
    x = np.random.default_rng(0).normal(size=37)
    np.testing.assert_allclose(discount_cumsum(x, 0.9), brute_discount_cumsum(x, 0.9), rtol=1e-10)
    np.testing.assert_allclose(discount_cumsum(x, 1.0), np.cumsum(x[::-1])[::-1], rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_discount_cumsum_is_scipys_lfilter_bit_for_bit(dtype):
    """The recurrence replaced scipy.signal.lfilter (a 0.7 s import): the same float64 bits."""
    import scipy.signal

    x = (np.random.default_rng(2).normal(size=1000) * 100).astype(dtype)
    for d in (0.99, 0.99 * 0.97, 1.0, 0.0):
        want = scipy.signal.lfilter([1], [1, -d], x[::-1], axis=0)[::-1]
        assert discount_cumsum(x, d).dtype == np.float64
        np.testing.assert_array_equal(discount_cumsum(x, d), want)
    assert discount_cumsum(x[:0], 0.9).shape == (0,)


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.97), (0.9, 0.0), (1.0, 1.0)])
def test_gae_and_returns_match_brute_force(gamma, lam):
    rng = np.random.default_rng(1)
    size, cuts = 30, [0, 7, 19, 30]  # three paths: terminated, truncated (bootstrap), epoch cut (bootstrap)
    last_vals = [0.0, 1.5, -0.7]
    buf = GAEBuffer(3, (), np.int64, size, gamma, lam)
    rews, vals = rng.normal(size=size), rng.normal(size=size)
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        for t in range(a, b):
            buf.store(np.zeros(3), 1, rews[t], vals[t], 0.0)
        buf.finish_path(last_vals[i])
    raw_adv = buf.adv[:, 0].copy()  # (steps, envs): one env
    data = buf.get()
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        adv, ret = brute_gae(rews[a:b], vals[a:b], last_vals[i], gamma, lam)
        np.testing.assert_allclose(raw_adv[a:b], adv, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(data["ret"][a:b], ret, rtol=1e-4, atol=1e-4)
    # get() normalises advantages to mean 0, std 1
    assert abs(data["adv"].mean()) < 1e-5 and abs(data["adv"].std() - 1) < 1e-4


@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (0.9, 0.0), (0.99, 1.0)])
def test_the_lambda_return_is_the_advantage_plus_the_value(gamma, lam):
    """algo.value_target=lambda_return (SB3's and CleanRL's value target): A_t + V(s_t) with the raw
    GAE advantage, the TD target r_t + gamma V(s_t+1) at lambda 0, and at lambda 1 the rewards-to-go
    (whose last term is the bootstrap value) that Spinning Up's target is."""
    rng = np.random.default_rng(3)
    size, cuts, last_vals = 20, [0, 8, 20], [0.0, 2.5]  # a terminated path, then a cut one
    rews, vals = rng.normal(size=size), rng.normal(size=size)
    bufs = {
        t: GAEBuffer(3, (), np.int64, size, gamma, lam, value_target=t)
        for t in ("lambda_return", "rewards_to_go")
    }
    for buf in bufs.values():
        for i, (a, b) in enumerate(itertools.pairwise(cuts)):
            for t in range(a, b):
                buf.store(np.zeros(3), 1, rews[t], vals[t], 0.0)
            buf.finish_path(last_vals[i])
    raw_adv = bufs["lambda_return"].adv[:, 0].copy()
    lam_ret, rtg = (bufs[t].get()["ret"] for t in ("lambda_return", "rewards_to_go"))
    for i, (a, b) in enumerate(itertools.pairwise(cuts)):
        adv, spinup = brute_gae(rews[a:b], vals[a:b], last_vals[i], gamma, lam)
        np.testing.assert_allclose(lam_ret[a:b], adv + vals[a:b], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(rtg[a:b], spinup, rtol=1e-4, atol=1e-4)  # unchanged by the key
        if lam == 0.0:
            nxt = np.append(vals[a + 1 : b], last_vals[i])
            np.testing.assert_allclose(lam_ret[a:b], rews[a:b] + gamma * nxt, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(lam_ret, raw_adv + vals.astype(np.float32), rtol=1e-6)
    if lam == 1.0:
        np.testing.assert_allclose(lam_ret, rtg, rtol=1e-4, atol=1e-4)
    else:
        assert not np.allclose(lam_ret, rtg, atol=1e-3)


def test_gae_of_several_envs_equals_one_buffer_per_env():
    """Each env's column is its own sequence of paths, cut at different steps; get() lays the envs out
    one after another, each exactly what a one-env buffer of its steps returns."""
    rng = np.random.default_rng(2)
    size, n, gamma, lam = 12, 3, 0.95, 0.9
    ends = {(0, 4): 0.0, (2, 7): 0.8, (1, 10): 0.0}  # (env, step) -> bootstrap value of a path ending there
    obs, rews, vals, logps = (rng.normal(size=(size, n, *s)) for s in ((2,), (), (), ()))
    acts = rng.integers(0, 3, (size, n))
    last = rng.normal(size=n)  # values at the epoch's end
    joint = GAEBuffer(2, (), np.int64, size, gamma, lam, normalize_adv=False, num_envs=n)
    single = [GAEBuffer(2, (), np.int64, size, gamma, lam, normalize_adv=False) for _ in range(n)]
    for t in range(size):
        joint.store(obs[t], acts[t], rews[t], vals[t], logps[t])
        for i in range(n):
            single[i].store(obs[t, i], acts[t, i], rews[t, i], vals[t, i], logps[t, i])
            if (i, t) in ends:
                joint.finish_path(ends[i, t], i)
                single[i].finish_path(ends[i, t])
    for i in range(n):
        joint.finish_path(last[i], i)
        single[i].finish_path(last[i])
    got, want = joint.get(), [b.get() for b in single]
    for key, value in got.items():
        np.testing.assert_array_equal(value, np.concatenate([w[key] for w in want]), err_msg=key)


def test_gae_buffer_refuses_partial_epoch():
    buf = GAEBuffer(1, (), np.int64, 4, 0.99, 0.95)
    buf.store(np.zeros(1), 0, 1.0, 0.0, 0.0)
    with pytest.raises(AssertionError):
        buf.get()
