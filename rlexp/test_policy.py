"""``python -m rlexp.test_policy RUN_DIR [options]`` (``rlexp-test-policy``): run a trained policy.

Spinning Up's ``test_policy`` for rlexp runs of either backend. The environment and the policy are
rebuilt from RUN_DIR/config.yaml and a checkpoint (``checkpoints/epoch_000002.pt`` or ``.npz`` after 2 epochs, or with
``--best`` the checkpoint of the best evaluation score, ``checkpoints/best.pt`` or ``.npz``), never
from pickled objects, so a custom env works whenever its id can be made. Each episode's return and length
are printed, then a summary (mean, std, max, min) in the logger's table.

``--deterministic`` acts with the policy's mean (Gaussian policies, SAC's tanh of the mean) or most
likely action (categorical policies), for every algorithm; DDPG and TD3 policies are deterministic
either way (they act without exploration noise here). Without it, stochastic policies sample: Spinning
Up's default, kept so that its commands mean what they meant. The run's own evaluations (TestEpRet,
``best.json``) and ``rlexp.load(...).policy()`` are deterministic, so the closing line says which
actions gave its mean and, for sampled ones, how to get the comparable figure.

``--video PATH.mp4`` renders every frame offscreen (no display needed; MuJoCo uses EGL unless
MUJOCO_GL says otherwise) and writes an H.264 mp4 with one frame after each reset and one after each
step, at the env's own frame rate unless ``--fps`` is given. A window is shown only without
``--video``, without ``--norender`` and when a display exists.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlexp.checkpoint import find_best_checkpoint, list_checkpoints
from rlexp.display import epochs, has_display
from rlexp.errors import RLExpError, argument_parser, report
from rlexp.fileio import atomic_output, drop_current_dir
from rlexp.video import VideoWriter, offscreen_rendering, render_frame

if TYPE_CHECKING:
    from rlexp.algos.learner import Learner

Policy = Callable[[np.ndarray], Any]


def load_learner(
    run_dir: str | os.PathLike,
    itr: int = -1,
    render_mode: str | None = None,
    allow_env_import: bool = False,
    best: bool = False,
) -> tuple[Any, Learner, Callable[[Any], Any], int]:
    """(env, learner, to_env, epoch) of a run: its env, its learner restored from a checkpoint, the map
    from the learner's action to what ``env.step`` takes, and the epoch of that checkpoint (completed
    epochs). The learner is on the CPU, whatever ``backend.device`` the run trained with.

    :param run_dir: an rlexp run directory (config.yaml + checkpoints/).
    :param itr: which checkpoint, by completed epochs; -1 takes the last one.
    :param render_mode: passed to ``gymnasium.make`` (``"human"``, ``"rgb_array"`` or None).
    :param allow_env_import: import the module of a ``module:EnvId`` env id in the run's config even
        from the current directory (that runs its code); installed packages are importable anyway.
    :param best: load the checkpoint of the best evaluation score instead (``itr`` is not used).
    """
    from rlexp.config import CONFIG_FILE, load_run_config, runs_inside
    from rlexp.envs import make_env
    from rlexp.seeding import RankSeeds
    from rlexp.worker import prepare_backend

    run_dir = Path(run_dir)
    if not (run_dir / CONFIG_FILE).is_file():
        raise RLExpError(
            f"{run_dir} is not an rlexp run directory (no {CONFIG_FILE}); give the directory of one run"
            + runs_inside(run_dir)
        )
    if best:
        path = find_best_checkpoint(run_dir)
        if path is None:
            raise RLExpError(
                f"{run_dir} has no best checkpoint (checkpoints/best.pt or .npz); it is written when the "
                "policy is evaluated (algo.test_every > 0 and algo.num_test_episodes > 0)"
            )
    else:
        ckpts = list_checkpoints(run_dir)
        if not ckpts:
            raise RLExpError(
                f"{run_dir} has no checkpoint (checkpoints/epoch_000001.pt or .npz, ...); it is written every "
                "algo.save_freq epochs and after the last one"
            )
        epoch = max(ckpts) if itr < 0 else itr
        if epoch not in ckpts:
            raise RLExpError(
                f"--itr {itr}: no checkpoint saved after {epochs(itr)}; available (epochs done): "
                f"{', '.join(map(str, ckpts))}"
            )
        path = ckpts[epoch]
    cfg = load_run_config(run_dir)
    cfg.comm.procs = 1
    # the policy plays on the CPU wherever it trained: a GPU run is watched on a laptop as well
    cfg.backend.device = "cpu"
    prepare_backend(cfg)
    env = make_env(cfg.env, allow_env_import=allow_env_import, render_mode=render_mode)
    learner: Learner = cfg.algo.learner_class(cfg.backend.name)(
        env.observation_space, env.action_space, cfg, RankSeeds(cfg.seed)
    )
    epoch = int(learner.load(path)["epoch"])
    return env, learner, cfg.algo.env_action(env.action_space), epoch


def load_policy_and_env(
    run_dir: str | os.PathLike,
    itr: int = -1,
    deterministic: bool = False,
    render_mode: str | None = None,
    allow_env_import: bool = False,
    best: bool = False,
) -> tuple[Any, Policy, int]:
    """(env, get_action, epoch) of a run, as Spinning Up's function of that name.

    :param deterministic: get_action returns the mean / most likely action instead of a sample.
    The other parameters are :func:`load_learner`'s. ``get_action`` maps one observation to the
    action ``env.step`` takes.
    """
    env, learner, to_env, epoch = load_learner(run_dir, itr, render_mode, allow_env_import, best)
    return env, policy_function(learner, to_env, deterministic), epoch


def policy_function(learner: Learner, to_env: Callable[[Any], Any], deterministic: bool) -> Policy:
    """``get_action``: one observation to the action ``env.step`` takes; ``get_action.reset()`` starts a
    new episode (a recurrent policy's zero state)."""

    def get_action(obs: np.ndarray) -> Any:
        return to_env(learner.act(learner.observe(obs), deterministic=deterministic))

    get_action.reset = lambda: learner.reset_state(-1)  # type: ignore[attr-defined]  # a new episode (memory)
    return get_action


def run_policy(
    env: Any,
    get_action: Policy,
    max_ep_len: int = 0,
    num_episodes: int = 100,
    seed: int = 0,
    video: VideoWriter | None = None,
) -> list[tuple[float, int]]:
    """Play ``num_episodes`` episodes; print each one and a summary table (EpRet, EpLen). A lost life of
    a game that goes on (:data:`rlexp.envs.CONTINUES`) does not end an episode: episodes are whole games.

    :param max_ep_len: end an episode after this many steps (0: only the env's own limit).
    :param seed: seed of the first reset (the later resets continue its random stream).
    :param video: when given, the frame after every reset and every step is added to it.
    ``get_action.reset()``, where it exists (recurrent policies), is called after every reset.
    :returns: (return, length) of each episode.
    """
    from rlexp.envs import CONTINUES
    from rlexp.logger import EpochLogger

    logger = EpochLogger(None)
    episodes = []
    reset = getattr(get_action, "reset", lambda: None)  # recurrent policies: a zero state per episode
    o, _ = env.reset(seed=seed)
    reset()
    if video is not None:
        video.add(render_frame(env))
    ep_ret, ep_len = 0.0, 0
    while len(episodes) < num_episodes:
        o, r, terminated, truncated, info = env.step(get_action(o))
        ep_ret += float(r)
        ep_len += 1
        if video is not None:
            video.add(render_frame(env))
        if terminated and info.get(CONTINUES) and not (max_ep_len > 0 and ep_len == max_ep_len):
            o, _ = env.reset()  # a lost life: the game goes on (rlexp.atari.EpisodicLife)
            reset()
            if video is not None:
                video.add(render_frame(env))
            continue
        if terminated or truncated or (max_ep_len > 0 and ep_len == max_ep_len):
            logger.store(EpRet=ep_ret, EpLen=ep_len)
            print(f"Episode {len(episodes)} \t EpRet {ep_ret:.3f} \t EpLen {ep_len}", flush=True)
            episodes.append((ep_ret, ep_len))
            ep_ret, ep_len = 0.0, 0
            if len(episodes) < num_episodes:
                o, _ = env.reset()
                reset()
                if video is not None:
                    video.add(render_frame(env))
    logger.log_tabular("EpRet", with_min_and_max=True)
    logger.log_tabular("EpLen", average_only=True)
    logger.dump_tabular()
    return episodes


def summary(episodes: list[tuple[float, int]], actions: str, best: dict[str, Any] | None = None) -> str:
    """The closing line: the mean return and which ``actions`` gave it (``deterministic``, ``sampled``,
    ``epsilon-greedy``). The run's own evaluations (the TestEpRet columns, ``best.json``) act
    deterministically while test_policy samples by default (Spinning Up's default), so any other
    figure says how to get the comparable one. ``best``: the ``best.json`` record quoted beside it."""
    mean = float(np.mean([ret for ret, _ in episodes]))
    line = f"Mean return {mean:.6g} over {len(episodes)} episode{'s' * (len(episodes) != 1)} with {actions} actions"
    quoted = "TestEpRet and best.json"
    if best is not None and isinstance(best.get("score"), (int, float)):
        n = best.get("episodes")
        quoted = f"best.json's {best['score']:.6g}" + (f" over {n} episodes" if isinstance(n, int) else "")
    if actions == "deterministic":
        return f"{line}, as the run's evaluations ({quoted})"
    return f"{line}; the run's evaluations ({quoted}) act deterministically: add --deterministic to compare"


def best_record(run_dir: Path) -> dict[str, Any] | None:
    """``checkpoints/best.json`` of ``run_dir`` as a dict, or None where it cannot be read."""
    import json

    from rlexp.checkpoint import BEST_INFO, CHECKPOINT_DIR

    try:
        record = json.loads((run_dir / CHECKPOINT_DIR / BEST_INFO).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def build_parser() -> Any:
    """The command line; Spinning Up's options keep their names and meanings."""
    parser = argument_parser(
        prog="python -m rlexp.test_policy",
        description="Run a trained policy of an rlexp run and report its episode returns.",
    )
    parser.add_argument("run_dir", help="an rlexp run directory (holding config.yaml and checkpoints/)")
    parser.add_argument(
        "--len", "-l", type=int, default=0, help="cut episodes after this many steps (0: the env's own limit)"
    )
    parser.add_argument("--episodes", "-n", type=int, default=100, help="number of episodes to play")
    parser.add_argument(
        "--norender", "-nr", action="store_true", help="no window (there is none without a display anyway)"
    )
    parser.add_argument(
        "--itr", "-i", type=int, default=-1, help="checkpoint to load, by completed epochs (-1: the last)"
    )
    parser.add_argument(
        "--best",
        action="store_true",
        help="load the checkpoint of the best evaluation score (checkpoints/best.pt; see algo.test_every)",
    )
    parser.add_argument(
        "--deterministic",
        "-d",
        action="store_true",
        help="act with the mean / most likely action instead of sampling (every algorithm)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode's reset")
    parser.add_argument(
        "--video", metavar="PATH.mp4", help="record the episodes offscreen into this mp4 file"
    )
    parser.add_argument(
        "--fps", type=float, default=None, help="frame rate of the video (default: the env's)"
    )
    parser.add_argument("--force", action="store_true", help="replace an existing video file")
    parser.add_argument(
        "--allow-env-import",
        action="store_true",
        help="import the module of a module:EnvId env id from the current directory (runs its code: "
        "only for runs you trust)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``python -m rlexp.test_policy`` and ``rlexp-test-policy``."""
    args = build_parser().parse_args(argv)
    # Nothing is imported from the current directory (a run directory may ship .py files).
    drop_current_dir()
    try:
        if args.episodes < 1:
            raise RLExpError(f"--episodes {args.episodes} is out of range; play at least 1 episode")
        if args.len < 0:
            raise RLExpError(f"--len {args.len} is out of range; use 0 (the env's limit) or more steps")
        if args.best and args.itr != -1:
            raise RLExpError(f"--best and --itr {args.itr} each choose a checkpoint; give one of them")
        if args.fps is not None and args.fps <= 0:
            raise RLExpError(f"--fps {args.fps:g} is out of range; use a frame rate > 0")
        video_path = Path(args.video) if args.video else None
        if video_path is not None:
            if video_path.suffix.lower() != ".mp4":
                raise RLExpError(f"--video {video_path}: the file must end in .mp4")
            if video_path.exists() and not args.force:
                raise RLExpError(
                    f"{video_path} already exists; pass --force to replace it, or choose another path"
                )
            offscreen_rendering()  # MuJoCo through EGL, SDL's dummy drivers, without a display
            render_mode = "rgb_array"
        else:
            render_mode = "human" if not args.norender and has_display() else None
        env, learner, to_env, epoch = load_learner(
            args.run_dir, args.itr, render_mode, args.allow_env_import, args.best
        )
        get_action = policy_function(learner, to_env, args.deterministic)
        which = "the best evaluated policy" if args.best else "the policy"
        print(f"Loaded {which}, saved after {epochs(epoch)}, of {args.run_dir}")
        actions = "deterministic" if args.deterministic else learner.algo.sampled_actions() or "deterministic"
        default = "" if args.deterministic else " (the default)"
        print(f"Using {actions} actions{default}.")
        if video_path is None:
            episodes = run_policy(env, get_action, args.len, args.episodes, args.seed)
        else:
            fps = args.fps or float(env.metadata.get("render_fps") or 30)
            with atomic_output(video_path, exclusive=not args.force) as tmp:
                video = VideoWriter(tmp, fps)
                try:
                    episodes = run_policy(env, get_action, args.len, args.episodes, args.seed, video)
                finally:
                    video.close()
            print(f"Wrote {video_path} ({video.frames} frames at {fps:g} fps)")
        print(summary(episodes, actions, best_record(Path(args.run_dir)) if args.best else None))
        env.close()
    except RLExpError as exc:
        report(exc)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
