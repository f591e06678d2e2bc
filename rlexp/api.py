"""The Python API: train, open and use runs from a script or a notebook.

    import rlexp
    run = rlexp.train(["algo=ppo", "env=CartPole-v1", "algo.epochs=5"])
    run.progress            # progress.txt as a pandas DataFrame
    run.score               # the run's score (the ``score:`` keys)
    act = run.policy()      # deterministic by default
    act(obs)                # -> the action env.step takes
    rlexp.load(run.dir)     # the same run, opened again later

:func:`train` composes exactly the config ``python -m rlexp OVERRIDES`` would (same YAML presets, same
checks) and runs the same job: in this process with ``comm.procs=1``, under mpiexec otherwise. A user
error raises :class:`rlexp.RLExpError` whose message is the command line's one line. Nothing of Hydra's
global state is left behind, ``sys.argv`` is not read, and two trainings in a row each get a new run
directory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlexp.errors import RLExpError

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig

    from rlexp.algos.learner import Learner
    from rlexp.schema import RLExpConfig


@dataclass
class Policy:
    """A trained policy restored from a checkpoint: ``policy(obs)`` is the action ``env.step`` takes.

    :ivar env: an env made from the run's config (same id and kwargs), to run episodes with.
    :ivar epoch: the epoch after which the checkpoint was saved.
    :ivar deterministic: the default of :meth:`__call__`: the mean or most likely action (True) or a
        sample from the policy (False; DDPG and TD3 act without exploration noise either way).
    """

    env: Any
    epoch: int
    deterministic: bool
    _learner: Learner
    _to_env: Any

    def __call__(self, obs: Any, deterministic: bool | None = None) -> Any:
        """The action for one observation; ``deterministic`` overrides the policy's default. A recurrent
        policy (``network.recurrent``) remembers the observations since its last :meth:`reset`."""
        det = self.deterministic if deterministic is None else deterministic
        return self._to_env(self._learner.act(self._learner.observe(np.asarray(obs)), deterministic=det))

    def reset(self) -> None:
        """Start a new episode: a recurrent policy's memory back to zero (call it after each
        ``env.reset()``); nothing for a feed-forward policy."""
        self._learner.reset_state(-1)


@dataclass
class Run:
    """One run directory: its resolved config, its progress, its score and its policy."""

    dir: Path
    config: RLExpConfig

    @property
    def progress(self) -> pd.DataFrame:
        """progress.txt as it stands now (one row per epoch); empty before the first epoch."""
        import pandas as pd

        path = self.dir / "progress.txt"
        return pd.read_table(path) if path.is_file() else pd.DataFrame()

    @property
    def epochs_done(self) -> int:
        """The epoch of the newest checkpoint (0 before the first)."""
        from rlexp.checkpoint import latest_checkpoint

        latest = latest_checkpoint(self.dir)
        return latest[0] if latest else 0

    @property
    def finished(self) -> bool:
        """Whether the run is over: it trained all its ``algo.epochs``, or it ended early as finished
        when its score reached ``algo.stop_at_return`` (its last checkpoint says so; nothing continues it)."""
        from rlexp.checkpoint import finished_reason, latest_checkpoint

        latest = latest_checkpoint(self.dir)
        if latest is None:
            return False
        return latest[0] >= self.config.algo.epochs or finished_reason(latest[1]) is not None

    @property
    def score(self) -> float | None:
        """The run's score (:mod:`rlexp.score`; None before the first epoch)."""
        from rlexp.score import run_score

        return run_score(self.dir, self.config.score)

    def policy(
        self, epoch: int = -1, deterministic: bool = True, best: bool = False, allow_env_import: bool = False
    ) -> Policy:
        """The policy of the checkpoint after ``epoch`` (-1: the newest), or with ``best`` the one of
        the best evaluation score (``checkpoints/best.pt``, kept when ``algo.test_every > 0``).

        ``allow_env_import``: import a ``module:EnvId`` env's module even from the current directory.
        """
        from rlexp.test_policy import load_learner

        env, learner, to_env, at = load_learner(self.dir, epoch, allow_env_import=allow_env_import, best=best)
        return Policy(env=env, epoch=at, deterministic=deterministic, _learner=learner, _to_env=to_env)

    def __repr__(self) -> str:
        cfg = self.config
        return (
            f"Run({str(self.dir)!r}, {cfg.algo.name} on {cfg.env.id}, seed {cfg.seed}, "
            f"{self.epochs_done}/{cfg.algo.epochs} epochs, score {self.score})"
        )


