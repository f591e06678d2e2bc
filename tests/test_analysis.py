"""plot, test_policy (with video), TensorBoard event files and provenance.json, end to end."""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rlexp.logger import EpochLogger
from rlexp.seeding import RankSeeds

from .conftest import ROOT, run_cli, train

TINY_PPO = ["algo.epochs=2", "algo.steps_per_epoch=200", "algo.train_pi_iters=2", "algo.train_v_iters=2"]


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk; fails unless the file is a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def is_figure_png(path: Path) -> bool:
    """A PNG of plot's figure at 150 dpi: 8 x 5 inches of axes, the legend below them (a row or two),
    cropped to what is drawn with a small margin."""
    width, height = png_size(path)
    return 1150 <= width <= 1250 and 750 <= height <= 950


def read_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] from the event files in ``logdir``, read by TensorBoard's own reader."""
    # TensorBoard's stub of the TF file API, so reading does not import TensorFlow into the tests.
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def episodes(stdout: str) -> list[tuple[float, int]]:
    """(EpRet, EpLen) of each 'Episode i  EpRet r  EpLen n' line test_policy printed."""
    return [(float(r), int(n)) for r, n in re.findall(r"EpRet (-?[\d.]+) \t EpLen (\d+)", stdout)]


def test_sweep_plot_table_tensorboard_and_provenance(tmp_path):
    """A real sweep (2 learning rates x 2 seeds): one curve per rate, a table from the progress files,
    TensorBoard scalars named as the columns, and a provenance record per job."""
    sweep = tmp_path / "sweep"
    res = run_cli(
        "--multirun",
        f"hydra.sweep.dir={sweep}",
        "seed=0,1",
        "algo.lr=1e-3,3e-4",
        "logger.tensorboard=true",
        *TINY_PPO,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/progress.txt"))
    assert len(runs) == 4

    res = run_cli(str(sweep), "--table", module="rlexp.plot")
    assert res.returncode == 0, res.stderr[-3000:]
    image, csv = sweep / "plot_Performance.png", sweep / "summary_Performance.csv"
    assert f"Wrote {image}" in res.stdout and f"Wrote {csv}" in res.stdout
    assert is_figure_png(image) and image.stat().st_size > 20_000
    table = pd.read_csv(csv)
    assert table["condition"].tolist() == ["algo.lr=0.0003", "algo.lr=0.001"]  # seeds aggregated
    assert table["seeds"].tolist() == [2, 2] and table["steps"].tolist() == [400, 400]
    for row in table.itertuples():
        lr = row.condition.split("=")[1]
        scores = [  # each run's score: the mean of its last 5 values, here both of its 2 epochs
            pd.read_table(r / "progress.txt")["AverageEpRet"].mean()
            for r in runs
            if f"algo.lr={lr}" in (r / "overrides.yaml").read_text()
        ]
        assert row.score_mean == pytest.approx(np.mean(scores))
        assert row.score_std == pytest.approx(np.std(scores, ddof=1))
    assert "| algo.lr=0.001 | Performance | 2 |" in res.stdout  # the markdown table

    # The same command again refuses to replace the figure; --force replaces it.
    before = image.read_bytes()
    res = run_cli(str(sweep), module="rlexp.plot")
    assert (
        res.returncode == 2 and res.stderr.count("\n") == 1 and "already exists; pass --force" in res.stderr
    )
    assert image.read_bytes() == before
    assert run_cli(str(sweep), "--force", module="rlexp.plot").returncode == 0

    run = runs[0]
    progress = pd.read_table(run / "progress.txt")
    scalars = read_scalars(run)
    assert set(scalars) == set(progress.columns) - {"Performance"}
    assert [s for s, _ in scalars["AverageEpRet"]] == [200, 400]  # x = TotalEnvInteracts
    assert [v for _, v in scalars["AverageEpRet"]] == pytest.approx(progress["AverageEpRet"].tolist())

    prov = json.loads((run / "provenance.json").read_text())
    overrides = prov["overrides"]
    seed = int(next(o for o in overrides if o.startswith("seed=")).split("=")[1])
    assert {"algo.lr=0.001", "algo.lr=0.0003"} & set(overrides) and "logger.tensorboard=True" in overrides
    assert prov["command"][1:3] == ["-m", "rlexp"] and "--multirun" in prov["command"]
    streams = RankSeeds(seed, 0).as_dict()  # one seed per random stream (issue 13, part 6)
    assert prov["seeds"] == [{"rank": 0, "seed": seed, "streams": streams}]
    host = socket.gethostname()  # where the rank ran (issue 20), added by the rank itself
    assert prov["mpi"] == {"world_size": 1, "hosts": [host]}
    assert prov["placement"] == [{"rank": 0, "host": host, "local_rank": 0, "device": "cpu"}]
    assert prov["packages"]["torch"] and prov["packages"]["gymnasium"] and prov["backend"] == "torch"
    assert prov["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert prov["machine"]["cpu_count"] >= 1 and isinstance(prov["machine"]["gpus"], list)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode == 0:
        assert prov["git"]["commit"] == head.stdout.strip() and isinstance(prov["git"]["dirty"], bool)
    else:
        assert prov["git"]["commit"] is None


def write_run(
    run_dir: Path,
    overrides: list[str],
    returns: list[float],
    time_s: float,
    config: str = "exp_name: sac_Pendulum-v1\nalgo:\n  name: sac\n",
) -> None:
    """A synthetic run directory: overrides.yaml, config.yaml (``config``) and a progress.txt with
    given returns."""
    run_dir.mkdir(parents=True)
    (run_dir / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (run_dir / "config.yaml").write_text(config)
    steps = [1000 * (i + 1) for i in range(len(returns))]
    pd.DataFrame(
        {
            "Epoch": range(1, len(returns) + 1),
            "AverageEpRet": [r - 50 for r in returns],
            "AverageTestEpRet": returns,
            "TotalEnvInteracts": steps,
            "Time": np.linspace(time_s / len(returns), time_s, len(returns)),
        }
    ).to_csv(run_dir / "progress.txt", sep="\t", index=False)


def test_table_numbers_from_synthetic_progress(tmp_path):
    """Mean, std, IQM and its bootstrap CI, steps and steps/s computed from known final values."""
    finals = {"0.001": [-100.0, -300.0, -200.0, -1000.0], "0.01": [-50.0, -60.0, -70.0, -80.0]}
    for lr, values in finals.items():
        for seed, final in enumerate(values):
            write_run(
                tmp_path / "sweep" / f"{lr}_{seed}",
                [f"algo.lr={lr}", f"seed={seed}", "algo.epochs=3"],
                [-1500.0, -800.0, final],
                time_s=10.0 * (seed + 1),
            )
    out = tmp_path / "figs" / "curve.svg"
    res = run_cli(
        str(tmp_path / "sweep"),
        "--table",
        str(tmp_path / "t.csv"),
        "-o",
        str(out),
        "--ci",
        "--last",
        "1",  # a run's score: its last value
        module="rlexp.plot",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()[:1000]
    table = pd.read_csv(tmp_path / "t.csv").set_index("condition")
    assert list(table.index) == ["algo.lr=0.001", "algo.lr=0.01"]
    for lr, values in finals.items():
        row = table.loc[f"algo.lr={lr}"]
        assert row["value"] == "Performance" and row["seeds"] == 4 and row["steps"] == 3000
        assert row["score_mean"] == pytest.approx(np.mean(values))  # AverageTestEpRet, not AverageEpRet
        assert row["score_std"] == pytest.approx(np.std(values, ddof=1))
        assert row["score_iqm"] == pytest.approx(stats.trim_mean(values, 0.25))
        assert row["iqm_ci_low"] <= row["score_iqm"] <= row["iqm_ci_high"]
        assert min(values) <= row["iqm_ci_low"] and row["iqm_ci_high"] <= max(values)
        assert row["wall_time_s"] == pytest.approx(25.0)  # mean of 10, 20, 30, 40
        assert row["steps_per_s"] == pytest.approx(np.mean([3000 / t for t in (10, 20, 30, 40)]))
    assert row["iqm_ci_low"] < row["iqm_ci_high"]
    # The IQM of [-100, -300, -200, -1000] drops the outlier: the mean of -200 and -300.
    assert table.loc["algo.lr=0.001", "score_iqm"] == pytest.approx(-250.0)

    res = run_cli(str(tmp_path / "sweep"), "--select", "lr=0.01", "-y", "AverageEpRet", module="rlexp.plot")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("[sac_Pendulum-v1]") == 4  # one condition left: named by exp_name
    assert is_figure_png(tmp_path / "sweep" / "plot_AverageEpRet.png")


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["{tmp}/empty"], "no runs (directories holding a progress.txt) found under: {tmp}/empty"),
        (["{sweep}", "-y", "Nope"], "column 'Nope' is not in"),
        (["{sweep}", "-o", "{tmp}/x.gif"], "unknown image type '.gif'; use one of: .png, .svg, .pdf"),
        (["{sweep}", "--select", "zzz"], "no run matches --select zzz (of 1 runs found)"),
        (["{sweep}", "--exclude", "sweep"], "no run matches --exclude sweep (of 1 runs found)"),
        (["{sweep}", "--smooth", "0"], "--smooth 0 is out of range"),
        (["{sweep}", "--est", "mode"], "argument --est: invalid choice: 'mode'"),
    ],
    ids=["no-runs", "unknown-column", "image-type", "select", "exclude", "smooth", "bad-option"],
)
def test_plot_bad_input_is_one_line(tmp_path, args, fragment):
    write_run(tmp_path / "sweep" / "a", ["seed=0"], [1.0, 2.0], 1.0)
    (tmp_path / "empty").mkdir()
    subst = {"{tmp}": str(tmp_path), "{sweep}": str(tmp_path / "sweep")}
    for old, new in subst.items():
        args = [a.replace(old, new) for a in args]
        fragment = fragment.replace(old, new)
    res = run_cli(*args, module="rlexp.plot")
    assert res.returncode == 2, res.stdout
    assert res.stderr.startswith("rlexp: error: ") and res.stderr.count("\n") == 1, res.stderr
    assert fragment in res.stderr and "Traceback" not in res.stderr


def drawn(*argv: str) -> tuple[Any, Any, list[str]]:
    """The figure rlexp.plot draws for ``argv`` (its first value), its legend (wherever it is) and
    the legend's entries (lines joined)."""
    import matplotlib

    matplotlib.use("Agg")
    from rlexp import plot

    args = plot.build_parser().parse_args(list(argv))
    runs = [r for r in (plot.read_run(p, i) for p, i in plot.find_runs(args.logdir)) if r is not None]
    labels, title = plot.label_conditions(runs, args.legend)
    fig = plot.draw(runs, labels, title, args.value[0], args)
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    assert len(legends) == 1
    return fig, legends[0], [t.get_text().replace("\n", " ") for t in legends[0].get_texts()]


def sac_config(exp_name: str, epochs: int, **extra: object) -> str:
    """A config.yaml as rlexp writes it (the parts plot reads): SAC on Pendulum-v1, lr 1e-3 (its default)."""
    lines = [f"exp_name: {exp_name}", "algo:", "  name: sac", "  lr: 0.001", f"  epochs: {epochs}"]
    lines += [f"  {k}: {v}" for k, v in extra.items()]
    return "\n".join([*lines, "env:", "  id: Pendulum-v1", "  max_ep_len: null", ""])


def test_plot_labels_name_only_what_differs_between_commands(tmp_path):
    """Runs from two different commands: a key set to the value the other run has anyway (algo.lr=1e-3
    is SAC's default, env=gym env.id=Pendulum-v1 is env=Pendulum-v1) is not a difference."""
    import matplotlib.pyplot as plt

    write_run(
        tmp_path / "a",
        ["algo=sac", "algo.lr=1e-3", "algo.epochs=2", "env=gym", "env.id=Pendulum-v1"],
        [1.0, 2.0],
        1.0,
        sac_config("sac_Pendulum-v1", 2),
    )
    write_run(
        tmp_path / "b",
        ["algo=sac", "env=Pendulum-v1", "algo.epochs=3", "seed=1"],
        [1.0, 2.0, 3.0],
        1.0,
        sac_config("sac_Pendulum-v1", 3),
    )
    fig, legend, entries = drawn(str(tmp_path / "a"), str(tmp_path / "b"))
    assert entries == ["2", "3"] and legend.get_title().get_text() == "algo.epochs"
    plt.close(fig)


def test_plot_legend_keeps_the_order_given(tmp_path):
    """-l names the LOGDIRs' conditions in the order given, in the legend and in the table."""
    import matplotlib.pyplot as plt

    for name in ("a", "b", "c"):
        write_run(tmp_path / name, [f"seed={ord(name)}"], [1.0, 2.0], 1.0)
    dirs = [str(tmp_path / n) for n in ("a", "b", "c")]
    fig, _, entries = drawn(*dirs, "-l", "zeta", "alpha", "10 runs")
    assert entries == ["zeta", "alpha", "10 runs"]
    plt.close(fig)
    res = run_cli(
        *dirs, "-l", "zeta", "alpha", "10 runs", "--table", str(tmp_path / "t.csv"), module="rlexp.plot"
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert pd.read_csv(tmp_path / "t.csv")["condition"].tolist() == ["zeta", "alpha", "10 runs"]


def test_plot_marks_points_so_a_one_epoch_run_shows(tmp_path):
    import matplotlib.pyplot as plt

    write_run(tmp_path / "long", ["algo.epochs=3"], [1.0, 2.0, 3.0], 1.0)
    write_run(tmp_path / "one", ["algo.epochs=1"], [5.0], 1.0)
    fig, _, entries = drawn(str(tmp_path / "long"), str(tmp_path / "one"))
    assert entries == ["1", "3"]
    single = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) == 1]
    assert len(single) == 1 and single[0].get_xdata()[0] == 1000
    assert single[0].get_marker() not in ("", " ", "None", None) and single[0].get_markersize() >= 3
    plt.close(fig)


