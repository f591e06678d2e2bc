"""Videos while training (``logger.video_every``, rlexp/video.py): real rendered episodes in the run
directory that decode to frames of the env's size, the same training numbers as without them, W&B
gets them, and an env that cannot render rgb_array images is one line before anything is written."""

from __future__ import annotations

import imageio_ffmpeg
import pandas as pd
import pytest

from tests.conftest import run_cli

TIMES = ("Time", "SPS", "FracEnv", "FracAct", "FracUpdate", "FracComm")


def frames(path) -> tuple[tuple[int, int], int]:
    """(width, height) and the number of frames of an mp4, decoded by ffmpeg."""
    reader = imageio_ffmpeg.read_frames(str(path))
    meta = next(reader)
    count = sum(1 for _ in reader)
    return tuple(meta["size"]), count


def same_records(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    cols = [c for c in a.columns if c not in TIMES]
    return list(a.columns) == list(b.columns) and a[cols].equals(b[cols])


@pytest.mark.parametrize(
    "args,size",
    [
        (("algo.epochs=2", "algo.steps_per_epoch=300"), (600, 400)),  # PPO on CartPole, no test episodes
        (  # SAC on Pendulum with its test episodes: their stream is untouched
            (
                "algo=sac",
                "env=Pendulum-v1",
                "algo.epochs=2",
                "algo.steps_per_epoch=300",
                "algo.start_steps=100",
                "algo.update_after=100",
                "algo.num_test_episodes=2",
            ),
            (500, 500),
        ),
    ],
)
def test_a_run_records_rendered_episodes_and_trains_as_without_them(tmp_path, args, size):
    res = run_cli(f"hydra.run.dir={tmp_path / 'video'}", *args, "logger.video_every=2")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "XDG_RUNTIME_DIR" not in res.stderr and "ALSA" not in res.stderr  # SDL's chatter off a display
    videos = tmp_path / "video" / "videos"
    assert sorted(p.name for p in videos.iterdir()) == ["epoch_000002.mp4"]  # every 2nd epoch only
    shape, count = frames(videos / "epoch_000002.mp4")
    assert shape == size and count >= 2  # the reset's frame and one per step
    plain = run_cli(f"hydra.run.dir={tmp_path / 'plain'}", *args)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert same_records(*(pd.read_table(tmp_path / d / "progress.txt") for d in ("video", "plain")))


def test_wandb_gets_each_video(tmp_path):
    pytest.importorskip("wandb")
    from tests.test_wandb import OFFLINE, _runs

    run_dir = tmp_path / "r"
    res = run_cli(
        f"hydra.run.dir={run_dir}",
        "algo.epochs=1",
        "algo.steps_per_epoch=300",
        "logger.video_every=1",
        "logger.wandb=true",
        env=OFFLINE,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (run,) = _runs(run_dir)
    logged = [h for h in run["history"] if "video._type" in h]
    assert len(logged) == 1 and logged[0]["TotalEnvInteracts"] == 300  # the epoch's x
    assert logged[0]["video._type"] == "video-file" and logged[0]["video.path"].endswith(".mp4")


def test_an_env_without_rgb_array_rendering_is_one_line(tmp_path):
    (tmp_path / "blind_env.py").write_text(
        "import gymnasium as gym\n"
        "from gymnasium.envs.classic_control import CartPoleEnv\n"
        "class Blind(CartPoleEnv):\n"
        "    metadata = {'render_modes': ['human'], 'render_fps': 50}\n"
        "gym.register('Blind-v0', entry_point=Blind, max_episode_steps=200)\n"
    )
    run_dir = tmp_path / "r"
    args = (f"hydra.run.dir={run_dir}", "env=gym", "env.id=blind_env:Blind-v0", "logger.video_every=5")
    res = run_cli(*args, env={"PYTHONPATH": str(tmp_path)})
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "rlexp: error: logger.video_every=5 records episodes rendered as rgb_array images, but "
        "env.id='blind_env:Blind-v0' renders human; use logger.video_every=0"
    ], res.stderr[-3000:]
    assert not run_dir.exists()


def test_a_negative_video_every_is_one_line(tmp_path):
    res = run_cli(f"hydra.run.dir={tmp_path / 'r'}", "logger.video_every=-1")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "rlexp: error: logger.video_every=-1 is out of range; use 0 (no videos) or N >= 1 (every N epochs)"
    ]


def test_tensorboard_gets_each_video_as_an_animated_gif(tmp_path):
    """With logger.tensorboard=true each recorded episode also goes to the event file as the image
    ``video`` at the epoch's TotalEnvInteracts: an animated GIF TensorBoard's reader returns, at most 160
    pixels a side, playing every frame of the mp4 at the env's rate (a short episode is not thinned; the
    GIF encoder merges repeated frames into one longer one)."""
    import io
    import sys
    import types

    from PIL import Image

    run_dir = tmp_path / "r"
    res = run_cli(
        f"hydra.run.dir={run_dir}",
        "algo.epochs=2",
        "algo.steps_per_epoch=300",
        "logger.video_every=1",
        "logger.tensorboard=true",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"images": 0})
    acc.Reload()
    images = acc.Images("video")
    assert [e.step for e in images] == [300, 600]  # each epoch's TotalEnvInteracts
    for event, done in zip(images, (1, 2), strict=True):
        gif = Image.open(io.BytesIO(event.encoded_image_string))
        assert gif.format == "GIF" and gif.is_animated
        assert (event.width, event.height) == gif.size == (150, 100)  # CartPole's 600 x 400, every 4th pixel
        _, count = frames(run_dir / "videos" / f"epoch_{done:06d}.mp4")
        durations = []
        for i in range(gif.n_frames):
            gif.seek(i)
            durations.append(gif.info["duration"])
        assert sum(durations) == count * 20  # CartPole's 50 frames per second


def test_a_long_episode_is_thinned_evenly_for_tensorboard():
    """1,000 frames of 480 x 480: kept small (160 x 160) and thinned to at most 300 frames as it is played
    (never more than 600 in memory), played at the episode's speed."""
    import numpy as np

    from rlexp.video import GIF_FRAMES, Thumbnails

    small = Thumbnails(fps=50.0)
    for i in range(1000):
        small.add(np.full((480, 480, 3), i % 256, dtype=np.uint8))
        assert len(small.frames) <= 2 * GIF_FRAMES
    frames_, fps = small.gif_frames()
    assert frames_[0].shape == (160, 160, 3) and len(frames_) <= GIF_FRAMES
    kept = [int(f[0, 0, 0]) for f in frames_]
    gaps = set(np.diff(kept) % 256)
    assert len(gaps) == 1  # evenly spaced
    assert fps == pytest.approx(50.0 / gaps.pop())  # the whole episode in its own time
