"""Schema dataclasses: the types of every config key, registered in Hydra's ConfigStore.

The values (defaults included) live only in the YAML files under ``conf/``; every field here is
``MISSING`` so a key that a preset forgets is reported instead of silently defaulted. Ranges that a
type cannot express are checked by each class's ``validate``. This module holds the groups every run
has (env, network, backend, comm, logger) and :class:`AlgoConfig`, the base of the algorithms' own
schemas, which live with each algorithm (``rlexp/algos/<name>/__init__.py``). :mod:`rlexp.config`
turns a composed or saved config into these dataclasses.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING

from rlexp.errors import check
from rlexp.nn import ACTIVATIONS, ENCODERS, RECURRENT, RECURRENT_CRITIC

# A statistic a learner logs each epoch: (key, with_min_and_max). False = its average only.
Stat = tuple[str, bool]


# env.vector -> how a rank's env.num_envs envs step: in its process one after another, or one process each
VECTOR_MODES = ("sync", "async")


def cxx_compiler() -> tuple[str, bool]:
    """The C++ compiler that torch.compile calls ($CXX, else g++), and whether it is on PATH."""
    cxx = os.environ.get("CXX", "g++")
    return cxx, shutil.which(cxx) is not None


@dataclass
class EnvConfig:
    """Which gymnasium environment to train on (``conf/env/``)."""

    id: str = MISSING
    max_ep_len: int | None = MISSING
    kwargs: dict[str, Any] = MISSING
    wrappers: list[Any] = MISSING
    normalize_obs: bool = MISSING
    normalize_reward: bool = MISSING
    clip_obs: float = MISSING
    clip_reward: float = MISSING
    norm_gamma: float | None = MISSING
    sign_reward: bool = MISSING
    frame_stack: int = MISSING
    num_envs: int = MISSING
    vector: str = MISSING

    def validate(self) -> None:
        check(self.num_envs >= 1, f"env.num_envs={self.num_envs} is out of range; use an integer >= 1")
        check(
            self.frame_stack >= 1,
            f"env.frame_stack={self.frame_stack} is out of range; use an integer >= 1 (1: no stacking)",
        )
        check(
            self.vector in VECTOR_MODES,
            f"env.vector={self.vector!r} is unknown; choose one of: {', '.join(VECTOR_MODES)}",
        )
        check(
            self.max_ep_len is None or self.max_ep_len >= 1,
            f"env.max_ep_len={self.max_ep_len} is out of range; use an integer >= 1 or null",
        )
        for key in ("clip_obs", "clip_reward"):
            value = getattr(self, key)
            check(math.isfinite(value) and value > 0, f"env.{key}={value} is out of range; use a number > 0")
        check(
            self.norm_gamma is None or 0.0 < self.norm_gamma <= 1.0,
            f"env.norm_gamma={self.norm_gamma} is out of range; use 0 < norm_gamma <= 1 or null (algo.gamma)",
        )


@dataclass
class NetworkConfig:
    """The network shape used for every network of the algorithm (``conf/network/``): an encoder of
    the observations (``encoder``, :data:`rlexp.nn.ENCODERS`) followed by an MLP (``hidden_sizes``,
    ``activation``)."""

    encoder: str = MISSING
    hidden_sizes: list[int] = MISSING
    activation: str = MISSING
    recurrent: str | None = MISSING
    recurrent_size: int = MISSING
    recurrent_critic: str = MISSING
    seq_len: int = MISSING

    def validate(self) -> None:
        check(
            all(h >= 1 for h in self.hidden_sizes),
            f"network.hidden_sizes={list(self.hidden_sizes)} is out of range; every layer needs >= 1 unit",
        )
        check(
            self.activation in ACTIVATIONS,
            f"network.activation={self.activation!r} is unknown; choose one of: {', '.join(ACTIVATIONS)}",
        )
        check(
            self.encoder in ENCODERS,
            f"network.encoder={self.encoder!r} is unknown; choose one of: {', '.join(ENCODERS)}",
        )
        check(
            self.recurrent is None or self.recurrent in RECURRENT,
            f"network.recurrent={self.recurrent!r} is unknown; choose one of: {', '.join(RECURRENT)} or null",
        )
        check(
            self.recurrent_critic in RECURRENT_CRITIC,
            f"network.recurrent_critic={self.recurrent_critic!r} is unknown; choose one of: "
            f"{', '.join(RECURRENT_CRITIC)}",
        )
        for key in ("recurrent_size", "seq_len"):
            value = getattr(self, key)
            check(value >= 1, f"network.{key}={value} is out of range; use an integer >= 1")


def usable_cores() -> int:
    """The CPUs this process may use (its affinity where the OS has one, else all of the machine's)."""
    if hasattr(os, "sched_getaffinity"):  # Linux; not macOS or Windows
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


@dataclass
class BackendConfig:
    """Deep-learning library and its resources (``conf/backend/``); one subclass per library."""

    name: str = MISSING
    device: str = MISSING
    threads: int | None = MISSING

    def threads_per_rank(self, procs: int) -> int:
        """``threads`` if set, else max(1, cores // procs) with cores = the CPUs this process may use."""
        if self.threads is not None:
            return self.threads
        return max(1, usable_cores() // procs)

    def validate(self) -> None:
        check(
            self.threads is None or self.threads >= 1,
            f"backend.threads={self.threads} is out of range; use an integer >= 1 or null",
        )
        dev = self.device
        check(
            dev in ("cpu", "cuda", "auto") or (dev.startswith("cuda:") and dev[5:].isdigit()),
            f"backend.device={dev!r} is unknown; use cpu, cuda, cuda:N or auto",
        )


@dataclass
class TorchBackendConfig(BackendConfig):
    """PyTorch (``conf/backend/torch.yaml``): ``flush_denormal`` flushes subnormal floats to zero in the
    learner's updates on the CPU, as TensorFlow and XLA always do; ``compile`` runs each gradient step as
    one function compiled by ``torch.compile`` (the off-policy algorithms), which needs a C++
    compiler: true, false, or null to let the run decide (on where it pays: on the CPU, with a compiler,
    for a run that plans at least ``compile_min_steps`` gradient steps per rank; see
    :meth:`rlexp.algos.torch_common.OffPolicyTorchLearner.choose_compile`); with one rank,
    ``compile_unroll`` steps of a burst run as one compiled call, unrolled
    (:meth:`rlexp.algos.torch_common.OffPolicyTorchLearner.update_burst`)."""

    flush_denormal: bool = MISSING
    compile: bool | None = MISSING
    compile_min_steps: int = MISSING
    compile_unroll: int = MISSING

    def validate(self) -> None:
        super().validate()
        check(
            self.compile_min_steps >= 0,
            f"backend.compile_min_steps={self.compile_min_steps} is out of range; use an integer >= 0",
        )
        check(
            self.compile_unroll >= 1,
            f"backend.compile_unroll={self.compile_unroll} is out of range; use an integer >= 1 (1: one "
            "compiled call per gradient step)",
        )


@dataclass
class TFBackendConfig(BackendConfig):
    """TensorFlow 2 (``conf/backend/tf.yaml``): update steps compiled by tf.function, optionally by XLA."""

    jit_compile: bool = MISSING
    compile_bursts: bool = MISSING
    quiet: bool = MISSING


# backend.name -> its schema
BACKEND_SCHEMAS: dict[str, type[BackendConfig]] = {"torch": TorchBackendConfig, "tf": TFBackendConfig}


@dataclass
class CommConfig:
    """MPI data parallelism (``conf/comm/``)."""

    procs: int = MISSING
    nodes: int | None = MISSING
    hostfile: str | None = MISSING
    interface: str | None = MISSING
    mpiexec: str | None = MISSING
    oversubscribe: bool = MISSING
    extra_args: list[str] = MISSING

    def validate(self) -> None:
        check(self.procs >= 1, f"comm.procs={self.procs} is out of range; use an integer >= 1")
        check(
            self.nodes is None or self.nodes >= 1,
            f"comm.nodes={self.nodes} is out of range; use an integer >= 1 or null (the allocation's nodes)",
        )


@dataclass
class AlgoConfig:
    """Keys shared by every algorithm (``conf/algo/``), and what an algorithm declares about itself.

    Each algorithm's subclass, in ``rlexp/algos/<name>/__init__.py``, is both the schema of its YAML
    preset and its entry in the registry :data:`rlexp.algos.ALGOS` (as a BenchMARL config class is):
    its family base (:class:`rlexp.algos.on_policy.OnPolicyConfig` or
    :class:`rlexp.algos.off_policy.OffPolicyConfig`) gives the training loop and the action spaces,
    and the subclass names its statistics and its learner per backend.

    ``lr``, when set, replaces every learning rate named in ``LR_KEYS`` (see :func:`rlexp.config.apply_lr`).

    Evaluation (both families, :mod:`rlexp.algos.evaluation`): after every ``test_every``-th epoch
    (0: never) the policy plays ``num_test_episodes`` episodes with its deterministic action (the
    mean, or the most likely action), split across ranks, in a test env of its own; their returns
    are the TestEpRet columns, the best pooled mean so far keeps its checkpoint
    (``checkpoints/best.pt``). ``stop_at_return``, when set, ends the run as finished after the first
    epoch whose score reaches it: the mean test return when the policy is evaluated (on evaluation
    epochs only), else the epoch's mean training return (AverageEpRet).
    """

    NAME: ClassVar[str] = ""  # the id of algo=NAME and of the preset's ``name`` key
    RECURRENT: ClassVar[bool] = False  # whether it trains recurrent networks (network.recurrent)
    LR_KEYS: ClassVar[tuple[str, ...]] = ()  # the learning rates that ``lr`` sets
    ACTION_SPACES: ClassVar[tuple[type, ...]] = ()  # the gymnasium action space classes it supports
    BOUNDED_ACTIONS: ClassVar[bool] = False  # whether a Box action space must have finite bounds
    BACKENDS: ClassVar[tuple[str, ...]] = ("torch", "tf")  # the backends it has a learner for
    TORCH_COMPILE: ClassVar[bool] = False  # whether its torch learner compiles its step (backend.compile)
    IMAGE_NETWORK: ClassVar[str] = "nature_cnn"  # the network preset suggested for image observations
    # What the policy's actions are when they are not deterministic (test_policy without --deterministic,
    # Policy(obs, deterministic=False)), in words; None: the policy has deterministic actions only
    SAMPLED_ACTIONS: ClassVar[str | None] = "sampled"
    # The settings whose schedules span the run (algo.epochs x steps_per_epoch): each a key of the preset
    # and a test of the config that is true when that key makes a schedule last the whole run, e.g.
    # PPO's ("anneal_lr", lambda algo: algo.anneal_lr). :meth:`epochs_schedule` names those that hold,
    # and ``resume=`` refuses other epochs for them. Every schedule over the run's length (a learning
    # rate or an exponent annealed to the end, an exploration given as a fraction of the run) is
    # declared here; tests/test_structure.py checks that an algorithm reading algo.epochs declares one.
    RUN_SCHEDULES: ClassVar[tuple[tuple[str, Callable[[Any], bool]], ...]] = ()

    name: str = MISSING
    epochs: int = MISSING
    steps_per_epoch: int = MISSING
    gamma: float = MISSING
    lr: float | None = MISSING
    save_freq: int = MISSING
    num_test_episodes: int = MISSING
    test_every: int = MISSING
    stop_at_return: float | None = MISSING

    @property
    def evaluates(self) -> bool:
        """Whether the policy plays test episodes (``test_every`` and ``num_test_episodes`` both > 0)."""
        return self.test_every > 0 and self.num_test_episodes > 0

    def validate(self, procs: int) -> None:
        n = self.name
        check(self.epochs >= 1, f"algo.epochs={self.epochs} is out of range; use an integer >= 1")
        check(
            self.steps_per_epoch >= procs,
            f"algo.steps_per_epoch={self.steps_per_epoch} is smaller than comm.procs={procs}; "
            "every rank needs at least one step per epoch",
        )
        check(0.0 < self.gamma <= 1.0, f"algo.gamma={self.gamma} is out of range for {n}; use 0 < gamma <= 1")
        check(self.save_freq >= 1, f"algo.save_freq={self.save_freq} is out of range; use an integer >= 1")
        check(
            self.test_every >= 0,
            f"algo.test_every={self.test_every} is out of range; use an integer >= 0 (0: no test episodes)",
        )
        check(
            self.num_test_episodes >= 0,
            f"algo.num_test_episodes={self.num_test_episodes} is out of range; use an integer >= 0",
        )
        check(
            self.stop_at_return is None or math.isfinite(self.stop_at_return),
            f"algo.stop_at_return={self.stop_at_return} is out of range; use a finite number or null (never stop early)",
        )
        for key in ("lr", *self.LR_KEYS):  # lr first: apply_lr has copied it into the others
            value = getattr(self, key)
            if value is not None:
                check(
                    math.isfinite(value) and value > 0,
                    f"algo.{key}={value} is out of range for {n}; a learning rate must be > 0",
                )

    def validate_epoch(self, procs: int, num_envs: int) -> None:
        """Checks of the data one rank collects per epoch: ``steps_per_epoch // (procs x num_envs)``
        steps of each of its ``num_envs`` envs (none here)."""

    def epochs_schedule(self) -> str | None:
        """The settings that tie this algorithm's schedules to ``algo.epochs`` (those of
        :data:`RUN_SCHEDULES` that hold, as ``algo.key=value``: e.g. a learning rate annealed over the
        run), so that ``resume=`` with other epochs cannot continue it exactly; None when none do."""
        spans = [
            f"algo.{key}={json.dumps(getattr(self, key))}" for key, holds in self.RUN_SCHEDULES if holds(self)
        ]
        return ", ".join(spans) or None

    @classmethod
    def tuned_names(cls, algo: dict[str, Any]) -> tuple[str, ...]:
        """The ``tuned=NAME`` settings that may apply to the composed ``algo`` section (a dict): its own
        algorithm's; a preset that extends it may add its own name (DQN's ``rainbow``, ``qrdqn``)."""
        return (cls.NAME,)

    def notes(self) -> list[str]:
        """Lines the run prints before its first epoch about settings it does not use as given (none)."""
        return []

    def sampled_actions(self) -> str | None:
        """:data:`SAMPLED_ACTIONS` of this configuration (an option may change how the policy explores)."""
        return self.SAMPLED_ACTIONS

    def stats(self) -> tuple[Stat, ...]:
        """The learner's statistics logged after TotalEnvInteracts, in Spinning Up's order."""
        raise NotImplementedError

    @staticmethod
    def learner_class(backend: str) -> type:
        """The learner class of ``backend`` (a subclass of :class:`rlexp.algos.learner.Learner`); its
        module is imported only here, so running one backend never imports the other's library."""
        raise NotImplementedError

    @staticmethod
    def loop() -> Callable[..., None]:
        """The ``train`` function of the algorithm's family loop."""
        raise NotImplementedError

    @staticmethod
    def env_action(act_space: Any) -> Callable[[Any], Any]:
        """Maps the policy's output to what ``env.step`` takes."""
        raise NotImplementedError


# logger.console: what each epoch prints (rlexp.logger.Logger)
CONSOLE_MODES = ("table", "line", "quiet")
# logger.progress: the bar inside each epoch (rlexp.progress)
PROGRESS_MODES = ("auto", "true", "false")


@dataclass
class LoggerConfig:
    """What a run records besides progress.txt, config.yaml and checkpoints (``logger:`` in config.yaml)."""

    tensorboard: bool = MISSING
    console: str = MISSING
    progress: str = MISSING
    video_every: int = MISSING
    episodes: bool = MISSING
    wandb: bool = MISSING
    wandb_project: str = MISSING
    wandb_entity: str | None = MISSING
    wandb_group: str | None = MISSING
    wandb_tags: list[str] = MISSING

    def validate(self) -> None:
        check(
            self.console in CONSOLE_MODES,
            f"logger.console={self.console!r} is unknown; choose one of: {', '.join(CONSOLE_MODES)}",
        )
        check(
            self.progress.lower() in PROGRESS_MODES,
            f"logger.progress={self.progress!r} is unknown; choose one of: {', '.join(PROGRESS_MODES)}",
        )
        check(
            self.video_every >= 0,
            f"logger.video_every={self.video_every} is out of range; use 0 (no videos) or N >= 1 (every N epochs)",
        )


# score.aggregate -> what it takes of the last ``score.last`` values
SCORE_AGGREGATES = ("mean", "median", "max", "min", "last")


@dataclass
class ScoreConfig:
    """How a run is scored (``score:`` in config.yaml; :mod:`rlexp.score`)."""

    column: str | None = MISSING
    last: int = MISSING
    aggregate: str = MISSING

    def validate(self) -> None:
        check(self.last >= 1, f"score.last={self.last} is out of range; use an integer >= 1")
        check(
            self.aggregate in SCORE_AGGREGATES,
            f"score.aggregate={self.aggregate!r} is unknown; choose one of: {', '.join(SCORE_AGGREGATES)}",
        )


@dataclass
class TunedConfig:
    """Which tuned preset set some of the run's keys (``tuned=ppo``: ``conf/tuned/``, ``conf/tuned_preset/``)."""

    name: str | None = MISSING
    preset: str | None = MISSING
    source: str | None = MISSING


@dataclass
class RLExpConfig:
    """The whole experiment: one option of each group plus the top-level keys."""

    algo: Any = MISSING
    env: EnvConfig = MISSING
    network: NetworkConfig = MISSING
    backend: Any = MISSING
    comm: CommConfig = MISSING
    logger: LoggerConfig = MISSING
    score: ScoreConfig = MISSING
    tuned: TunedConfig = MISSING
    seed: int = MISSING
    exp_name: str = MISSING
    resume: str | None = MISSING
    allow_env_import: bool = MISSING
    dry_run: bool = MISSING

    def validate(self) -> None:
        check(self.seed >= 0, f"seed={self.seed} is out of range; use an integer >= 0")
        check(
            not (getattr(self.backend, "jit_compile", False) and self.comm.procs > 1),
            "backend.jit_compile=true works with comm.procs=1 only (the MPI allreduce cannot run inside XLA)",
        )
        if getattr(self.backend, "compile", None) is True:
            check(
                type(self.algo).TORCH_COMPILE,
                "backend.compile=true compiles the gradient step of the off-policy algorithms (algo=ddpg, td3, "
                f"sac, tqc, crossq, dqn, c51, qrdqn, rainbow); algo={self.algo.name} has none to compile: set "
                "backend.compile=false",
            )
            cxx, found = cxx_compiler()
            check(
                found,
                f"backend.compile=true needs the C++ compiler that torch.compile calls, {cxx} ($CXX, else g++), "
                "which is not on PATH; install one or set backend.compile=false",
            )
        self.comm.validate()  # first: the algorithm's checks divide by comm.procs ...
        self.env.validate()  # ... and by env.num_envs
        self.algo.validate(self.comm.procs)
        check(
            self.algo.steps_per_epoch >= self.comm.procs * self.env.num_envs,
            f"algo.steps_per_epoch={self.algo.steps_per_epoch} is smaller than comm.procs x env.num_envs="
            f"{self.comm.procs * self.env.num_envs}; every env needs at least one step per epoch",
        )
        self.algo.validate_epoch(self.comm.procs, self.env.num_envs)
        for part in (self.network, self.backend, self.score, self.logger):
            part.validate()
        minibatches = getattr(self.algo, "num_minibatches", 0)
        if self.network.recurrent is not None and minibatches > 0:
            steps = self.algo.steps_per_epoch // (self.comm.procs * self.env.num_envs)
            fewest = self.env.num_envs * -(-steps // self.network.seq_len)  # sequences a rank has at least
            check(
                minibatches <= fewest,
                f"algo.num_minibatches={minibatches} is more than the {fewest} sequences a rank may have per "
                f"epoch ({self.env.num_envs} envs x {steps} steps cut every network.seq_len="
                f"{self.network.seq_len}); a recurrent minibatch holds whole sequences",
            )