def test_plot_smooths_the_evaluated_epochs_of_a_run_that_tests_every_other_epoch(tmp_path):
    """algo.test_every=2 leaves AverageTestEpRet (Performance) empty on odd epochs: those rows are left
    out, and the smoothing averages the evaluated points only (no NaN spreading over the line)."""
    import matplotlib.pyplot as plt

    write_run(tmp_path / "run", ["algo.test_every=2"], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1.0)
    progress = pd.read_table(tmp_path / "run" / "progress.txt")
    progress.loc[progress["Epoch"] % 2 == 1, "AverageTestEpRet"] = np.nan  # epochs 2, 4, 6 evaluated
    progress.to_csv(tmp_path / "run" / "progress.txt", sep="\t", index=False)
    fig, _, _ = drawn(str(tmp_path / "run"), "-s", "3")
    (line,) = [ln for ln in fig.axes[0].get_lines() if len(ln.get_xdata()) > 1]
    assert list(line.get_xdata()) == [2000, 4000, 6000]
    # the points 2, 4, 6 smoothed over 3: (2 + 4) / 2, (2 + 4 + 6) / 3, (4 + 6) / 2
    np.testing.assert_allclose(line.get_ydata(), [3.0, 4.0, 5.0])
    plt.close(fig)


def test_plot_long_labels_keep_the_legend_off_the_axes_and_the_title_whole(tmp_path):
    """Three runs that differ in six keys, with long experiment names: the legend sits outside the
    axes (off the data, the ticks and the axis labels), and it and the title lie inside the figure."""
    import matplotlib.pyplot as plt

    for i in range(3):
        name = f"a_rather_long_experiment_name_number_{i}"
        extra = {"batch_size": 100 * (i + 1), "update_after": 1000 * i, "polyak": 0.9 + i / 100}
        overrides = [f"exp_name={name}", f"algo.epochs={i + 1}", *(f"algo.{k}={v}" for k, v in extra.items())]
        overrides.append(f"algo.start_steps={10000 + i}")
        extra["start_steps"] = 10000 + i
        write_run(tmp_path / str(i), overrides, [1.0] * (i + 1), 1.0, sac_config(name, i + 1, **extra))
    fig, legend, entries = drawn(*(str(tmp_path / str(i)) for i in range(3)))
    assert entries[0] == (
        "exp_name=a_rather_long_experiment_name_number_0, algo.epochs=1, algo.batch_size=100, "
        "algo.update_after=0, algo.polyak=0.9, algo.start_steps=10000"
    )
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    legend = legend.get_window_extent(renderer)
    axes = ax.get_tightbbox(renderer)  # the axes with its ticks, axis labels and title
    figure = fig.bbox
    assert not legend.overlaps(axes), (legend, axes)
    for box in (legend, ax.title.get_window_extent(renderer)):
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1 and figure.y0 <= box.y0 and box.y1 <= figure.y1
    plt.close(fig)


