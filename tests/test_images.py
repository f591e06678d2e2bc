"""Image observations: the Nature CNN encoder (network=nature_cnn), uint8 storage, both backends,
every algorithm, exact resume, test_policy and the Python API, and the one-line refusals.

The pixel env is tests/envs.py's PixelSide (numpy only: a bright square in the left or right half of
a 36x36 image; say which half). RLExpTest/PixelCartPole-v0 is gymnasium's own AddRenderObservation
of CartPole (400x600 RGB; too large to train on here, used for the refusal).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

import tests.envs  # noqa: F401 (registers the test envs for the in-process tests)
from rlexp.algos import ALGOS
from rlexp.errors import RLExpError
from rlexp.nn import Image, image_layout, is_image_space, looks_like_image, nature_cnn_output
from rlexp.seeding import RankSeeds
from tests.conftest import composed, run_cli, train
from tests.test_resume import assert_resumes_exactly, final_state, read_checkpoint

IMAGE = spaces.Box(0, 255, (36, 36, 3), np.uint8)
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)
DISCRETE = spaces.Discrete(3)
PIXELS = ("env=gym", "env.id=tests.envs:RLExpTest/PixelSide-v0")
CONTINUOUS = (*PIXELS, "+env.kwargs.continuous=true")  # the same task with a Box action in [-1, 1]
OFF_POLICY = (  # a few gradient steps on small batches: a CNN per network is slow on one core
    "algo.steps_per_epoch=55",  # episodes are 10 steps: epochs end mid-episode
    "algo.start_steps=40",
    "algo.update_after=40",
    "algo.update_every=20",
    "algo.batch_size=8",
    "algo.replay_size=1000",
    "algo.keep_checkpoints=null",  # the resume test cuts back to epoch 1
    "algo.num_test_episodes=2",
    "network=nature_cnn_256x256",
    "network.hidden_sizes=[32]",
)
ON_POLICY = (
    "algo.steps_per_epoch=205",
    "algo.train_pi_iters=5",
    "algo.train_v_iters=5",
    "network=nature_cnn",
)
RTOL, ATOL = 2e-4, 2e-5


def images(n: int, shape: tuple[int, ...] = IMAGE.shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def image_learner(algo: str, backend: str, act_space: spaces.Space, *overrides: str, seed: int = 0):
    network = "nature_cnn" if algo in ("vpg", "trpo", "ppo", "dqn") else "nature_cnn_256x256"
    cfg = composed(
        f"algo={algo}", f"backend={backend}", f"network={network}", "network.hidden_sizes=[16]", *overrides
    )
    return ALGOS[algo].learner_class(backend)(IMAGE, act_space, cfg, RankSeeds(seed))


# --- the layout of image observations -----------------------------------------------------------
def test_image_layouts_and_the_smallest_image_of_the_nature_cnn():
    assert image_layout(spaces.Box(0, 255, (84, 84, 4), np.uint8)) == Image((84, 84, 4), False)
    assert image_layout(spaces.Box(0, 255, (3, 64, 48), np.uint8)).chw == (3, 64, 48)
    assert image_layout(spaces.Box(0, 255, (40, 50), np.uint8)).chw == (1, 40, 50)
    assert image_layout(spaces.Box(0, 255, (3, 3, 3), np.uint8)).channels_first is False  # a tie: last
    stack = spaces.Box(0, 255, (4, 36, 36, 3), np.uint8)
    assert is_image_space(stack) and image_layout(stack) is None
    assert not is_image_space(spaces.Box(0.0, 1.0, (36, 36, 3), np.float32))  # float: not an image
    assert not is_image_space(spaces.Box(0, 255, (128,), np.uint8))  # Atari RAM: a flat vector
    assert nature_cnn_output(36, 36) == (1, 1) and nature_cnn_output(84, 84) == (7, 7)
    assert min(nature_cnn_output(35, 84)) < 1


@pytest.mark.parametrize("shape", [(36, 40, 3), (2, 36, 40), (36, 40)], ids=["hwc", "chw", "hw"])
def test_the_nature_cnn_computes_the_same_features_on_both_backends(shape):
    """TF keeps torch's weight layout: the weights copy as they are, for every image layout, and
    one observation gives the features of its row in a batch."""
    import rlexp.nn.tf as nn_tf
    import rlexp.nn.torch as nn_torch

    image = image_layout(spaces.Box(0, 255, shape, np.uint8))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cnn_torch = nn_torch.NatureCNN(image)
    cnn_tf = nn_tf.NatureCNN(image, np.random.default_rng(1))
    params = list(cnn_torch.parameters())
    assert [tuple(p.shape) for p in params] == [tuple(v.shape) for v in cnn_tf.parameters()]
    for v, p in zip(cnn_tf.parameters(), params, strict=True):
        v.assign(p.detach().numpy())
    obs = images(5, shape)
    with torch.no_grad():
        want = cnn_torch(torch.as_tensor(obs)).numpy()
        one = cnn_torch(torch.as_tensor(obs[2])).numpy()
    assert want.shape == (5, 512) and one.shape == (512,)
    np.testing.assert_allclose(one, want[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cnn_tf(obs).numpy(), want, rtol=RTOL, atol=ATOL)


# --- learners ----------------------------------------------------------------------------------
def on_policy_batch(lrn, n: int = 24, obs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    obs = images(n) if obs is None else obs
    steps = [lrn.step(o) for o in obs]
    rng = np.random.default_rng(2)
    return {
        "obs": obs,
        "act": np.array([s[0] for s in steps]),
        "logp": np.array([s[2] for s in steps], np.float32),
        "adv": rng.normal(size=n).astype(np.float32),
        "ret": rng.normal(size=n).astype(np.float32),
        "val": np.array([s[1] for s in steps], np.float32),
    }


def off_policy_batch(n: int = 8, **noise: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    batch = {
        "obs": images(n, seed=4),
        "obs2": images(n, seed=5),
        "act": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "rew": rng.normal(size=n).astype(np.float32),
        "done": (rng.uniform(size=n) < 0.3).astype(np.float32),
    }
    for key in noise:  # SAC's standard normal draws, pre-drawn for the parity test
        batch[key] = rng.normal(size=(n, 2)).astype(np.float32)
    return batch


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_update_and_acting_parity_on_images(algo):
    """The torch and the TF learner from the same weights: the same actions (TF acts through a
    compiled function, torch through torch), statistics and parameters after an update."""
    act_space = DISCRETE if algo == "ppo" else BOX
    # a few policy steps: a long run of them on a tiny batch amplifies float32 rounding (the clip
    # fraction and the early stop then differ)
    few = ("algo.train_pi_iters=3", "algo.train_v_iters=3") if algo == "ppo" else ()
    t = image_learner(algo, "torch", act_space, *few)
    cfg = dataclasses.replace(t.cfg, backend=composed("backend=tf").backend)
    f = ALGOS[algo].learner_class("tf")(IMAGE, act_space, cfg, RankSeeds(0))
    f.set_weights({k: [p.detach().numpy() for p in m.parameters()] for k, m in t.modules().items()})
    obs = images(6, seed=7)
    if algo == "ppo":
        assert [f.value(o) for o in obs] == pytest.approx([t.value(o) for o in obs], rel=RTOL, abs=ATOL)
        batch = on_policy_batch(t)
    else:
        batch = off_policy_batch(noise=True, noise2=True)
    for o in obs:
        np.testing.assert_allclose(
            f.act(o, deterministic=True), t.act(o, deterministic=True), rtol=RTOL, atol=ATOL
        )
    st, sf = t.update(dict(batch)), f.update(dict(batch))
    assert set(st) == set(sf)
    for k in st:
        np.testing.assert_allclose(
            np.asarray(sf[k], np.float64), np.asarray(st[k], np.float64), rtol=1e-3, atol=1e-4
        )
    tf_weights = f.get_weights()
    for name, module in t.modules().items():
        for i, (p, q) in enumerate(zip(module.parameters(), tf_weights[name], strict=True)):
            np.testing.assert_allclose(q, p.detach().numpy(), rtol=1e-3, atol=1e-4, err_msg=f"{name}[{i}]")


def test_a_trpo_policy_reloads_bit_for_bit_after_its_line_search(tmp_path):
    """TRPO sets the policy's parameters to the line search's step: in place, so that they keep the
    memory layout a loaded checkpoint has. (Made views of one vector, the Box policy's log std first,
    every weight after it was 8 bytes off its alignment, and the MinAtar CNN's convolution rounded
    differently in the saved and the reloaded learner.)"""
    minatar = spaces.Box(0, 1, (10, 10, 4), np.uint8)
    cfg = composed("algo=trpo", "backend=torch", "network=minatar_cnn", "network.hidden_sizes=[16]")

    def learner(seed: int):
        return ALGOS["trpo"].learner_class("torch")(minatar, BOX, cfg, RankSeeds(seed))

    lrn = learner(0)
    obs = np.random.default_rng(8).integers(0, 2, (24, *minatar.shape), dtype=np.uint8)
    before = [p.data_ptr() for p in lrn.ac.pi.parameters()]
    lrn.update(on_policy_batch(lrn, obs=obs))
    assert [p.data_ptr() for p in lrn.ac.pi.parameters()] == before
    path = tmp_path / f"c{lrn.CHECKPOINT_SUFFIX}"
    lrn.save(path, {"epoch": 1})
    fresh = learner(3)
    fresh.load(path)
    for o in obs[:6]:
        np.testing.assert_array_equal(fresh.act(o, deterministic=True), lrn.act(o, deterministic=True))


@pytest.mark.parametrize("backend", ["torch", "tf"])
@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_every_algorithm_acts_updates_and_reloads_on_images(tmp_path, algo, backend):
    on_policy = algo in ("vpg", "trpo", "ppo")
    act_space = DISCRETE if (on_policy and backend == "tf") or algo == "dqn" else BOX
    lrn = image_learner(algo, backend, act_space)
    obs = images(4, seed=8)
    a = lrn.act(obs[0], deterministic=True)
    assert np.shape(a) == (() if act_space is DISCRETE else (2,))
    if on_policy:
        batch = on_policy_batch(lrn)
    elif algo == "dqn":  # Discrete actions and the n-step discount of each transition
        batch = {**off_policy_batch(), "act": np.arange(8) % 3, "discount": np.full(8, 0.99, np.float32)}
    else:
        batch = off_policy_batch()
    lrn.update(batch)
    path = tmp_path / f"c{lrn.CHECKPOINT_SUFFIX}"
    lrn.save(path, {"epoch": 1})
    fresh = image_learner(algo, backend, act_space, seed=3)
    fresh.load(path)
    for o in obs:
        np.testing.assert_array_equal(fresh.act(o, deterministic=True), lrn.act(o, deterministic=True))
    if algo != "ddpg" and algo != "td3":  # stochastic policies: the restored generator draws the same
        np.testing.assert_array_equal(fresh.act(obs[1]), lrn.act(obs[1]))


def test_the_replay_buffer_keeps_images_as_uint8_in_both_checkpoint_formats(tmp_path):
    from rlexp.buffers import GAEBuffer, ReplayBuffer
    from rlexp.checkpoint import load_npz, save_npz, save_torch
    from rlexp.envs import obs_dtype

    assert obs_dtype(IMAGE) == np.uint8 and obs_dtype(BOX) == np.float32
    replay = ReplayBuffer(IMAGE.shape, 2, 10, obs_dtype(IMAGE))
    assert replay.obs.shape == (10, 36, 36, 3) and replay.obs.dtype == replay.obs2.dtype == np.uint8
    obs = images(3)
    for i in range(3):
        replay.store(obs[i], np.zeros(2, np.float32), 1.0, obs[(i + 1) % 3], False)
    batch = replay.sample_batch(5, np.random.default_rng(0))
    assert batch["obs"].dtype == np.uint8 and batch["obs"].shape == (5, 36, 36, 3)
    save_npz(tmp_path / "r.npz", replay.state_dict())
    save_torch(tmp_path / "r.pt", replay.state_dict())
    for state in (load_npz(tmp_path / "r.npz"), read_checkpoint(tmp_path / "r.pt")):
        assert state["obs"].dtype == np.uint8
        back = ReplayBuffer(IMAGE.shape, 2, 10, np.uint8)
        back.load_state_dict(state)
        np.testing.assert_array_equal(back.obs[:3], obs)
        np.testing.assert_array_equal(back.obs2[:3], np.roll(obs, -1, axis=0))
    gae = GAEBuffer(IMAGE.shape, (), np.int64, 4, 0.99, 0.95, np.uint8)
    assert gae.obs.shape == (4, 1, 36, 36, 3) and gae.obs.dtype == np.uint8  # (steps, envs, *image)


# --- checks before a run -------------------------------------------------------------------------
def test_images_and_networks_that_do_not_fit_are_refused_with_what_to_choose():
    from rlexp.envs import image_observations

    ppo, sac = composed("algo=ppo"), composed("algo=sac", "network=nature_cnn")
    with pytest.raises(
        RLExpError,
        match=r"X-v0 has image observations Box\(0, 255, \(36, 36, 3\), uint8\) and "
        r"network.encoder=mlp would flatten them into 3888 raw inputs; use network=nature_cnn ",
    ):
        image_observations(ppo.algo, ppo.network, "X-v0", IMAGE)
    with pytest.raises(RLExpError, match="use network=nature_cnn_256x256 "):  # the off-policy preset
        image_observations(sac.algo, composed("algo=sac").network, "X-v0", IMAGE)
    with pytest.raises(
        RLExpError,
        match=r"network.encoder=nature_cnn reads images .* but X-v0 has observations Box.*; use an MLP network",
    ):
        image_observations(sac.algo, sac.network, "X-v0", BOX)
    with pytest.raises(
        RLExpError, match=r"but X-v0 has a stack of images Box.*; merge the stack into the channels"
    ):
        image_observations(sac.algo, sac.network, "X-v0", spaces.Box(0, 255, (4, 36, 36, 3), np.uint8))
    with pytest.raises(RLExpError, match="needs images of at least 36x36 pixels, but X-v0 has 32x40"):
        image_observations(sac.algo, sac.network, "X-v0", spaces.Box(0, 255, (32, 40), np.uint8))
    assert image_observations(ppo.algo, ppo.network, "X-v0", BOX) is None
    assert image_observations(sac.algo, sac.network, "X-v0", IMAGE) == Image((36, 36, 3), False)


def test_the_warning_for_float_images_names_a_cnn_that_takes_their_size():
    """Float pixels an MLP flattens: the warning's CNN is the Nature CNN's preset from 36x36 on, the
    MinAtar CNN below (the Nature CNN would refuse them)."""
    from rlexp.envs import flattened_image_warning

    ppo, sac = composed("algo=ppo"), composed("algo=sac")
    small, large = (
        spaces.Box(0.0, 1.0, (10, 10, 3), np.float32),
        spaces.Box(0.0, 1.0, (3, 40, 40), np.float32),
    )
    assert flattened_image_warning(ppo.algo, ppo.network, "X-v0", small).endswith("(network=minatar_cnn)")
    assert flattened_image_warning(ppo.algo, ppo.network, "X-v0", large).endswith("(network=nature_cnn)")
    assert flattened_image_warning(sac.algo, sac.network, "X-v0", large).endswith(
        "(network=nature_cnn_256x256)"
    )


def test_the_replay_memory_check_counts_images_as_bytes(monkeypatch):
    import gymnasium as gym

    import rlexp.launch as launch

    monkeypatch.setattr(launch, "_available_memory", lambda: 2**30)
    cfg = composed("algo=sac", *CONTINUOUS, "network=nature_cnn_256x256", "algo.replay_size=100000")
    env = gym.make("RLExpTest/PixelSide-v0", continuous=True)
    launch.check_memory(cfg, env)  # 100000 * 7788 bytes = 0.73 GiB: uint8 images fit (float32 would not)
    cfg.algo.replay_size = 200000
    with pytest.raises(RLExpError, match=r"needs 1.5 GiB .* \(7788 bytes per transition\)"):
        launch.check_memory(cfg, env)


def test_observation_normalisation_is_refused_for_images():
    from rlexp.launch import validate_experiment

    cfg = composed(*PIXELS, "network=nature_cnn", "env.normalize_obs=true")
    with pytest.raises(
        RLExpError, match=r"^env.normalize_obs=true normalises vector observations, but .*x/255"
    ):
        validate_experiment(cfg)
    cfg.env.normalize_obs, cfg.env.normalize_reward = False, True  # rewards may be scaled
    validate_experiment(cfg)


def test_an_old_run_without_network_encoder_reads_as_an_mlp(tmp_path):
    import yaml

    from rlexp.config import load_run_config, to_container

    run = tmp_path / "old"
    run.mkdir()
    saved = to_container(composed("network=mlp400x300_relu"))  # the config a run writes, minus the new key
    del saved["network"]["encoder"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    network = load_run_config(run).network
    assert (network.encoder, network.hidden_sizes) == ("mlp", [400, 300])


def test_an_image_env_without_a_cnn_is_one_line(cli, tmp_path):
    """gymnasium's own pixel observations (AddRenderObservation of CartPole) with the default MLP."""
    run_dir = tmp_path / "run"
    # SDL_VIDEODRIVER: pygame's rgb_array rendering would otherwise complain on stderr about a
    # missing XDG_RUNTIME_DIR on a machine without a desktop session
    res = cli(
        f"hydra.run.dir={run_dir}",
        "env=gym",
        "env.id=tests.envs:RLExpTest/PixelCartPole-v0",
        env={"SDL_VIDEODRIVER": "dummy"},
    )
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert lines == [
        "rlexp: error: tests.envs:RLExpTest/PixelCartPole-v0 has image observations Box(0, 255, (400, 600, 3), "
        "uint8) and network.encoder=mlp would flatten them into 720000 raw inputs; use network=nature_cnn "
        "(a CNN encoder), or flatten them in your env if an MLP is what you want"
    ], res.stderr
    assert not (run_dir / "config.yaml").exists()


