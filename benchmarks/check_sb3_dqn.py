"""Is rlexp's DQN the same algorithm as SB3's at the zoo's settings? Three checks per env of the DQN
learning benchmark (CartPole-v1, LunarLander-v3, ALE/Pong-v5), the rlexp side as `tuned=dqn` composes
it, the SB3 side as bench_learning's --sb3 runs build it (common.ZOO_DQN):

- update: both take gradient steps on the same minibatches (SB3's replay sampling replaced by them), each
  step from the same state (rlexp's online and target networks and Adam moments copied into SB3's before
  it); the losses and the weights after each step must agree to float32 rounding.
- epsilon: rlexp's schedule (``exploration_steps``, absolute) against SB3's (``exploration_fraction`` of
  the budget), at every env step of the budget.
- frames (Atari only): gymnasium's AtariPreprocessing, which rlexp's env=atari uses, against SB3's
  AtariWrapper's MaxAndSkipEnv + WarpFrame, both on PongNoFrameskip-v4 stepping the same actions from the
  same state (no no-op starts, so the two games stay in step). gymnasium takes the maximum of the last two
  grayscale frames, SB3 the maximum of the RGB frames and then converts to grayscale: the pixels where
  the two orders differ are counted.

    python benchmarks/check_sb3_dqn.py [--envs CartPole-v1 ALE/Pong-v5] [--steps 10]

Prints one line per check; exits 1 when an update differs beyond rounding (it compares two libraries,
so a new SB3 release can make it fail: the installed version is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from common import DQN_ENVS, SB3_VERSION, ZOO_DQN, ensure_sb3

# after one step from the same state: weights apart by at most WEIGHT_TOL x lr (an Adam step moves a
# weight by up to ~lr; float32 rounding of a gradient entry near zero can flip its first step's sign,
# seen at 0.01 x lr), losses by LOSS_RTOL relative
WEIGHT_TOL = 0.1
LOSS_RTOL = 1e-5


def preset(env_id: str) -> tuple[Any, Any, Any]:
    """(config, observation space, action space) of ``tuned=dqn`` on ``env_id``, as a run composes it."""
    import gymnasium as gym
    import numpy as np
    from gymnasium import spaces
    from omegaconf import open_dict

    import rlexp
    from rlexp.config import load_config

    env_preset, gym_id = DQN_ENVS[env_id]
    raw = rlexp.compose(
        ["algo=dqn", "tuned=dqn", f"env={env_preset}", *([f"env.id={gym_id}"] if gym_id else [])]
    )
    with open_dict(raw):
        del raw["hydra"]  # what a run gets
    cfg = load_config(raw)
    if env_id.startswith("ALE/"):
        obs_space = spaces.Box(0, 255, (cfg.env.frame_stack, 84, 84), np.uint8)
        act_space = spaces.Discrete(6)  # Pong's minimal action set
    else:
        env = gym.make(env_id)
        obs_space, act_space = env.observation_space, env.action_space
        env.close()
    return cfg, obs_space, act_space


def sb3_model(env_id: str, obs_space: Any, act_space: Any) -> Any:
    """SB3's DQN with the zoo's preset on an env of these spaces (its steps are never taken)."""
    import gymnasium as gym
    from stable_baselines3 import DQN
    from stable_baselines3.common.logger import configure

    class Spaces(gym.Env):
        observation_space, action_space = obs_space, act_space

        def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
            return obs_space.sample(), {}

        def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
            return obs_space.sample(), 0.0, False, False, {}

    hp = dict(ZOO_DQN[env_id], buffer_size=1_000)  # the replay is never filled here
    policy = "CnnPolicy" if env_id.startswith("ALE/") else "MlpPolicy"
    model = DQN(policy, Spaces(), seed=0, device="cpu", verbose=0, **hp)
    model.set_logger(configure(None, []))
    return model


def sync(learner: Any, model: Any) -> None:
    """SB3's online network and Adam state := rlexp's (rlexp keeps them in one flat tensor, layer after
    layer in parameter order)."""
    import torch

    state = learner.optimizer.state.get(learner.q_flat, {})
    offset = 0
    with torch.no_grad():
        for p, q in zip(model.policy.q_net.parameters(), learner.q.parameters(), strict=True):
            p.copy_(q)
            if state:
                part = slice(offset, offset + p.numel())
                model.policy.optimizer.state[p] = {
                    "step": state["step"].clone(),
                    "exp_avg": state["exp_avg"][part].view_as(p).clone(),
                    "exp_avg_sq": state["exp_avg_sq"][part].view_as(p).clone(),
                }
            offset += p.numel()


def check_update(env_id: str, cfg: Any, obs_space: Any, act_space: Any, model: Any, steps: int) -> bool:
    """``steps`` gradient steps of both, each from the same state (SB3's synced to rlexp's before it, so
    float32 rounding does not compound: Adam's first steps move a weight by ~lr whatever the size of
    its gradient, so two runs apart by rounding drift apart step by step)."""
    import numpy as np
    import torch
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    from rlexp.algos import ALGOS
    from rlexp.seeding import RankSeeds

    learner = ALGOS["dqn"].learner_class("torch")(obs_space, act_space, cfg, RankSeeds(0))
    ours, theirs = list(learner.q.parameters()), list(model.policy.q_net.parameters())
    if [p.shape for p in ours] != [p.shape for p in theirs]:
        print(f"dqn {env_id:15s} update  networks differ: rlexp {[tuple(p.shape) for p in ours]}  "
              f"sb3 {[tuple(p.shape) for p in theirs]}")  # fmt: skip
        return False
    with torch.no_grad():  # the same target network (neither library updates it inside a gradient step)
        for p, q in zip(model.policy.q_net_target.parameters(), ours, strict=True):
            p.copy_(q)
    learner.update_target()
    rng = np.random.default_rng(0)
    n, lr = int(cfg.algo.batch_size), float(cfg.algo.lr)
    loss_gap, weight_gap, moved = 0.0, 0.0, 0.0
    losses = []
    for _ in range(steps):
        if env_id.startswith("ALE/"):
            obs, obs2 = (rng.integers(0, 256, (n, *obs_space.shape)).astype(np.uint8) for _ in range(2))
        else:
            obs, obs2 = (rng.normal(size=(n, *obs_space.shape)).astype(np.float32) for _ in range(2))
        batch = {
            "obs": obs, "obs2": obs2, "act": rng.integers(0, act_space.n, n),
            "rew": rng.normal(size=n).astype(np.float32), "done": (rng.uniform(size=n) < 0.1).astype(np.float32),
            "discount": np.full(n, cfg.algo.gamma, np.float32),
        }  # fmt: skip
        samples = ReplayBufferSamples(
            torch.as_tensor(obs), torch.as_tensor(batch["act"]).view(-1, 1), torch.as_tensor(obs2),
            torch.as_tensor(batch["done"]).view(-1, 1), torch.as_tensor(batch["rew"]).view(-1, 1), None,
        )  # fmt: skip
        model.replay_buffer.sample = lambda *_, s=samples, **__: s
        sync(learner, model)
        before = [q.detach().clone() for q in ours]
        model.train(gradient_steps=1, batch_size=n)
        ours_loss = float(learner.update(batch)["LossQ"])
        theirs_loss = float(model.logger.name_to_value["train/loss"])
        losses.append(ours_loss)
        loss_gap = max(loss_gap, abs(ours_loss - theirs_loss) / max(abs(theirs_loss), 1e-12))
        with torch.no_grad():
            weight_gap = max(
                weight_gap, *((p - q).abs().max().item() for p, q in zip(ours, theirs, strict=True))
            )
            moved = max(moved, *((p - b).abs().max().item() for p, b in zip(ours, before, strict=True)))
    same = weight_gap <= WEIGHT_TOL * lr and loss_gap <= LOSS_RTOL
    print(f"dqn {env_id:15s} update   {steps} gradient steps: losses {losses[0]:.4f} ... {losses[-1]:.4f}, "
          f"relative gap {loss_gap:.1e}; after a step weights apart by {weight_gap:.1e} at most "
          f"(a step moves them by up to {moved:.1e}; lr {lr:g})  {'same' if same else 'DIFFERENT'}")  # fmt: skip
    return same


def check_epsilon(env_id: str, cfg: Any, model: Any) -> None:
    import numpy as np

    budget = int(cfg.algo.epochs) * int(cfg.algo.steps_per_epoch)
    # SB3 sets its rate after each env step from 1 - num_timesteps / total; rlexp from the steps taken
    t = np.arange(budget + 1)
    sb3 = np.array([model.exploration_schedule(1.0 - s / budget) for s in t])
    ours = np.array([cfg.algo.epsilon(int(s)) for s in t])
    gap = np.abs(ours - sb3)
    print(f"dqn {env_id:15s} epsilon  over {budget:,} steps: {ours[0]:.2f} -> {ours[-1]:.2f} (sb3 "
          f"{sb3[0]:.2f} -> {sb3[-1]:.2f}), max |diff| {gap.max():.1e} at step {int(gap.argmax()):,}")  # fmt: skip


def check_frames(env_id: str, steps: int = 2_000) -> None:
    import ale_py
    import gymnasium as gym
    import numpy as np
    from gymnasium.wrappers import AtariPreprocessing
    from stable_baselines3.common.atari_wrappers import MaxAndSkipEnv, WarpFrame

    gym.register_envs(ale_py)
    game = env_id.split("/")[1].split("-")[0]
    ours = AtariPreprocessing(gym.make(f"{game}NoFrameskip-v4"), noop_max=0, frame_skip=4, screen_size=84)
    theirs = WarpFrame(MaxAndSkipEnv(gym.make(f"{game}NoFrameskip-v4"), skip=4), 84, 84)
    a, _ = ours.reset(seed=0)
    b, _ = theirs.reset(seed=0)
    rng = np.random.default_rng(0)
    differ, pixels, worst, diverged = 0, 0, 0, 0
    for _ in range(steps):
        d = np.abs(a.astype(int) - b[..., 0].astype(int))
        differ += bool(d.any())
        pixels += int((d > 0).sum())
        worst = max(worst, int(d.max()))
        action = int(rng.integers(ours.action_space.n))
        a, _, end_a, trunc_a, _ = ours.step(action)
        b, _, end_b, trunc_b, _ = theirs.step(action)
        if (end_a or trunc_a) != (end_b or trunc_b):
            diverged += 1
        if end_a or trunc_a or end_b or trunc_b:
            a, _ = ours.reset()
            b, _ = theirs.reset()
    share = pixels / (steps * a.size)
    print(f"dqn {env_id:15s} frames   {steps:,} steps: {differ / steps:.0%} of observations differ somewhere, "
          f"{share:.3%} of pixels, by at most {worst} of 255; games ended apart {diverged} times")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=list(ZOO_DQN), choices=list(ZOO_DQN))
    parser.add_argument("--steps", type=int, default=10, help="gradient steps of the update check")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps {args.steps}: give at least 1 gradient step")
    ensure_sb3()
    import stable_baselines3
    import torch

    torch.set_num_threads(1)
    print(f"rlexp vs stable-baselines3 {stable_baselines3.__version__} (benchmarks pin {SB3_VERSION})")
    same = True
    for env_id in args.envs:
        cfg, obs_space, act_space = preset(env_id)
        model = sb3_model(env_id, obs_space, act_space)
        same &= check_update(env_id, cfg, obs_space, act_space, model, args.steps)
        check_epsilon(env_id, cfg, model)
        if env_id.startswith("ALE/"):
            check_frames(env_id)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