# Issue 72: a sweep over envs, one panel per task. Returns of each (algo, env), the same for both seeds.
TASK_RETURNS = {
    ("dqn", "CartPole-v1"): [100.0, 200.0, 300.0],
    ("ppo", "CartPole-v1"): [10.0, 20.0, 30.0],
    ("dqn", "Acrobot-v1"): [-200.0, -100.0, -50.0],
    ("ppo", "Acrobot-v1"): [-500.0, -400.0, -300.0],
}


def write_task_runs(root: Path, algos: tuple[str, ...] = ("dqn", "ppo")) -> None:
    """Runs of ``algos`` on CartPole-v1 and Acrobot-v1, two seeds each, as a sweep over both writes them
    (exp_name as rlexp's default, ``<algo>_<env>``)."""
    for (algo, env), returns in TASK_RETURNS.items():
        if algo not in algos:
            continue
        config = f"exp_name: {algo}_{env}\nalgo:\n  name: {algo}\nenv:\n  id: {env}\n  wrappers: []\n"
        for seed in (0, 1):
            overrides = (
                [f"algo={algo}", f"env={env}", f"seed={seed}"]
                if len(algos) > 1
                else [f"env={env}", f"seed={seed}"]
            )
            write_run(root / f"{algo}_{env}_{seed}", overrides, returns, 1.0, config)