def test_float_images_are_flattened_with_one_warning_and_refused_by_the_cnn(cli, tmp_path):
    """Observations shaped like an image but not uint8 may be a tensor that is no image: an MLP takes
    them with one warning line (never silently), a CNN encoder refuses them, naming the fix."""
    env = ("env=gym", "env.id=tests.envs:RLExpTest/FloatPixelSide-v0")
    res = cli(f"hydra.run.dir={tmp_path / 'mlp'}", *env, "algo.epochs=1", "algo.steps_per_epoch=100")
    assert res.returncode == 0, res.stderr[-3000:]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("rlexp: warning:")]
    assert warnings == [
        "rlexp: warning: tests.envs:RLExpTest/FloatPixelSide-v0 has observations Box(0.0, 1.0, (36, 36, 3), "
        "float32) shaped like an image but not uint8; network.encoder=mlp flattens them into 3888 inputs. If "
        "they are images, give them as uint8 pixels of 0-255 (a wrapper) and use a CNN network (network=nature_cnn)"
    ], res.stderr
    res = cli(f"hydra.run.dir={tmp_path / 'cnn'}", *env, "network=nature_cnn")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert (
        res.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "but tests.envs:RLExpTest/FloatPixelSide-v0 has non-uint8 images Box(0.0, 1.0, (36, 36, 3), float32); "
            "give it uint8 pixels of 0-255 (a wrapper; the CNN scales them by 1/255)"
        )
    ), res.stderr
    assert not looks_like_image(spaces.Box(-1.0, 1.0, (17,), np.float32))
    assert not looks_like_image(spaces.Box(0, 255, (36, 36, 3), np.uint8))  # uint8: a real image
    assert not looks_like_image(spaces.Box(0.0, 1.0, (5, 7, 2), np.float32))  # 2 channels, 5 pixels
    assert looks_like_image(spaces.Box(0.0, 1.0, (3, 64, 48), np.float32))  # channels first


