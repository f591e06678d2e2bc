"""Schema dataclasses: the types of every config key, registered in Hydra's ConfigStore.

The values (defaults included) live only in the YAML files under ``conf/``; every field here is
``MISSING`` so a key that a preset forgets is reported instead of silently defaulted. Ranges that a
type cannot express are checked by each class's ``validate``. :func:`load_config` turns a composed
(or saved) config into these dataclasses: the launcher and every MPI rank go through it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import secrets
from dataclasses import dataclass
from typing import Any, ClassVar

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlexp.errors import ConfigError, check

ACTIVATIONS = ("tanh", "relu", "elu", "leaky_relu", "gelu", "silu", "sigmoid", "identity")


@dataclass
class EnvConfig:
    """Which gymnasium environment to train on (``conf/env/``)."""

    id: str = MISSING
    max_ep_len: int | None = MISSING
    kwargs: dict[str, Any] = MISSING

    def validate(self) -> None:
        check(
            self.max_ep_len is None or self.max_ep_len >= 1,
            f"env.max_ep_len={self.max_ep_len} is out of range; use an integer >= 1 or null",
        )


@dataclass
class NetworkConfig:
    """The MLP used for every network of the algorithm (``conf/network/``)."""

    hidden_sizes: list[int] = MISSING
    activation: str = MISSING

    def validate(self) -> None:
        check(
            all(h >= 1 for h in self.hidden_sizes),
            f"network.hidden_sizes={list(self.hidden_sizes)} is out of range; every layer needs >= 1 unit",
        )
        check(
            self.activation in ACTIVATIONS,
            f"network.activation={self.activation!r} is unknown; choose one of: {', '.join(ACTIVATIONS)}",
        )


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
        return max(1, len(os.sched_getaffinity(0)) // procs)

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
    """PyTorch (``conf/backend/torch.yaml``)."""


@dataclass
class TFBackendConfig(BackendConfig):
    """TensorFlow 2 (``conf/backend/tf.yaml``): update steps compiled by tf.function, optionally by XLA."""

    jit_compile: bool = MISSING
    quiet: bool = MISSING


# backend.name -> its schema
BACKEND_SCHEMAS: dict[str, type[BackendConfig]] = {"torch": TorchBackendConfig, "tf": TFBackendConfig}


@dataclass
class CommConfig:
    """MPI data parallelism (``conf/comm/``)."""

    procs: int = MISSING
    mpiexec: str | None = MISSING
    oversubscribe: bool = MISSING
    extra_args: list[str] = MISSING

    def validate(self) -> None:
        check(self.procs >= 1, f"comm.procs={self.procs} is out of range; use an integer >= 1")


@dataclass
class AlgoConfig:
    """Keys shared by every algorithm (``conf/algo/``). Subclasses add their own.

    ``lr``, when set, replaces every learning rate named in ``LR_KEYS`` (see :func:`apply_lr`).
    """

    LR_KEYS: ClassVar[tuple[str, ...]] = ()

    name: str = MISSING
    epochs: int = MISSING
    steps_per_epoch: int = MISSING
    gamma: float = MISSING
    lr: float | None = MISSING
    save_freq: int = MISSING

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
        for key in ("lr", *self.LR_KEYS):  # lr first: apply_lr has copied it into the others
            value = getattr(self, key)
            if value is not None:
                check(
                    math.isfinite(value) and value > 0,
                    f"algo.{key}={value} is out of range for {n}; a learning rate must be > 0",
                )


@dataclass
class OnPolicyConfig(AlgoConfig):
    """Keys of the on-policy family (VPG, TRPO, PPO): GAE and value-function training."""

    lam: float = MISSING
    vf_lr: float = MISSING
    train_v_iters: int = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(0.0 <= self.lam <= 1.0, f"algo.lam={self.lam} is out of range; use 0 <= lam <= 1")
        check(self.train_v_iters >= 0, f"algo.train_v_iters={self.train_v_iters} is out of range; use >= 0")


@dataclass
class PPOConfig(OnPolicyConfig):
    """PPO-clip; see ``conf/algo/ppo.yaml`` for the meaning of each key."""

    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "vf_lr")

    clip_ratio: float = MISSING
    pi_lr: float = MISSING
    train_pi_iters: int = MISSING
    target_kl: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(
            0.0 < self.clip_ratio < 1.0,
            f"algo.clip_ratio={self.clip_ratio} is out of range; use 0 < clip_ratio < 1",
        )
        check(
            self.train_pi_iters >= 1, f"algo.train_pi_iters={self.train_pi_iters} is out of range; use >= 1"
        )
        check(self.target_kl > 0, f"algo.target_kl={self.target_kl} is out of range; use > 0")


@dataclass
class VPGConfig(OnPolicyConfig):
    """Vanilla policy gradient; see ``conf/algo/vpg.yaml``."""

    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "vf_lr")

    pi_lr: float = MISSING


@dataclass
class TRPOConfig(OnPolicyConfig):
    """TRPO / natural policy gradient; see ``conf/algo/trpo.yaml``."""

    LR_KEYS: ClassVar[tuple[str, ...]] = ("vf_lr",)

    variant: str = MISSING
    delta: float = MISSING
    damping_coeff: float = MISSING
    cg_iters: int = MISSING
    backtrack_iters: int = MISSING
    backtrack_coeff: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(
            self.variant in ("trpo", "npg"), f"algo.variant={self.variant!r} is unknown; choose trpo or npg"
        )
        check(self.delta > 0, f"algo.delta={self.delta} is out of range; use > 0")
        check(self.damping_coeff >= 0, f"algo.damping_coeff={self.damping_coeff} is out of range; use >= 0")
        check(self.cg_iters >= 1, f"algo.cg_iters={self.cg_iters} is out of range; use >= 1")
        check(
            self.backtrack_iters >= 1,
            f"algo.backtrack_iters={self.backtrack_iters} is out of range; use >= 1",
        )
        check(
            0 < self.backtrack_coeff < 1,
            f"algo.backtrack_coeff={self.backtrack_coeff} is out of range; use 0 < backtrack_coeff < 1",
        )


@dataclass
class OffPolicyConfig(AlgoConfig):
    """Keys of the off-policy family (DDPG, TD3, SAC): replay, exploration, targets, tests."""

    replay_size: int = MISSING
    polyak: float = MISSING
    batch_size: int = MISSING
    start_steps: int = MISSING
    update_after: int = MISSING
    update_every: int = MISSING
    num_test_episodes: int = MISSING
    keep_checkpoints: int | None = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        n = self.name
        check(
            0.0 <= self.polyak <= 1.0,
            f"algo.polyak={self.polyak} is out of range for {n}; use 0 <= polyak <= 1",
        )
        check(
            self.replay_size >= procs,
            f"algo.replay_size={self.replay_size} is out of range; use >= comm.procs",
        )
        check(
            self.batch_size >= procs,
            f"algo.batch_size={self.batch_size} is smaller than comm.procs={procs}; every rank samples its share",
        )
        check(
            self.batch_size <= self.replay_size,
            f"algo.batch_size={self.batch_size} is larger than algo.replay_size={self.replay_size}",
        )
        check(self.start_steps >= 0, f"algo.start_steps={self.start_steps} is out of range; use >= 0")
        check(self.update_after >= 0, f"algo.update_after={self.update_after} is out of range; use >= 0")
        check(self.update_every >= 1, f"algo.update_every={self.update_every} is out of range; use >= 1")
        check(
            self.num_test_episodes >= 0,
            f"algo.num_test_episodes={self.num_test_episodes} is out of range; use >= 0",
        )
        check(
            self.keep_checkpoints is None or self.keep_checkpoints >= 1,
            f"algo.keep_checkpoints={self.keep_checkpoints} is out of range; use >= 1 or null (keep all)",
        )


@dataclass
class DDPGConfig(OffPolicyConfig):
    """DDPG; see ``conf/algo/ddpg.yaml``."""

    LR_KEYS: ClassVar[tuple[str, ...]] = ("pi_lr", "q_lr")

    pi_lr: float = MISSING
    q_lr: float = MISSING
    act_noise: float = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.act_noise >= 0, f"algo.act_noise={self.act_noise} is out of range; use >= 0")


@dataclass
class TD3Config(DDPGConfig):
    """TD3; see ``conf/algo/td3.yaml``."""

    target_noise: float = MISSING
    noise_clip: float = MISSING
    policy_delay: int = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.target_noise >= 0, f"algo.target_noise={self.target_noise} is out of range; use >= 0")
        check(self.noise_clip >= 0, f"algo.noise_clip={self.noise_clip} is out of range; use >= 0")
        check(self.policy_delay >= 1, f"algo.policy_delay={self.policy_delay} is out of range; use >= 1")


@dataclass
class SACConfig(OffPolicyConfig):
    """SAC; see ``conf/algo/sac.yaml``. ``lr`` is its one learning rate (policy, Q-functions, alpha)."""

    alpha: float = MISSING
    autotune_alpha: bool = MISSING
    target_entropy: float | None = MISSING

    def validate(self, procs: int) -> None:
        super().validate(procs)
        check(self.lr is not None, "algo.lr is required for sac (its one learning rate); give a value > 0")
        check(self.alpha >= 0, f"algo.alpha={self.alpha} is out of range; use >= 0")
        check(
            not self.autotune_alpha or self.alpha > 0,
            "algo.alpha must be > 0 with algo.autotune_alpha=true (it is the initial value)",
        )


@dataclass
class LoggerConfig:
    """What a run records besides progress.txt, config.yaml and checkpoints (``logger:`` in config.yaml)."""

    tensorboard: bool = MISSING


@dataclass
class RLExpConfig:
    """The whole experiment: one option of each group plus the top-level keys."""

    algo: Any = MISSING
    env: EnvConfig = MISSING
    network: NetworkConfig = MISSING
    backend: Any = MISSING
    comm: CommConfig = MISSING
    logger: LoggerConfig = MISSING
    seed: int = MISSING
    exp_name: str = MISSING
    resume: str | None = MISSING

    def validate(self) -> None:
        check(self.seed >= 0, f"seed={self.seed} is out of range; use an integer >= 0")
        check(
            not (getattr(self.backend, "jit_compile", False) and self.comm.procs > 1),
            "backend.jit_compile=true works with comm.procs=1 only (the MPI allreduce cannot run inside XLA)",
        )
        self.algo.validate(self.comm.procs)
        for part in (self.env, self.network, self.backend, self.comm):
            part.validate()


@functools.cache
def _uid() -> str:
    """Four random hex digits, fixed for this process: keeps run directories unique (``${rlexp.uid:}``)."""
    return secrets.token_hex(2)


def _job_dir(num: Any, swept: str) -> str:
    """A sweep job's directory name: its number, then the values of the swept keys (``3_algo.lr=0.001,seed=1``)."""
    return f"{num}_{swept}" if swept else str(num)