def panelled(*argv: str) -> tuple[Any, list[str], list[str], str]:
    """The figure rlexp.plot draws for ``argv`` (its first value), each run's condition, and the entries
    and title of the one legend (below the panels, none inside them)."""
    import matplotlib

    matplotlib.use("Agg")
    from rlexp import plot

    args = plot.build_parser().parse_args(list(argv))
    runs = [r for r in (plot.read_run(p, i) for p, i in plot.find_runs(args.logdir)) if r is not None]
    runs = plot.select_runs(runs, args.select, args.exclude)
    labels, title, tasks = plot.group_runs(runs, args)
    fig = plot.draw(runs, labels, title, args.value[0], args, tasks)
    assert not [ax for ax in fig.axes if ax.get_legend() is not None] and len(fig.legends) == 1
    legend = fig.legends[0]
    return fig, labels, [t.get_text() for t in legend.get_texts()], legend.get_title().get_text()


def is_panel_png(path: Path) -> bool:
    """A PNG of plot's figure of two panels side by side at 150 dpi, the legend below them."""
    width, height = png_size(path)
    return 1400 <= width <= 1600 and 550 <= height <= 800


def data_lines(ax: Any) -> list[Any]:
    """The lines of ``ax`` that draw data (seaborn also adds empty ones for its legend)."""
    return [line for line in ax.get_lines() if len(line.get_xdata()) > 0]


