"""Videos: an mp4 writer and offscreen rendering (``test_policy --video``), and the episode a training
run records every ``logger.video_every`` epochs (CleanRL's ``--capture-video``).

A recording run (rank 0 only) plays one deterministic episode (the policy's mean or most likely
action, as the test episodes) after every ``video_every``-th epoch, in an env of its own made with
``render_mode="rgb_array"`` and reset from the ``video`` stream indexed by the epoch
(:mod:`rlexp.seeding`), and writes it as ``videos/epoch_000010.mp4`` (after 10 completed epochs; H.264
through imageio-ffmpeg, one frame after the reset and one after each step, at the env's frame rate),
atomically. It draws from no other stream and changes no state of the learner, so a run records the
same progress.txt with videos as without (only the time columns differ). With ``logger.wandb=true`` the
file also goes to W&B as ``video``, at the epoch's TotalEnvInteracts; with ``logger.tensorboard=true``
TensorBoard gets it as an animated GIF, ``video`` in its Images tab (:class:`Thumbnails`: at most
:data:`GIF_SIZE` pixels a side and :data:`GIF_FRAMES` frames, a long episode's frames thinned). Off (``video_every: 0``), nothing
is made and nothing is paid.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlexp.display import has_display
from rlexp.errors import RLExpError
from rlexp.fileio import atomic_output

if TYPE_CHECKING:
    from rlexp.algos.learner import Learner
    from rlexp.logger import EpochLogger
    from rlexp.schema import RLExpConfig
    from rlexp.seeding import RankSeeds

VIDEO_DIR = "videos"  # in the run directory
GIF_SIZE = 160  # TensorBoard's GIF of an episode: at most this many pixels a side ...
GIF_FRAMES = 300  # ... and at most this many frames (every 2nd, 4th, ... of a longer episode)


class VideoWriter:
    """Stream RGB frames into an H.264 mp4 through imageio-ffmpeg's bundled ffmpeg."""

    def __init__(self, path: Path, fps: float) -> None:
        self.path, self.fps = path, fps
        self.frames = 0
        self._gen: Any = None

    def add(self, frame: Any) -> None:
        """Append one frame (height x width x 3, uint8)."""
        import imageio_ffmpeg

        frame = np.ascontiguousarray(frame, dtype=np.uint8)
        if self._gen is None:
            h, w = frame.shape[:2]
            self._gen = imageio_ffmpeg.write_frames(
                str(self.path),
                (w, h),
                fps=self.fps,
                codec="libx264",
                pix_fmt_in="rgb24",
                pix_fmt_out="yuv420p",  # what every player opens
                macro_block_size=2,  # yuv420p needs even sizes; pads odd ones instead of rescaling
                output_params=["-movflags", "+faststart"],
                ffmpeg_log_level="error",
            )
            self._gen.send(None)
        self._gen.send(frame)
        self.frames += 1

    def close(self) -> None:
        """Finish the file (ffmpeg writes the index)."""
        if self._gen is not None:
            self._gen.close()
            self._gen = None