def register_resolvers() -> None:
    """The ``rlexp.*`` interpolations used in conf/config.yaml (idempotent).

    Called wherever a Hydra config may be resolved: the entry point and any process a launcher
    starts (joblib workers, SLURM jobs import :mod:`rlexp.launch`, which calls this).
    """
    OmegaConf.register_new_resolver("rlexp.uid", _uid, use_cache=True, replace=True)
    OmegaConf.register_new_resolver("rlexp.or", lambda a, b: b if a is None else a, replace=True)
    OmegaConf.register_new_resolver("rlexp.job_dir", _job_dir, replace=True)


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (``rlexp_schema`` for the root, ``algo_<name>_schema``)."""
    from hydra.core.config_store import ConfigStore

    from rlexp.algos import ALGOS

    cs = ConfigStore.instance()
    cs.store(name="rlexp_schema", node=RLExpConfig)
    for name, schema in BACKEND_SCHEMAS.items():
        cs.store(name=f"backend_{name}_schema", node=schema)
    for name, spec in ALGOS.items():
        cs.store(name=f"algo_{name}_schema", node=spec.schema)


def apply_lr(container: dict[str, Any]) -> None:
    """Where ``algo.lr`` is set, copy it into each of that algorithm's learning rates (in place).

    This keeps ``--multirun algo.lr=1e-3,3e-4`` meaningful for every algorithm, and the resolved
    config written to the run directory shows the rates that were really used.
    """
    from rlexp.algos import ALGOS

    algo = container["algo"]
    spec = ALGOS.get(algo.get("name"))
    if spec is not None and algo.get("lr") is not None:
        for key in spec.schema.LR_KEYS:
            algo[key] = algo["lr"]


def explain_error(exc: Exception) -> str:
    """One line for an OmegaConf validation error (wrong type, missing or unknown key)."""
    key = getattr(exc, "full_key", None)
    msg = str(getattr(exc, "msg", exc)).strip().splitlines()[0]
    if isinstance(exc, OmegaConfBaseException) and type(exc).__name__ == "MissingMandatoryValue":
        return f"{key} is required but not set (give it on the command line: {key}=...)"
    return f"{key}: {msg}" if key else msg


def _missing_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    """Dotted paths of the mandatory (``???``) values, found without resolving interpolations."""
    out = []
    for key in cfg:
        if OmegaConf.is_missing(cfg, key):
            out.append(f"{prefix}{key}")
        elif not OmegaConf.is_interpolation(cfg, key) and isinstance(cfg[key], DictConfig):
            out += _missing_keys(cfg[key], f"{prefix}{key}.")
    return out


def load_config(raw: DictConfig | dict[str, Any]) -> RLExpConfig:
    """Resolve, apply ``algo.lr``, type-check and range-check a config; return it as dataclasses.

    Raises :class:`ConfigError` (one line naming the key and value) on any problem.
    """
    from rlexp.algos import ALGOS

    raw_cfg = raw if isinstance(raw, DictConfig) else OmegaConf.create(raw)
    missing = _missing_keys(raw_cfg)
    if missing:
        raise ConfigError(
            f"{missing[0]} is required but not set (give it on the command line: {missing[0]}=...)"
        )
    try:
        container = OmegaConf.to_container(raw_cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(explain_error(exc)) from None
    assert isinstance(container, dict)
    name = container.get("algo", {}).get("name")
    if name not in ALGOS:
        raise ConfigError(f"algo.name={name!r} is unknown; choose one of: {', '.join(sorted(ALGOS))}")
    backend = container.get("backend", {}).get("name")
    if backend not in BACKEND_SCHEMAS:
        raise ConfigError(f"backend.name={backend!r} is unknown; choose one of: {', '.join(BACKEND_SCHEMAS)}")
    apply_lr(container)
    try:
        schema = OmegaConf.structured(RLExpConfig)
        schema.algo = OmegaConf.structured(ALGOS[name].schema)
        schema.backend = OmegaConf.structured(BACKEND_SCHEMAS[backend])
        merged = OmegaConf.merge(schema, container)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(explain_error(exc)) from None
    assert isinstance(cfg, RLExpConfig)
    cfg.validate()
    return cfg


def to_container(cfg: RLExpConfig) -> dict[str, Any]:
    """The dataclasses back to plain dicts and lists (for YAML/JSON)."""
    return dataclasses.asdict(cfg)
