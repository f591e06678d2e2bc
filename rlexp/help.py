"""``python -m rlexp [overrides] --help``: rlexp's own help.

It opens with what rlexp is and how it is called, lists every config group's options (rlexp's presets,
those of installed plugins and those on a ``hydra.searchpath`` the user added), marks the ones these
overrides choose, and shows the chosen YAML files with the comment on every key. Hydra's own help
stays available as ``--hydra-help``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

INTRO = """\
rlexp: Spinning Up's deep-RL algorithms (VPG, TRPO, PPO, DDPG, TD3, SAC), TQC, CrossQ and DQN (with
C51, QR-DQN and Rainbow) on PyTorch or TensorFlow, with MPI data parallelism, configured by Hydra.

usage: python -m rlexp [group=option ...] [key=value ...]        train one run
       python -m rlexp --multirun key=v1,v2 ...                    a grid sweep (one run per combination)
       python -m rlexp --multirun hydra/sweeper=optuna 'algo.lr=interval(1e-4,1e-2)'   a search
       python -m rlexp resume=RUN_DIR [algo.epochs=N]              continue a run
  e.g. python -m rlexp algo=td3 env=HalfCheetah-v4 comm.procs=2 seed=1
       python -m rlexp algo=sac --help                             this help, with SAC's keys
Runs land in outputs/<date>/<time>_<algo>_<env>_s<seed>_<id>/; see them with python -m rlexp.plot RUN_DIR
and python -m rlexp.test_policy RUN_DIR. Hydra's own flags (--cfg job, --info, ...): --hydra-help.
"""

# The groups a user picks from, in the order they are listed
GROUPS = (
    "algo",
    "env",
    "network",
    "backend",
    "comm",
    "tuned",
    "experiment",
    "hydra/launcher",
    "hydra/sweeper",
)
# The chosen presets shown with their comments, after the root config
SHOWN = ("algo", "env", "network", "backend", "comm")


def _search_dirs(searchpath: Sequence[str]) -> list[Path]:
    """Where YAML presets are looked up: rlexp's conf/, plugins' conf/, the user's file:// paths."""
    from rlexp.config import conf_dirs

    user = [Path(p.removeprefix("file://")) for p in searchpath if not p.startswith("pkg://")]
    return [*conf_dirs(), *user]


def _preset_text(dirs: list[Path], name: str) -> str | None:
    """The YAML file ``name`` (e.g. ``algo/td3``) from the first directory that has it, without its
    ``defaults:`` list (the schema it extends)."""
    for d in dirs:
        path = d / f"{name}.yaml"
        if path.is_file():
            text = re.sub(r"(?m)^defaults:\n(?:  - .*\n)+", "", path.read_text())
            return text.strip("\n")
    return None


def group_options(dirs: list[Path], group: str) -> list[str]:
    """The options of ``group`` in every search directory, sorted, each once."""
    return sorted({path.stem for d in dirs for path in (d / group).glob("*.yaml")})


def help_text(overrides: Sequence[str]) -> str:
    """The help for the config that ``overrides`` compose (raises RLExpError for a bad override)."""
    from rlexp.api import compose

    cfg = compose(overrides)  # checks the overrides, with the command line's messages
    choices = cfg.hydra.runtime.choices
    dirs = _search_dirs(list(cfg.hydra.searchpath))
    out = [INTRO, "Config groups (group=option; * = this config's choice):"]
    for group in GROUPS:
        listed = ", ".join(f"*{o}" if choices.get(group) == o else o for o in group_options(dirs, group))
        out.append(f"  {group:<15} {listed}")
    out.append("  env=gym env.id=ID   any other registered gymnasium id (or module:EnvId)")
    out += ["", "Keys (override any with key=value; the comments say what each does):", ""]
    root = _preset_text(dirs, "config") or ""
    out.append(root.split("\nhydra:")[0].rstrip())
    for group in SHOWN:
        text = _preset_text(dirs, f"{group}/{choices.get(group)}")
        if text is not None:
            out += ["", f"# --- {group}={choices.get(group)}: the keys {group}.* ---", text]
    return "\n".join(out) + "\n"