class Thumbnails:
    """An episode's frames made small for TensorBoard's GIF: each shrunk by an integer stride to at most
    :data:`GIF_SIZE` pixels a side; whenever more than ``2 * GIF_FRAMES`` are kept, every other one is
    dropped and from then on only every 2nd (4th, ...) frame is taken, so memory stays bounded and the
    GIF (at ``fps / every``) plays the whole episode at its speed."""

    def __init__(self, fps: float) -> None:
        self.fps, self.frames, self.every, self.seen = fps, [], 1, 0

    def add(self, frame: Any) -> None:
        if self.seen % self.every == 0:
            stride = -(-max(frame.shape[:2]) // GIF_SIZE)
            self.frames.append(np.array(frame[::stride, ::stride], dtype=np.uint8))
            if len(self.frames) > 2 * GIF_FRAMES:
                self.frames, self.every = self.frames[::2], 2 * self.every
        self.seen += 1

    def gif_frames(self) -> tuple[list[Any], float]:
        """At most :data:`GIF_FRAMES` frames and their rate."""
        step = -(-len(self.frames) // GIF_FRAMES)
        return self.frames[::step], self.fps / (self.every * step)


def render_frame(env: Any) -> Any:
    """``env.render()`` in rgb_array mode; a failure to render offscreen is the user's to fix."""
    import gymnasium as gym

    try:
        frame = env.render()
    except (gym.error.DependencyNotInstalled, ImportError) as exc:  # e.g. pygame for the classic envs
        name = env.spec.id if env.spec else "the env"
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RLExpError(f"{name} cannot render: {why}") from None
    except Exception as exc:
        raise RLExpError(
            f"{env.spec.id if env.spec else 'the env'} cannot render offscreen ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); for MuJoCo set MUJOCO_GL=egl or osmesa"
        ) from None
    if frame is None:
        raise RLExpError("the env returned no frame from render(); it does not support rgb_array rendering")
    return frame


def video_path(run_dir: Path, done: int) -> Path:
    """``RUN_DIR/videos/epoch_000010.mp4``: the episode recorded after ``done`` completed epochs."""
    return Path(run_dir) / VIDEO_DIR / f"epoch_{done:06d}.mp4"


def offscreen_rendering() -> None:
    """Without a display, render offscreen quietly (each unless its variable is set already): MuJoCo
    through EGL (set before mujoco is imported: it picks its OpenGL backend then), pygame's SDL (the
    classic-control envs) with its dummy video and audio drivers, which draw the same images without
    SDL's and ALSA's complaints about a missing session and sound card."""
    if not has_display():
        for variable, value in (
            ("MUJOCO_GL", "egl"),
            ("SDL_VIDEODRIVER", "dummy"),
            ("SDL_AUDIODRIVER", "dummy"),
        ):
            os.environ.setdefault(variable, value)


def check_video(cfg: RLExpConfig, env: Any) -> None:
    """Before a run with ``logger.video_every > 0`` starts: its env (``env``, as the run makes it) renders
    rgb_array frames, and one such frame can be rendered here; else one line (RLExpError)."""
    every = cfg.logger.video_every
    modes = list(env.metadata.get("render_modes") or [])
    if "rgb_array" not in modes:
        raise RLExpError(
            f"logger.video_every={every} records episodes rendered as rgb_array images, but env.id="
            f"{cfg.env.id!r} renders {', '.join(modes) or 'nothing'}; use logger.video_every=0"
        )
    from rlexp.envs import make_env

    offscreen_rendering()
    render_env = make_env(cfg.env, allow_env_import=cfg.allow_env_import, render_mode="rgb_array")
    try:
        render_env.reset(seed=0)
        frame = np.asarray(render_frame(render_env))
    finally:
        render_env.close()
    if frame.ndim != 3 or frame.shape[2] != 3:
        raise RLExpError(
            f"logger.video_every={every}: env.id={cfg.env.id!r} renders frames of shape {frame.shape}, "
            "not height x width x 3 (RGB); use logger.video_every=0"
        )


class TrainingVideo:
    """Rank 0's recordings of a run (see the module's description).

    :param cfg: the run's config (``logger.video_every``, the env, the algorithm's action mapping).
    :param run_dir: where ``videos/`` goes.
    :param learner: the policy that plays (deterministically; acting draws from no generator then).
    :param logger: its W&B writer, when there is one, gets each video.
    :param seeds: rank 0's streams: each episode resets from ``video``, indexed by the epoch.
    """

    def __init__(
        self, cfg: RLExpConfig, run_dir: Path, learner: Learner, logger: EpochLogger, seeds: RankSeeds
    ) -> None:
        from rlexp.envs import make_env

        offscreen_rendering()
        self.every, self.run_dir, self.learner, self.logger, self.seeds = (
            cfg.logger.video_every,
            run_dir,
            learner,
            logger,
            seeds,
        )
        self.env = make_env(cfg.env, allow_env_import=cfg.allow_env_import, render_mode="rgb_array")
        self.to_env = cfg.algo.env_action(self.env.action_space)
        self.fps = float(self.env.metadata.get("render_fps") or 30)
        envs = cfg.comm.procs * cfg.env.num_envs
        self.epoch_steps = cfg.algo.steps_per_epoch // envs * envs  # TotalEnvInteracts per epoch

    def after_epoch(self, done: int) -> None:
        """Record the episode of ``done`` completed epochs when ``video_every`` divides it."""
        if done % self.every == 0:
            self.record(done)

    def record(self, done: int) -> Path:
        """Play one deterministic episode (a whole game where a lost life goes on) into its mp4."""
        from rlexp.envs import CONTINUES

        env, learner = self.env, self.learner
        path = video_path(self.run_dir, done)
        small = Thumbnails(self.fps) if self.logger.tb_writer is not None else None  # TensorBoard's GIF

        def add(frame: Any) -> None:
            video.add(frame)
            if small is not None:
                small.add(frame)

        with atomic_output(path) as tmp:  # a resumed run that plays an epoch again replaces its video
            video = VideoWriter(tmp, self.fps)
            try:
                o, _ = env.reset(seed=self.seeds.indexed("video", done))
                learner.reset_state(-1)  # recurrent networks: the episode starts from a zero state
                add(render_frame(env))
                done_episode = False
                while not done_episode:
                    action = self.to_env(learner.act(learner.observe(o), deterministic=True))
                    o, _, terminated, truncated, info = env.step(action)
                    add(render_frame(env))
                    done_episode = terminated or truncated
                    if terminated and info.get(CONTINUES):  # a lost life: the game goes on
                        o, _ = env.reset()
                        learner.reset_state(-1)
                        add(render_frame(env))
                        done_episode = False
            finally:
                video.close()
        writer = self.logger.wandb_writer
        if writer is not None:
            writer.log_video(path, done * self.epoch_steps)
        if small is not None and self.logger.tb_writer is not None:
            frames, fps = small.gif_frames()
            self.logger.tb_writer.add_animation("video", frames, done * self.epoch_steps, fps)
        return path

    def close(self) -> None:
        self.env.close()