def test_plot_of_runs_on_two_envs_has_one_panel_per_task_and_a_condition_one_colour(tmp_path):
    """Issue 72: two algos on two envs: one panel per task, titled by it, with its own y scale; the env
    does not split conditions (algo=ppo is one condition, drawn in both panels in one colour); one
    legend below the panels. --no-panels draws everything on one axes as before, the env in the labels."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    write_task_runs(tmp_path / "sweep")
    fig, labels, entries, title = panelled(str(tmp_path / "sweep"))
    assert sorted(set(labels)) == ["algo=dqn", "algo=ppo"] and entries == ["dqn", "ppo"] and title == "algo"
    panels = [ax for ax in fig.axes if data_lines(ax)]
    assert len(fig.axes) == len(panels) == 2
    assert [ax.get_title() for ax in panels] == ["Acrobot-v1", "CartPole-v1"]
    colour: dict[tuple[str, str], str] = {}
    for ax in panels:
        lines = data_lines(ax)
        assert len(lines) == 2, [line.get_ydata() for line in lines]
        for line in lines:  # which condition: the returns it draws (both seeds alike: the mean is them)
            (algo,) = [
                a
                for (a, env), r in TASK_RETURNS.items()
                if env == ax.get_title() and list(line.get_ydata()) == r
            ]
            colour[algo, ax.get_title()] = mcolors.to_hex(line.get_color())
        low, high = ax.get_ylim()  # its own scale: CartPole's 10 to 300 without Acrobot's -500 to -50
        assert (low > -50) if ax.get_title() == "CartPole-v1" else (high < 10), (ax.get_title(), low, high)
    assert colour["dqn", "Acrobot-v1"] == colour["dqn", "CartPole-v1"] != colour["ppo", "CartPole-v1"]
    assert colour["ppo", "Acrobot-v1"] == colour["ppo", "CartPole-v1"]
    handles = {
        t.get_text(): mcolors.to_hex(h.get_color())
        for t, h in zip(fig.legends[0].get_texts(), fig.legends[0].legend_handles, strict=True)
    }
    assert handles == {"dqn": colour["dqn", "CartPole-v1"], "ppo": colour["ppo", "CartPole-v1"]}
    plt.close(fig)

    fig, labels, entries, _ = panelled(str(tmp_path / "sweep"), "--no-panels")
    assert len(fig.axes) == 1 and len(data_lines(fig.axes[0])) == 4
    assert entries == [f"algo={a}, env={e}" for a in ("dqn", "ppo") for e in ("Acrobot-v1", "CartPole-v1")]
    plt.close(fig)

    fig, _, entries, _ = panelled(str(tmp_path / "sweep"), "--select", "CartPole", "--count")  # one task
    assert len(fig.axes) == 1 and fig.axes[0].get_title() == "dqn_CartPole-v1, ppo_CartPole-v1"
    assert entries == ["dqn-0", "dqn-1", "ppo-2", "ppo-3"] and len(data_lines(fig.axes[0])) == 4
    plt.close(fig)


def test_plot_panels_wrap_and_one_algo_on_several_envs_is_one_condition(tmp_path):
    """One algo swept over envs: its runs' default exp_names (ppo_CartPole-v1, ppo_Acrobot-v1) name one
    condition, ppo, in every panel; --count gives each run its colour; four tasks wrap onto two rows of
    three panels."""
    import matplotlib.pyplot as plt

    write_task_runs(tmp_path / "sweep", algos=("ppo",))
    fig, labels, entries, _ = panelled(str(tmp_path / "sweep"))
    assert set(labels) == {"ppo"} and entries == ["ppo"]
    panels = [ax for ax in fig.axes if data_lines(ax)]
    assert len(panels) == 2 and all(len(data_lines(ax)) == 1 for ax in panels)
    assert data_lines(panels[0])[0].get_color() == data_lines(panels[1])[0].get_color()
    plt.close(fig)
    fig, _, entries, _ = panelled(str(tmp_path / "sweep"), "--count")
    assert len(entries) == 4 and [len(data_lines(ax)) for ax in fig.axes] == [2, 2]
    plt.close(fig)

    for env in ("Pendulum-v1", "MountainCar-v0"):
        config = f"exp_name: ppo_{env}\nalgo:\n  name: ppo\nenv:\n  id: {env}\n  wrappers: []\n"
        write_run(tmp_path / "sweep" / env, [f"env={env}", "seed=0"], [1.0, 2.0], 1.0, config)
    fig, _, _, _ = panelled(str(tmp_path / "sweep"))
    titles = ["Acrobot-v1", "CartPole-v1", "MountainCar-v0", "Pendulum-v1"]
    assert [ax.get_title() for ax in fig.axes] == titles
    rows = [ax.get_subplotspec().rowspan.start for ax in fig.axes]
    columns = [ax.get_subplotspec().colspan.start for ax in fig.axes]
    assert rows == [0, 0, 0, 1] and columns == [0, 1, 2, 0]
    plt.close(fig)


def test_plot_table_of_runs_on_two_envs_has_a_row_per_task_and_condition(tmp_path):
    """--table with several tasks: a task column, one row per task and condition (per --value); the
    figure of each value is written. One task: the table as before, no task column."""
    write_task_runs(tmp_path / "sweep")
    res = run_cli(
        str(tmp_path / "sweep"), "-y", "Performance", "AverageEpRet", "--table", str(tmp_path / "t.csv"),
        "-o", str(tmp_path / "p.png"), "--last", "1", module="rlexp.plot",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert is_panel_png(tmp_path / "p_Performance.png") and is_panel_png(tmp_path / "p_AverageEpRet.png")
    for value, offset in (("Performance", 0.0), ("AverageEpRet", -50.0)):
        table = pd.read_csv(tmp_path / f"t_{value}.csv")
        assert list(table.columns[:3]) == ["task", "condition", "value"]
        pairs = list(zip(table["task"], table["condition"], strict=True))
        assert pairs == [(t, f"algo={a}") for t in ("Acrobot-v1", "CartPole-v1") for a in ("dqn", "ppo")]
        for task, cond, score, seeds in zip(
            table["task"], table["condition"], table["score_mean"], table["seeds"], strict=True
        ):
            assert seeds == 2 and score == pytest.approx(TASK_RETURNS[cond[5:], task][-1] + offset)
    assert "| task | condition | value |" in res.stdout

    res = run_cli(
        str(tmp_path / "sweep"), "--select", "Acrobot", "--table", str(tmp_path / "one.csv"),
        "-o", str(tmp_path / "one.png"), module="rlexp.plot",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert is_figure_png(tmp_path / "one.png")
    assert pd.read_csv(tmp_path / "one.csv")["condition"].tolist() == ["algo=dqn", "algo=ppo"]
    assert "task" not in pd.read_csv(tmp_path / "one.csv").columns


ISOLATED_TEST_POLICY = """
import sys
from rlexp.test_policy import main
main(sys.argv[1:])
print("imported:", sorted({"torch", "tensorflow"} & set(sys.modules)))
"""


def play(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """test_policy in a fresh interpreter that also reports which backends it imported."""
    return subprocess.run(
        [sys.executable, "-c", ISOLATED_TEST_POLICY, str(run_dir), "-nr", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MUJOCO_GL": "egl"},
    )


def test_torch_policy_deterministic_and_video(tmp_path):
    """A fresh torch PPO run on HalfCheetah-v4, resumed once: -d differs from sampling and repeats
    exactly; --video writes an mp4 with one frame per reset and per step; only torch is imported."""
    run_dir = tmp_path / "run"
    train(run_dir, "env=HalfCheetah-v4", "algo.epochs=1", *TINY_PPO[1:])
    res = run_cli(f"resume={run_dir}", "algo.epochs=2")  # continued: a second provenance record
    assert res.returncode == 0, res.stderr[-2000:]
    first = json.loads((run_dir / "provenance.json").read_text())
    again = json.loads((run_dir / "provenance.resume1.json").read_text())
    assert "resumed_after_epoch" not in first and again["resumed_after_epoch"] == 1
    assert f"resume={run_dir}" in again["command"] and again["seeds"] == first["seeds"]

    det = play(run_dir, "-n", "2", "-l", "15", "-d")
    assert det.returncode == 0, det.stderr[-2000:]
    assert f"Loaded the policy, saved after 2 epochs, of {run_dir}" in det.stdout
    assert "Using deterministic actions." in det.stdout and "imported: ['torch']" in det.stdout
    assert "AverageEpRet" in det.stdout and "MinEpRet" in det.stdout and "StdEpRet" in det.stdout
    det_eps = episodes(det.stdout)
    assert [n for _, n in det_eps] == [15, 15]
    sampled = play(run_dir, "-n", "2", "-l", "15")
    assert sampled.returncode == 0, sampled.stderr[-2000:]
    assert episodes(sampled.stdout) != det_eps  # the flag changes the actions

    video = tmp_path / "videos" / "cheetah.mp4"
    res = play(run_dir, "-n", "2", "-l", "15", "-d", "--video", str(video))
    assert res.returncode == 0, res.stderr[-2000:]
    assert episodes(res.stdout) == det_eps  # -d repeats exactly, video or not
    expected = sum(n + 1 for _, n in episodes(res.stdout))  # frame after each reset and each step
    assert expected == 32 and f"Wrote {video} ({expected} frames at 20 fps)" in res.stdout
    import imageio_ffmpeg

    assert video.read_bytes()[4:8] == b"ftyp"  # an ISO media (mp4) file
    frames, seconds = imageio_ffmpeg.count_frames_and_secs(str(video))
    assert frames == expected and seconds == pytest.approx(expected / 20, abs=0.1)
    reader = imageio_ffmpeg.read_frames(str(video))
    meta = next(reader)
    assert meta["size"] == (480, 480)
    first = np.frombuffer(next(reader), np.uint8)
    assert first.std() > 5  # a rendered scene, not a blank frame
    reader.close()
    res = play(run_dir, "-n", "1", "--video", str(video))
    assert res.returncode == 2 and "already exists; pass --force" in res.stderr
    assert imageio_ffmpeg.count_frames_and_secs(str(video))[0] == expected  # untouched
    assert not list(video.parent.glob(".*tmp*"))


def test_tf_policy_deterministic_without_torch(tmp_path):
    """A fresh TF SAC run: -d (tanh of the mean) repeats exactly and differs from sampling; no torch."""
    run_dir = tmp_path / "run"
    train(
        run_dir,
        "backend=tf",
        "algo=sac",
        "env=Pendulum-v1",
        "algo.epochs=1",
        "algo.steps_per_epoch=200",
        "algo.start_steps=100",
        "algo.update_after=100",
        "algo.num_test_episodes=0",
        "network.hidden_sizes=[32]",
    )
    det = play(run_dir, "-n", "2", "-l", "20", "-d")
    assert det.returncode == 0, det.stderr[-2000:]
    assert "imported: ['tensorflow']" in det.stdout
    det_eps = episodes(det.stdout)
    assert [n for _, n in det_eps] == [20, 20]
    sampled = play(run_dir, "-n", "2", "-l", "20")
    assert sampled.returncode == 0 and "imported: ['tensorflow']" in sampled.stdout
    assert episodes(sampled.stdout) != det_eps
    assert episodes(play(run_dir, "-n", "2", "-l", "20", "-d").stdout) == det_eps


def test_test_policy_bad_input_is_one_line(tmp_path):
    no_ckpt = tmp_path / "no_ckpt"
    no_ckpt.mkdir()
    (no_ckpt / "config.yaml").write_text("seed: 0\n")
    sweep = tmp_path / "sweep"
    (sweep / "0_seed=0").mkdir(parents=True)
    (sweep / "0_seed=0" / "config.yaml").write_text("seed: 0\n")
    for args, fragment in [
        ([str(tmp_path / "missing")], "is not an rlexp run directory (no config.yaml)"),
        ([str(sweep)], f"give the directory of one run; it holds 1 run, e.g. {sweep / '0_seed=0'}"),
        ([str(no_ckpt)], f"{no_ckpt} has no checkpoint"),
        ([str(no_ckpt), "--video", str(tmp_path / "v.avi")], "the file must end in .mp4"),
        ([str(no_ckpt), "-n", "0"], "--episodes 0 is out of range"),
        ([str(no_ckpt), "--bogus"], "unrecognized arguments: --bogus"),
        ([str(no_ckpt), "--best"], f"{no_ckpt} has no best checkpoint (checkpoints/best.pt or .npz)"),
        ([str(no_ckpt), "--best", "--itr", "2"], "--best and --itr 2 each choose a checkpoint"),
    ]:
        res = run_cli(*args, module="rlexp.test_policy")
        assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
        assert res.stderr.startswith("rlexp: error: ") and fragment in res.stderr, res.stderr


def test_a_video_of_an_env_whose_renderer_is_not_installed_is_one_line(tmp_path):
    """CartPole renders with pygame: without it (an import that fails, as when it is not installed),
    --video says which package to install in one line, and writes no file."""
    run_dir = tmp_path / "run"
    train(run_dir, "env=CartPole-v1", "algo.epochs=1", "algo.steps_per_epoch=200", "algo.train_v_iters=1")
    fake = tmp_path / "site" / "pygame"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named pygame", name="pygame")\n')
    video = tmp_path / "v.mp4"
    res = run_cli(str(run_dir), "-n", "1", "--video", str(video), module="rlexp.test_policy",
                  env={"PYTHONPATH": str(tmp_path / "site")})  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().splitlines() == [
        'rlexp: error: CartPole-v1 cannot render: pygame is not installed, run `pip install "gymnasium[classic-control]"`'
    ]
    assert not video.exists() and not list(tmp_path.glob("*.mp4*"))


def test_logger_writes_tensorboard_scalars_without_a_backend(tmp_path):
    """Rows become scalars with the columns' names at x = TotalEnvInteracts; neither backend is imported."""
    script = (
        "import sys\n"
        "from rlexp.logger import EpochLogger\n"
        f"log = EpochLogger({str(tmp_path)!r}, tensorboard=True, console=False)\n"
        "for epoch in range(3):\n"
        "    log.store(EpRet=[epoch, epoch + 2.0])\n"
        "    log.log_tabular('Epoch', epoch)\n"
        "    log.log_tabular('EpRet', with_min_and_max=True)\n"
        "    log.log_tabular('TotalEnvInteracts', 100 * (epoch + 1))\n"
        "    log.dump_tabular()\n"
        "log.close()\n"
        "assert not {'torch', 'tensorflow'} & set(sys.modules), sys.modules.keys()\n"
    )
    res = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    scalars = read_scalars(tmp_path)
    assert set(scalars) == {"Epoch", "AverageEpRet", "StdEpRet", "MaxEpRet", "MinEpRet", "TotalEnvInteracts"}
    assert scalars["AverageEpRet"] == [(100, 1.0), (200, 2.0), (300, 3.0)]
    assert scalars["MaxEpRet"] == [(100, 2.0), (200, 3.0), (300, 4.0)]