# --- training ----------------------------------------------------------------------------------
@pytest.mark.slow
def test_ppo_learns_from_pixels(tmp_path):
    """A random policy returns about 5 of 10; PPO with the Nature CNN reaches 9 within 5000 steps (~10 s)."""
    progress = train(
        tmp_path / "run",
        *PIXELS,
        "network=nature_cnn",
        "algo.steps_per_epoch=500",
        "algo.epochs=10",
        "algo.train_pi_iters=10",
        "algo.train_v_iters=10",
    )
    returns = progress["AverageEpRet"].to_numpy()
    assert returns[0] < 6.0, returns  # it starts at chance
    assert returns[-1] >= 9.0, returns  # measured at seed 0: 9.70 (torch), 9.70 (tf)


# PPO trains on torch in test_ppo_learns_from_pixels; these train the other three of {PPO, an
# off-policy algorithm} x {torch, tf} from the command line
CASES = {
    "ppo-tf": ("algo=ppo", "backend=tf", *PIXELS, *ON_POLICY),
    "sac-torch": ("algo=sac", "backend=torch", *CONTINUOUS, *OFF_POLICY),
    "td3-tf": ("algo=td3", "backend=tf", *CONTINUOUS, *OFF_POLICY),
}


@pytest.mark.parametrize("case", list(CASES))
def test_resume_on_images_equals_an_uninterrupted_run_and_the_policy_acts(tmp_path, case):
    """Exact resume (the replay buffer's uint8 images included), then the Python API's policy acts on
    images (and test_policy, once)."""
    whole, part = tmp_path / "whole", tmp_path / "part"
    train(whole, *CASES[case], "algo.epochs=2", "algo.save_freq=1")
    assert_resumes_exactly(whole, part, 1, "allow_env_import=true")  # tests.envs is not installed
    state = final_state(whole)
    assert state["loop"]["episode"]["obs"].dtype == np.uint8
    if "replay" in state["loop"]:
        replay = state["loop"]["replay"]
        assert replay["obs"].dtype == np.uint8 and replay["obs"].shape == (110, 36, 36, 3)

    import rlexp

    policy = rlexp.load(whole).policy(allow_env_import=True)
    obs, _ = policy.env.reset(seed=0)
    assert obs.shape == (36, 36, 3) and obs.dtype == np.uint8  # kept as the env gives it
    assert policy.env.action_space.contains(policy(obs))

    if case == "ppo-tf":
        res = run_cli(
            str(whole),
            "--norender",
            "-n",
            "2",
            "--deterministic",
            "--allow-env-import",
            module="rlexp.test_policy",
        )
        assert res.returncode == 0, res.stderr[-3000:]
        assert res.stdout.count("EpLen 10") == 2
