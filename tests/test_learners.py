"""The math of each PyTorch learner on small batches, in-process (no CLI)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlexp.algos import ALGOS
from rlexp.envs import ActionScaler
from rlexp.nn.torch import SquashedGaussianActor
from rlexp.seeding import RankSeeds

from .conftest import composed

OBS = spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 1.0], np.float32))
DISCRETE = spaces.Discrete(3)


def learner(algo: str, act_space: spaces.Space = BOX, *overrides: str):
    cfg = composed(f"algo={algo}", "network.hidden_sizes=[16,16]", *overrides)
    return ALGOS[algo].learner_class("torch")(OBS, act_space, cfg, RankSeeds(0))


def on_policy_batch(lrn, n: int = 64) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    steps = [lrn.step(o) for o in obs]
    return {
        "obs": obs,
        "act": np.array([s[0] for s in steps]),
        "logp": np.array([s[2] for s in steps], np.float32),
        "adv": rng.normal(size=n).astype(np.float32),
        "ret": rng.normal(size=n).astype(np.float32),
        "val": np.array([s[1] for s in steps], np.float32),
    }


def off_policy_batch(n: int = 32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    return {
        "obs": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "obs2": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "act": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rew": rng.normal(size=n).astype(np.float32),
        "done": (rng.uniform(size=n) < 0.2).astype(np.float32),
    }


def flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(module.parameters()).detach().clone()


@pytest.mark.parametrize("algo", ["vpg", "trpo", "ppo"])
@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
def test_on_policy_update_changes_policy_and_reports_its_keys(algo, space):
    lrn = learner(algo, space)
    before = flat(lrn.ac.pi)
    stats = lrn.update(on_policy_batch(lrn))
    assert not torch.equal(before, flat(lrn.ac.pi))
    keys = [k for k, _ in ALGOS[algo].stats(lrn.algo)]
    assert set(stats) == set(keys)
    assert stats["DeltaLossV"] < 0  # 80 value steps on a fixed batch lower its loss
    if algo != "trpo":
        assert stats["KL"] != 0.0  # Spinning Up's PyTorch VPG always logged 0 here


def test_trpo_step_stays_in_the_trust_region():
    lrn = learner("trpo")
    stats = lrn.update(on_policy_batch(lrn))
    assert 0 <= stats["BacktrackIters"] < lrn.algo.backtrack_iters
    assert 0 < stats["KL"] <= lrn.algo.delta and stats["DeltaLossPi"] <= 0


def test_trpo_failed_line_search_keeps_the_old_policy(capsys):
    lrn = learner("trpo")
    batch = on_policy_batch(lrn)
    before = flat(lrn.ac.pi)
    real = lrn._surrogate
    calls = []

    def never_better(data):  # the first call (the old loss) is real; every try afterwards looks worse
        calls.append(1)
        return real(data) if len(calls) == 1 else real(data) + 1e6

    lrn._surrogate = never_better
    stats = lrn.update(batch)
    assert torch.equal(before, flat(lrn.ac.pi))
    assert stats["BacktrackIters"] == lrn.algo.backtrack_iters and stats["KL"] == 0.0
    assert "Line search failed! Keeping old params." in capsys.readouterr().out


def test_npg_takes_the_full_step_without_line_search():
    lrn = learner("trpo", BOX, "algo.variant=npg")
    stats = lrn.update(on_policy_batch(lrn))
    assert "BacktrackIters" not in stats and stats["KL"] > 0


def test_conjugate_gradient_solves_spd_system():
    from rlexp.algos.trpo.natural_gradient import conjugate_gradient

    g = torch.Generator().manual_seed(0)
    m = torch.randn(6, 6, generator=g, dtype=torch.float64)
    a = m @ m.T + 6 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iters=12)
    torch.testing.assert_close(a @ x, b, atol=1e-6, rtol=1e-6)


def test_ppo_stops_early_when_kl_exceeds_the_target():
    lrn = learner("ppo", BOX, "algo.target_kl=1e-4", "algo.pi_lr=0.01")
    stats = lrn.update(on_policy_batch(lrn))
    assert stats["StopIter"] == 1  # step 0 starts at KL ~0; after one step KL > 1.5 * target_kl
    lrn = learner("ppo", BOX, "algo.target_kl=100")
    assert lrn.update(on_policy_batch(lrn))["StopIter"] == lrn.algo.train_pi_iters - 1


def test_polyak_update_of_targets():
    lrn = learner("ddpg")
    targ_before, polyak = flat(lrn.q_targs[0]), lrn.algo.polyak
    lrn.update(off_policy_batch())
    expected = polyak * targ_before + (1 - polyak) * flat(lrn.qs[0])
    torch.testing.assert_close(flat(lrn.q_targs[0]), expected)
    assert all(not p.requires_grad for p in lrn.q_targs[0].parameters())


def test_centered_rmsprop_steps_as_torchs_and_shares_its_state(monkeypatch):
    """rlexp's centered RMSprop (DQN's on MinAtar) takes torch.optim.RMSprop(centered=True)'s steps to
    float32 rounding, leaves weights whose gradient stays zero alone, runs its own step after the first
    (not torch's), and its state_dict loads into torch's and back."""
    import torch.optim.rmsprop as torch_rmsprop

    from rlexp.algos.torch_common import rmsprop

    calls = []
    torch_step = torch_rmsprop.rmsprop
    monkeypatch.setattr(torch_rmsprop, "rmsprop", lambda *a, **k: calls.append(1) or torch_step(*a, **k))
    gen = torch.Generator().manual_seed(0)
    init = torch.randn(500, generator=gen)
    ours_p, ref_p = torch.nn.Parameter(init.clone()), torch.nn.Parameter(init.clone())
    ours = rmsprop([ours_p], lr=1e-2, alpha=0.95, eps=0.01)
    ref = torch.optim.RMSprop([ref_p], lr=1e-2, alpha=0.95, eps=0.01, centered=True)
    dead = torch.arange(500) < 200  # weights whose gradient is always zero
    for _ in range(30):
        g = torch.randn(500, generator=gen).masked_fill(dead, 0.0)
        ours_p.grad, ref_p.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert len(calls) == 31  # torch's 30 and our first (which makes the state)
    torch.testing.assert_close(ours_p.detach(), ref_p.detach(), rtol=1e-5, atol=1e-6)
    assert torch.equal(ours_p.detach()[dead], init[dead])
    ours_sd, ref_sd = ours.state_dict(), ref.state_dict()
    assert ours_sd["param_groups"] == ref_sd["param_groups"]
    for key in ("step", "square_avg", "grad_avg"):
        torch.testing.assert_close(ours_sd["state"][0][key], ref_sd["state"][0][key], rtol=1e-5, atol=1e-7)
    again_p = torch.nn.Parameter(ref_p.detach().clone())
    again = rmsprop([again_p], lr=1e-2, alpha=0.95, eps=0.01)
    again.load_state_dict(copy.deepcopy(ref_sd))  # torch's state goes on in ours, with our step
    again_p.grad = ref_p.grad = torch.randn(500, generator=gen)
    again.step()
    ref.step()
    assert len(calls) == 32
    torch.testing.assert_close(again_p.detach(), ref_p.detach(), rtol=1e-5, atol=1e-6)
    back = torch.optim.RMSprop([torch.nn.Parameter(init.clone())], lr=1e-2, centered=True)
    back.load_state_dict(copy.deepcopy(ours_sd))  # and ours in torch's
    assert back.param_groups[0]["alpha"] == 0.95 and float(back.state_dict()["state"][0]["step"]) == 30


def test_td3_updates_policy_every_policy_delay_steps():
    lrn = learner("td3")
    pi_before = flat(lrn.pi)
    first, second = lrn.update(off_policy_batch()), lrn.update(off_policy_batch())
    assert "LossPi" in first and "LossPi" not in second
    third = lrn.update(off_policy_batch())
    assert "LossPi" in third and not torch.equal(pi_before, flat(lrn.pi))
    assert first["Q1Vals"].shape == (32,) and lrn.n_updates == 3


@pytest.mark.parametrize("autotune", [False, True])
def test_sac_update_and_entropy_tuning(autotune):
    lrn = learner("sac", BOX, f"algo.autotune_alpha={autotune}")
    stats = lrn.update(off_policy_batch())
    keys = {k for k, _ in ALGOS["sac"].stats(lrn.algo)}
    assert set(stats) == keys
    assert lrn.target_entropy == -2.0
    assert (lrn.alpha != 0.2) == autotune
    assert all(p.requires_grad for p in lrn.q_params)  # unfrozen again after the policy step


def test_squashed_gaussian_log_prob_has_the_tanh_correction():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, [8], "relu")
    obs = torch.randn(5, 3)
    noise = torch.randn(5, 2)
    a, logp = actor(obs, noise=noise)
    h = actor.net(obs)
    mu, std = actor.mu_layer(h), torch.exp(torch.clamp(actor.log_std_layer(h), -20, 2))
    u = mu + std * noise
    direct = torch.distributions.Normal(mu, std).log_prob(u).sum(-1) - torch.log(1 - torch.tanh(u) ** 2).sum(
        -1
    )
    torch.testing.assert_close(logp, direct, rtol=1e-4, atol=1e-4)
    assert torch.all(a.abs() <= 1)


def test_action_scaler_respects_asymmetric_bounds():
    scaler = ActionScaler(BOX)
    np.testing.assert_allclose(scaler.to_env(np.array([-1.0, -1.0])), [-2.0, 0.0])
    np.testing.assert_allclose(scaler.to_env(np.array([1.0, 1.0])), [2.0, 1.0])
    np.testing.assert_allclose(scaler.to_env(np.array([0.0, 0.0])), [0.0, 0.5])
    a = np.array([1.3, 0.25], np.float32)
    np.testing.assert_allclose(scaler.to_env(scaler.normalize(a)), a, rtol=1e-6)


@pytest.mark.parametrize("algo", ["ppo", "ddpg", "td3", "sac"])
def test_checkpoint_round_trip_restores_every_network_and_optimizer(tmp_path, algo):
    lrn = learner(algo)
    if algo == "ppo":
        lrn.update(on_policy_batch(lrn))
    else:
        lrn.update(off_policy_batch())
        lrn.update(off_policy_batch())
    lrn.save(tmp_path / "c.pt", {"epoch": 1, "replay": {"obs": np.ones((2, 3), np.float32)}})
    fresh = learner(algo, BOX, "seed=5")
    loop = fresh.load(tmp_path / "c.pt")
    assert loop["epoch"] == 1 and loop["replay"]["obs"].shape == (2, 3)
    for name, module in lrn.modules().items():
        assert torch.equal(flat(module), flat(fresh.modules()[name])), name
    for name, opt in lrn.optimizers().items():
        a, b = opt.state_dict()["state"], fresh.optimizers()[name].state_dict()["state"]
        assert all(torch.equal(a[i]["exp_avg"], b[i]["exp_avg"]) for i in a), name
    if algo != "ppo":
        assert fresh.n_updates == lrn.n_updates


@pytest.mark.parametrize("algo", ["ppo", "vpg"])
@pytest.mark.parametrize("space", [BOX, DISCRETE], ids=["box", "discrete"])
@pytest.mark.parametrize("activation", ["tanh", "relu", "elu"])
def test_numpy_acting_matches_the_torch_networks_after_every_update_and_load(
    tmp_path, algo, space, activation
):
    """step/value/act run in numpy on a weight snapshot: V, log-probs and the deterministic action equal
    the torch networks' (to float32 precision) at start, after an update and after a checkpoint load."""
    lrn = learner(algo, space, f"network.activation={activation}")
    obs = np.random.default_rng(5).uniform(-1, 1, (20, 3)).astype(np.float32)

    def check(lrn) -> None:
        steps = [lrn.step(o) for o in obs]
        acts = np.array([s[0] for s in steps])
        with torch.no_grad():
            _, logp = lrn.ac.pi(torch.as_tensor(obs), torch.as_tensor(acts))
            v = lrn.ac.v(torch.as_tensor(obs))
            head = lrn.ac.pi.logits_net if space is DISCRETE else lrn.ac.pi.mu_net
            out = head(torch.as_tensor(obs)).numpy()
        np.testing.assert_allclose([s[2] for s in steps], logp.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose([s[1] for s in steps], v.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose([lrn.value(o) for o in obs], v.numpy(), rtol=1e-5, atol=1e-6)
        det = np.array([lrn.act(o, deterministic=True) for o in obs])
        if space is DISCRETE:
            assert det.dtype == np.int64 and (det == out.argmax(-1)).all()
        else:
            assert det.dtype == np.float32 and np.allclose(det, out, rtol=1e-5, atol=1e-6)

    check(lrn)
    before = lrn.value(obs[0])
    lrn.update(on_policy_batch(lrn))
    assert lrn.value(obs[0]) != before  # the snapshot follows the update
    check(lrn)
    lrn.save(tmp_path / "c.pt", {})
    fresh = learner(algo, space, f"network.activation={activation}", "seed=1")
    fresh.load(tmp_path / "c.pt")
    assert fresh.value(obs[0]) == lrn.value(obs[0])
    assert [fresh.step(o)[0].tolist() for o in obs] == [lrn.step(o)[0].tolist() for o in obs]  # RNG restored
    check(fresh)