def test_tensorboard_is_off_by_default(tmp_path):
    log = EpochLogger(tmp_path, console=False)
    log.log_tabular("Epoch", 0)
    log.dump_tabular()
    log.close()
    assert not list(tmp_path.glob("events.out.tfevents.*"))


def test_provenance_lists_every_rank_seed():
    from rlexp.provenance import collect
    from rlexp.seeding import STREAMS, RankSeeds

    from .conftest import composed

    record = collect(composed("algo=sac", "env=Pendulum-v1", "comm.procs=3", "seed=7"), ["seed=7"], ["x"])
    assert [s["rank"] for s in record["seeds"]] == [0, 1, 2]
    for rank, seeds in enumerate(record["seeds"]):  # every stream of every rank (rlexp/seeding.py)
        assert seeds == {"rank": rank, "seed": 7, "streams": {k: RankSeeds(7, rank)[k] for k in STREAMS}}
    all_streams = [v for s in record["seeds"] for v in s["streams"].values()]
    assert len(set(all_streams)) == 3 * len(STREAMS)  # no two streams share a seed
    assert (
        record["mpi"] == {"world_size": 3}
        and record["command"] == ["x"]
        and record["overrides"] == ["seed=7"]
    )
    json.dumps(record)  # plain JSON


def test_resumed_log_replaces_the_tensorboard_values_it_logs_again(tmp_path):
    def rows(log: EpochLogger, epochs: range, offset: float) -> None:
        for epoch in epochs:
            log.log_tabular("Epoch", epoch)
            log.log_tabular("TotalEnvInteracts", 100 * (epoch + 1))
            log.log_tabular("Loss", epoch + offset)
            log.dump_tabular()
        log.close()

    rows(EpochLogger(tmp_path, tensorboard=True, console=False), range(3), 0.0)  # 3 epochs logged ...
    # ... but the checkpoint holds 2: the resumed run logs epoch 2 again, with another value.
    rows(EpochLogger(tmp_path, resume_rows=2, tensorboard=True, console=False), range(2, 4), 0.5)
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert read_scalars(tmp_path)["Loss"] == [(100, 0.0), (200, 1.0), (300, 2.5), (400, 3.5)]
    assert pd.read_table(tmp_path / "progress.txt")["Loss"].tolist() == [0.0, 1.0, 2.5, 3.5]
