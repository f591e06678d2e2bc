"""``python -m rlexp.test_policy RUN_DIR``: run a trained policy and report its episode returns.

The env and the policy are rebuilt from RUN_DIR/config.yaml and a checkpoint (never from pickled
objects). Options follow Spinning Up's test_policy.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from omegaconf import OmegaConf

from rlexp.checkpoint import list_checkpoints
from rlexp.errors import RLExpError


def load_policy_and_env(run_dir: Path, itr: int = -1, render: bool = False):
    """(env, learner, epoch, to_env) of a run: the env from its config, the learner loaded from a
    checkpoint, and the map from the learner's actions to the env's."""
    from rlexp.algos import ALGOS
    from rlexp.config import load_config
    from rlexp.envs import make_env
    from rlexp.worker import CONFIG_FILE, prepare_backend

    if not (run_dir / CONFIG_FILE).is_file():
        raise RLExpError(f"{run_dir} is not an rlexp run directory (no {CONFIG_FILE})")
    cfg = load_config(OmegaConf.load(run_dir / CONFIG_FILE))
    prepare_backend(cfg)
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise RLExpError(f"{run_dir} has no checkpoint yet (checkpoints/epoch_N.pt)")
    epoch = max(ckpts) if itr < 0 else itr
    if epoch not in ckpts:
        raise RLExpError(
            f"--itr {itr}: no checkpoint after epoch {itr}; available: {', '.join(map(str, ckpts))}"
        )
    env = make_env(cfg.env, render_mode="human" if render else None)
    cfg.comm.procs = 1
    learner = ALGOS[cfg.algo.name].learner_class(cfg.backend.name)(
        env.observation_space, env.action_space, cfg, 0
    )
    learner.load(ckpts[epoch])
    return env, learner, epoch, ALGOS[cfg.algo.name].env_action(env.action_space)


def run_policy(
    env, learner, to_env, max_ep_len: int, num_episodes: int, deterministic: bool, seed: int
) -> None:
    """Play ``num_episodes`` episodes; print each and a summary table (EpRet, EpLen)."""
    from rlexp.logger import EpochLogger

    logger = EpochLogger(None)
    o, _ = env.reset(seed=seed)
    ep_ret, ep_len, n = 0.0, 0, 0
    while n < num_episodes:
        o, r, terminated, truncated, _ = env.step(to_env(learner.act(o, deterministic)))
        ep_ret += float(r)
        ep_len += 1
        if terminated or truncated or (max_ep_len > 0 and ep_len == max_ep_len):
            logger.store(EpRet=ep_ret, EpLen=ep_len)
            print(f"Episode {n} \t EpRet {ep_ret:.3f} \t EpLen {ep_len}")
            o, _ = env.reset()
            ep_ret, ep_len, n = 0.0, 0, n + 1
    logger.log_tabular("EpRet", with_min_and_max=True)
    logger.log_tabular("EpLen", average_only=True)
    logger.dump_tabular()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlexp.test_policy", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="an rlexp run directory")
    parser.add_argument(
        "--len", "-l", type=int, default=0, help="max episode length (0: the env's own limit)"
    )
    parser.add_argument("--episodes", "-n", type=int, default=100, help="number of episodes")
    parser.add_argument(
        "--norender", "-nr", action="store_true", help="do not render (the default without a display)"
    )
    parser.add_argument(
        "--itr", "-i", type=int, default=-1, help="checkpoint: epochs completed (-1: the last)"
    )
    parser.add_argument("--deterministic", "-d", action="store_true", help="mean / most likely action")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode's reset")
    args = parser.parse_args(argv)
    render = not args.norender and bool(os.environ.get("DISPLAY"))
    try:
        env, learner, epoch, to_env = load_policy_and_env(Path(args.run_dir), args.itr, render)
        print(f"Loaded the policy after epoch {epoch} of {args.run_dir}")
        run_policy(env, learner, to_env, args.len, args.episodes, args.deterministic, args.seed)
    except RLExpError as exc:
        print(f"rlexp.test_policy: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