def load(run_dir: str | os.PathLike) -> Run:
    """Open the run in ``run_dir`` (finished or not); raises :class:`RLExpError` if it is not one."""
    from rlexp.config import load_run_config

    run_dir = Path(run_dir)
    return Run(dir=run_dir, config=load_run_config(run_dir))


@contextlib.contextmanager
def _fresh_hydra() -> Iterator[None]:
    """Hydra initialised on rlexp's configs for the block, and its global state as it was afterwards
    (also inside a Hydra app of the user's)."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    from rlexp.config import CONF_DIR

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="rlexp"):
            yield
    finally:
        restore_gh_from_backup(backup)


# What a sweep is from Python (a user who tries --multirun or key=a,b there is told so)
SWEEP_FROM_PYTHON = (
    "a sweep from Python is a loop of rlexp.train calls, one per value (for seed in (0, 1, 2): "
    "rlexp.train([..., f'seed={seed}'])), or python -m rlexp --multirun on the command line"
)


def compose(overrides: Sequence[str] = ()) -> DictConfig:
    """The config ``python -m rlexp OVERRIDES`` would run, with its ``hydra`` node (for the run
    directory). Raises :class:`RLExpError` with the command line's one line for a user error."""
    from hydra import compose as hydra_compose

    from rlexp.config import normalize_overrides, register_configs, register_resolvers, reset_uid
    from rlexp.explain import user_message

    if isinstance(overrides, str):
        raise RLExpError(f"overrides={overrides!r}: give a list of strings, e.g. ['algo=td3', 'seed=1']")
    flags = [o for o in overrides if isinstance(o, str) and o.startswith("-")]
    if flags:
        raise RLExpError(
            f"{flags[0]}: rlexp.train and rlexp.compose take overrides (key=value, group=option), not the "
            f"command line's flags; {SWEEP_FROM_PYTHON}"
        )
    register_configs()
    register_resolvers()
    reset_uid()  # a new run directory for every call, as for every command
    try:
        with _fresh_hydra():
            return hydra_compose(
                config_name="config", overrides=normalize_overrides(list(overrides)), return_hydra_config=True
            )
    except Exception as exc:
        message = user_message(exc)
        if message is None:
            raise
        if " has several values: a sweep over them needs --multirun" in message:  # a value such as 0,1
            message = f"{message.split(': a sweep over them')[0]}: {SWEEP_FROM_PYTHON}"
        raise RLExpError(message) from None


def train(overrides: Sequence[str] = (), run_dir: str | os.PathLike | None = None) -> Run | None:
    """Train the run that ``python -m rlexp OVERRIDES`` would train, and return it.

    :param overrides: the command line's arguments, e.g. ``["algo=td3", "env=Pendulum-v1", "seed=1"]``
        (``resume=DIR`` continues a run, as on the command line).
    :param run_dir: where the run is written; None: a new directory under ``outputs/`` as for a
        command (``hydra.run.dir=...`` among the overrides does the same).
    :returns: the :class:`Run`. A stop signal (Ctrl-C, an interrupted kernel) ends the run after its
        current epoch with a checkpoint; the run is returned unfinished and ``resume=`` continues it.
        With ``dry_run=true`` among the overrides nothing trains and nothing is written: the checks
        pass (else :class:`RLExpError`), the line saying what would run is printed, and None returned.
    """
    from omegaconf import OmegaConf, open_dict

    from rlexp.launch import group_choices, run_job
    from rlexp.stopping import Stopped

    cfg = compose(overrides)
    where = cfg.get("resume") or run_dir or OmegaConf.select(cfg, "hydra.run.dir")
    choices = group_choices(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]  # what the task function of a command gets
    path = Path(os.fspath(where))
    with contextlib.suppress(Stopped):  # the run is saved and resumable: return it as it stands
        run_job(cfg, path, [str(o) for o in overrides], choices=choices)
    return None if cfg.get("dry_run") else load(path)
