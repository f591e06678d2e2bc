"""From a composed or saved config to typed, checked dataclasses (the schemas of :mod:`rlexp.schema`
and of each algorithm in :data:`rlexp.algos.ALGOS`).

The launcher, every MPI rank, test_policy and the sweeper all go through :func:`load_config`; a run's
resolved config is its ``config.yaml`` (:data:`CONFIG_FILE`), read back by :func:`load_run_config`.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import secrets
import types
import typing
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlexp.algos import ALGOS, plugin_conf_dirs
from rlexp.errors import ConfigError, RLExpError
from rlexp.schema import BACKEND_SCHEMAS, RLExpConfig

CONFIG_FILE = "config.yaml"  # a run directory's resolved config: what every rank trains with


def _conf_dir() -> str:
    """The YAML presets: ``rlexp/conf`` in an installed wheel, the repository's ``conf/`` in a checkout
    (an editable install included)."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if (packaged / "config.yaml").is_file() else here.parent / "conf")


CONF_DIR = _conf_dir()  # Hydra's primary config directory
# Top-level keys of conf/config.yaml added after runs were recorded without them
LATER_KEYS = ("allow_env_import", "score", "logger", "dry_run")


def conf_dirs() -> list[Path]:
    """Where rlexp's YAML presets live: its own conf/, then every plugin's."""
    return [Path(CONF_DIR), *plugin_conf_dirs()]


def flat_name(text: str) -> str:
    """``text`` as one directory name: a namespace's ``/`` as ``-`` (``ALE/Pong-v5`` -> ``ALE-Pong-v5``)."""
    return str(text).replace("/", "-")


def task_of(preset: Any, env_id: Any, wrappers: Any, overrides: Any) -> str:
    """The task a new run trains on (:func:`rlexp.plot.task_name`: ``env=PendulumNoVel-v1`` is a task of its
    own, not Pendulum-v1). ``preset``: the ``env=`` option; ``overrides``: the command line's."""
    from rlexp.plot import task_name  # light: plot imports neither Hydra nor the learners at the top

    given = {str(o).split("=", 1)[0].lstrip("+~") for o in overrides or ()}
    return task_name(None if preset is None else str(preset), str(env_id), wrappers, "env.id" in given)


def _run_task(preset: Any, env_id: Any, wrappers: Any, overrides: Any) -> str:
    """``${rlexp.task:...}``: :func:`task_of` as one directory name (a new run's directory)."""
    return flat_name(task_of(preset, env_id, wrappers, overrides))


def algo_options() -> dict[str, str]:
    """Every ``algo=`` option (rlexp's and plugins' presets) -> the algorithm it runs (``algo.name``): a
    base preset names it (``name: dqn``), a derived one names its base first in its ``defaults:`` list
    (``qrdqn.yaml``: ``- dqn``). An option whose algorithm cannot be read is left out."""
    files = {p.stem: p for d in conf_dirs() for p in sorted((d / "algo").glob("*.yaml"))}

    def base(option: str, seen: tuple[str, ...] = ()) -> str | None:
        text = files[option].read_text()
        named = re.search(r"(?m)^name:\s*([\w-]+)", text)
        if named:
            return named.group(1)
        listed = re.search(r"(?m)^defaults:\n  - ([\w-]+)\s*$", text)
        parent = listed.group(1) if listed else None
        return base(parent, (*seen, option)) if parent in files and parent not in seen else None

    return {option: name for option in sorted(files) if (name := base(option)) is not None}


@functools.cache
def _uid() -> str:
    """Four random hex digits, fixed for this process: keeps run directories unique (``${rlexp.uid:}``)."""
    return secrets.token_hex(2)


def reset_uid() -> None:
    """A new ``${rlexp.uid:}`` from now on (the Python API: every run it starts gets its own directory)."""
    _uid.cache_clear()


EXAMPLE = "algo=sac env=Pendulum-v1 seed=1"  # overrides, for the errors about an argument that is none


def check_command_line(args: list[str]) -> None:
    """Refuse in one line what is neither one of Hydra's flags nor an override, before Hydra's own
    parser does in its words (``__main__.py: error: unrecognized arguments``, ``Error parsing override``):
    ``--algo sac`` (rlexp takes ``algo=sac``) and ``algo.lr 1e-3`` (``algo.lr=1e-3``). Hydra's flags and
    their values pass, abbreviated as argparse allows (``--multi``); so do ``~key`` deletions."""
    from hydra._internal.utils import get_args_parser  # Hydra's own flags, as its parser takes them

    flags = {
        o: a for a in get_args_parser()._actions for o in a.option_strings
    }  # each flag's argparse action
    value_next = False  # the argument is the value of the flag before it
    for i, arg in enumerate(args):
        following = args[i + 1] if i + 1 < len(args) else None
        plain = following is not None and "=" not in following and not following.startswith(("-", "~"))
        if value_next:
            value_next = False
        elif arg.startswith("-"):
            name = arg.split("=", 1)[0]
            long = [f for f in flags if f.startswith("--") and f.startswith(name)]
            known = [name] if name in flags else long
            if len(known) != 1 or name in ("-", "--"):
                example = EXAMPLE
                if name.startswith("--") and len(name) > 2:  # --algo sac, --algo=sac: algo=sac
                    key = name[2:]
                    example = arg[2:] if "=" in arg else f"{key}={following}" if plain else f"{key}=VALUE"
                raise RLExpError(
                    f"unknown flag {arg}; rlexp takes key=value overrides ({example}) and Hydra's flags "
                    "(--multirun, --help, --hydra-help, --cfg job, ...)"
                )
            # a flag's value follows it: one (--cfg job), or an optional one (--info [plugins])
            nargs, choices = flags[known[0]].nargs, flags[known[0]].choices
            value_next = "=" not in arg and (nargs is None or (nargs == "?" and plain))
            if value_next and nargs is None and not plain:
                what = f"one of {', '.join(choices)}" if choices else "a value"
                raise RLExpError(f"{arg} takes {what}: {known[0]} {next(iter(choices or ['VALUE']))}")
        elif "=" not in arg and not arg.startswith("~"):
            example = f"{arg}={following}" if plain else EXAMPLE
            raise RLExpError(
                f"{arg!r} is not an override; rlexp takes key=value and group=option ({example})"
            )


def normalize_overrides(args: list[str]) -> list[str]:
    """Command-line overrides as Hydra takes them: ``+tuned=NAME`` (appending the group, as one writes
    for an optional group) becomes ``tuned=NAME`` (rlexp's defaults list already has ``tuned: none``).
    A ``tuned_preset=ALGO/FILE`` that names no file is refused in one line (Hydra would skip the
    optional group silently)."""
    if not any(a.startswith("hydra.searchpath") for a in args):  # else presets may live anywhere
        for arg in args:
            if arg.startswith("tuned_preset=") and "(" not in arg:  # a value or a sweep's values, a,b
                check_tuned_preset(arg.split("=", 1)[1].split(","))
    return _per_job_group_keys([a[1:] if a.startswith("+tuned=") else a for a in args])


def _per_job_group_keys(args: list[str]) -> list[str]:
    """In a ``--multirun`` sweep over a config group's options (``algo=dqn,c51``, or ``tuned=dqn,qrdqn``,
    which selects the algo), the keys given one value (``algo.update_after=200``) become one-value sweeps
    (``algo.update_after=choice(200)``).

    Hydra composes a sweep's master config without its swept overrides, so with each group's default
    option (``algo=ppo``), and refuses a key that only the swept options have. A sweep override is
    applied per job instead, where the swept options are in place; rlexp's sweeper still checks every
    job before any starts, and names job directories without keys that all jobs share; rlexp's Optuna
    sweeper gives every trial such a key's one value. Left as they are: sweeps under a sweeper not
    rlexp's, additions (``+algo.x=1``), Hydra's own keys, and anything Hydra's parser refuses (Hydra
    reports it)."""
    if not {"--multirun", "-m"} & set(args) or any(
        a.startswith("hydra/sweeper=") and a.split("=", 1)[1] not in ("rlexp", "optuna") for a in args
    ):
        return args
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()

    def parsed(arg: str) -> Any:
        if arg.startswith("-"):
            return None
        try:
            return parser.parse_override(arg)
        except HydraException:
            return None

    overrides = [parsed(a) for a in args]
    groups = {p.name for d in conf_dirs() for p in d.iterdir() if p.is_dir()}
    if not any(o is not None and o.is_sweep_override() and o.key_or_group in groups for o in overrides):
        return args
    out = []
    for arg, o in zip(args, overrides, strict=True):
        if (
            o is not None
            and not o.is_sweep_override()
            and o.type == OverrideType.CHANGE
            and not o.is_hydra_override()
            and "." in o.key_or_group
            and o.package is None
        ):
            arg = f"{o.key_or_group}=choice({o.get_value_element_as_str()})"
        out.append(arg)
    return out


def check_tuned_preset(choices: list[str]) -> None:
    """Each ``tuned_preset=`` choice names a file of ``conf/tuned_preset/`` (rlexp's or a plugin's)."""
    folders = [d / "tuned_preset" for d in conf_dirs()]
    for choice in choices:
        if choice != "null" and not any((f / f"{choice}.yaml").is_file() for f in folders):
            shared = sorted(
                {p.relative_to(f).with_suffix("").as_posix() for f in folders for p in f.glob("*/_*.yaml")}
            )
            raise ConfigError(
                f"tuned_preset={choice} is no file in conf/tuned_preset/; the shared ones: {', '.join(shared)}"
                " (each env's: tuned=ALGO selects conf/tuned_preset/ALGO/<env>.yaml)"
            )


def tuned_presets(name: str) -> list[str]:
    """The env presets that have tuned settings for algorithm ``name`` (``conf/tuned_preset/<name>/``)."""
    folder = Path(CONF_DIR) / "tuned_preset" / name
    return sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_"))


def check_tuned(container: dict[str, Any]) -> None:
    """``tuned=NAME`` applies only to algo=NAME (which it selects when no algo is given: its
    ``conf/tuned/NAME.yaml`` overrides the algo group), and only where a tuned preset file applied: the env
    preset's (``conf/tuned_preset/NAME/<env>.yaml``) or one named on the command line
    (``tuned_preset=sac/_zoo_mujoco``); each sets ``tuned.source``."""
    tuned = container.get("tuned") or {}
    name = tuned.get("name")
    if not name:
        return
    algo = container.get("algo", {}).get("name")
    names = ALGOS[algo].tuned_names(container["algo"]) if algo in ALGOS else (algo,)
    if name not in names:
        raise ConfigError(f"tuned={name} holds settings of algo={name}, but algo={algo}; use algo={name}")
    if tuned.get("source") is None:
        env_id = container.get("env", {}).get("id")
        have = ", ".join(f"env={e}" for e in tuned_presets(name)) or "none"
        raise ConfigError(
            f"tuned={name} has no settings for env.id={env_id!r}; tuned {name} presets: {have} "
            f"(without tuned={name}: algo={name}'s own defaults)"
        )


def _job_dir(num: Any, swept: str) -> str:
    """A sweep job's directory name: its number, then the values of the swept keys (``3_algo.lr=0.001,seed=1``),
    one directory name even where a value has a namespace (``env.id=MinAtar/Breakout-v1`` as ``MinAtar-Breakout-v1``)."""
    return f"{num}_{flat_name(swept)}" if swept else str(num)


def register_resolvers() -> None:
    """The ``rlexp.*`` interpolations used in conf/config.yaml (idempotent).

    Called wherever a Hydra config may be resolved: the entry point and any process a launcher
    starts (joblib workers, SLURM jobs import :mod:`rlexp.launch`, which calls this).
    """
    OmegaConf.register_new_resolver("rlexp.uid", _uid, use_cache=True, replace=True)
    OmegaConf.register_new_resolver("rlexp.or", lambda a, b: b if a is None else a, replace=True)
    OmegaConf.register_new_resolver("rlexp.job_dir", _job_dir, replace=True)
    OmegaConf.register_new_resolver("rlexp.task", _run_task, replace=True)  # the env's task, ditto
    OmegaConf.register_new_resolver(
        "rlexp.per_node", lambda procs, nodes: -(-procs // (nodes or 1)), replace=True
    )


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (``rlexp_schema`` for the root, ``algo_<name>_schema``)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="rlexp_schema", node=RLExpConfig)
    for name, schema in BACKEND_SCHEMAS.items():
        cs.store(name=f"backend_{name}_schema", node=schema)
    for name, schema in ALGOS.items():
        cs.store(name=f"algo_{name}_schema", node=schema)


def apply_lr(container: dict[str, Any]) -> None:
    """Where ``algo.lr`` is set, copy it into each of that algorithm's learning rates (in place).

    This keeps ``--multirun algo.lr=1e-3,3e-4`` meaningful for every algorithm, and the resolved
    config written to the run directory shows the rates that were really used.
    """
    algo = container["algo"]
    schema = ALGOS.get(algo.get("name"))
    if schema is not None and algo.get("lr") is not None:
        for key in schema.LR_KEYS:
            algo[key] = algo["lr"]


def unknown_key(exc: Exception) -> str | None:
    """One line for a key that a schema does not have (``algo.lrr=1``, ``+algo.foo=1``): the key, its
    close matches among the keys of its group and all of them, sorted. None for other errors."""
    key = getattr(exc, "full_key", None)
    cls = getattr(exc, "object_type", None)
    if type(exc).__name__ not in ("ConfigKeyError", "ConfigAttributeError") or not key:
        return None
    if cls is None or not dataclasses.is_dataclass(cls):
        return f"unknown key {key}"
    parent, _, name = str(key).rpartition(".")
    keys = sorted(f.name for f in dataclasses.fields(cls))
    close = difflib.get_close_matches(name, keys, n=3, cutoff=0.6)
    hint = f" (close matches: {', '.join(f'{parent}.{c}' if parent else c for c in close)})" if close else ""
    return f"unknown key {key}{hint}; {parent or 'the root config'} has: {', '.join(keys)}"


#: the words for what a typed config field takes
TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number"}


def allowed_values(exc: Exception) -> str | None:
    """For a value of the wrong type: what its field takes, from the field's type in its dataclass
    (``true, false or null`` for ``bool | None``); None where that is not a plain bool, int or float."""
    cls, key = getattr(exc, "object_type", None), getattr(exc, "full_key", None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls) and key):
        return None
    try:
        hint = typing.get_type_hints(cls).get(str(key).rsplit(".", 1)[-1])
    except (NameError, TypeError):  # a type annotation that does not resolve
        return None
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = typing.get_args(hint) if union else (hint,)
    optional = type(None) in args
    base = [a for a in args if a is not type(None)]
    if len(base) != 1 or base[0] not in TYPE_WORDS:
        return None
    words = TYPE_WORDS[base[0]]
    if not optional:
        return words
    return "true, false or null" if base[0] is bool else f"{words} or null"


def explain_error(exc: Exception) -> str:
    """One line for an OmegaConf validation error (wrong type, missing or unknown key)."""
    key = getattr(exc, "full_key", None)
    msg = str(getattr(exc, "msg", exc)).strip().splitlines()[0]
    if isinstance(exc, OmegaConfBaseException) and type(exc).__name__ == "MissingMandatoryValue":
        return f"{key} is required but not set (give it on the command line: {key}=...)"
    unknown = unknown_key(exc)
    if unknown is not None:
        return unknown
    if type(exc).__name__ == "ValidationError" and (words := allowed_values(exc)) is not None:
        msg = f"{msg}; use {words}"
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
    check_tuned(container)
    apply_lr(container)
    try:
        schema = OmegaConf.structured(RLExpConfig)
        schema.algo = OmegaConf.structured(ALGOS[name])
        schema.backend = OmegaConf.structured(BACKEND_SCHEMAS[backend])
        merged = OmegaConf.merge(schema, container)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ConfigError(explain_error(exc)) from None
    assert isinstance(cfg, RLExpConfig)
    # Checked here, where the registry can name the algorithms that take a recurrent network
    if cfg.network.recurrent is not None and not cfg.algo.RECURRENT:
        takers = ", ".join(sorted(n for n, a in ALGOS.items() if a.RECURRENT))
        raise ConfigError(
            f"network.recurrent={cfg.network.recurrent} is for the algorithms that train on sequences "
            f"({takers}), not {cfg.algo.name}; use network.recurrent=null"
        )
    cfg.validate()
    return cfg


def to_container(cfg: RLExpConfig) -> dict[str, Any]:
    """The dataclasses back to plain dicts and lists (for YAML/JSON)."""
    return dataclasses.asdict(cfg)


def runs_inside(folder: str | Path) -> str:
    """For a folder given where one run was asked for: ``""``, or ``"; it holds N runs, e.g. PATH"`` when
    runs lie in it or one level deeper (a sweep's directory, ``outputs/<date>``)."""
    folder = Path(folder)
    try:
        found = sorted(p.parent for p in folder.glob(f"*/{CONFIG_FILE}")) or sorted(
            p.parent for p in folder.glob(f"*/*/{CONFIG_FILE}")
        )
    except OSError:
        return ""
    return f"; it holds {len(found)} run{'s' * (len(found) > 1)}, e.g. {found[0]}" if found else ""


def read_run_config(run_dir: str | Path) -> DictConfig:
    """The run's :data:`CONFIG_FILE`, parsed only (nothing in it is imported or resolved yet)."""
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise RLExpError(
            f"{path} does not exist: {run_dir} is not an rlexp run directory{runs_inside(run_dir)}"
        )
    try:
        raw = OmegaConf.load(path)
    except Exception as exc:  # YAML syntax: the file was edited or damaged
        raise RLExpError(f"{path} cannot be read: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, DictConfig):
        raise RLExpError(f"{path} is not an rlexp config (a mapping of groups and keys)")
    upgrade_old_keys(raw)
    # A run from before a top-level key was added: take the key's value from conf/config.yaml (the
    # keys that are added later describe how a run is recorded or scored, not how it trains).
    later = OmegaConf.masked_copy(OmegaConf.load(Path(CONF_DIR) / "config.yaml"), list(LATER_KEYS))
    return OmegaConf.merge(later, raw)  # type: ignore[return-value]


def upgrade_old_keys(raw: DictConfig) -> None:
    """Give a config written before keys were added to its groups (algo, env, network, tuned, comm)
    those keys, each with the value that keeps how the old run trained (in place)."""
    _add_evaluation_keys(raw)
    _add_network_keys(raw)
    _add_value_target_key(raw)
    _add_later_group_keys(raw)


def _add_evaluation_keys(raw: DictConfig) -> None:
    """A run from before the evaluation keys trains on as it did: the off-policy algorithms (which had
    ``num_test_episodes``) tested after every epoch, the on-policy ones never; none stopped early."""
    algo = raw.get("algo")
    if not isinstance(algo, DictConfig) or "test_every" in algo:
        return
    algo.test_every = 1 if "num_test_episodes" in algo else 0
    if "num_test_episodes" not in algo:
        algo.num_test_episodes = 0
    if "stop_at_return" not in algo:
        algo.stop_at_return = None


def _add_network_keys(raw: DictConfig) -> None:
    """A run from before ``network.encoder`` read its observations as they were: an MLP (``mlp``)."""
    network = raw.get("network")
    if isinstance(network, DictConfig) and "encoder" not in network:
        network.encoder = "mlp"


def _add_value_target_key(raw: DictConfig) -> None:
    """An on-policy run from before ``algo.value_target`` trained its value function on the
    rewards-to-go, in minibatch mode too (where null now means the lambda-return)."""
    algo = raw.get("algo")
    if isinstance(algo, DictConfig) and "lam" in algo and "value_target" not in algo:
        algo.value_target = "rewards_to_go"


# keys whose preset value changes a run's numbers: what a run saved before the key existed did instead
OLD_VALUES = {
    ("backend", "flush_denormal"): False,
    ("backend", "compile"): False,
    ("backend", "compile_unroll"): 1,
}


def _add_later_group_keys(raw: DictConfig) -> None:
    """A run from before keys were added to the env, algo, tuned and comm groups trains on as it did:
    each missing key takes the value of the preset that introduced it, which keeps the old behaviour
    (the env pipeline from conf/config.yaml: no wrappers, no normalisation; the network's memory from
    there too: none; an algorithm's new keys from its conf/algo/ preset: all off; tuned: none;
    comm.nodes etc.: one node; a backend's from its conf/backend/ preset: TF's compile_bursts, which
    changes no number; but torch's flush_denormal, compile and compile_unroll, which change numbers, as they were: off,
    one compiled call a step)."""
    conf = Path(CONF_DIR)
    sources = {
        "env": OmegaConf.load(conf / "config.yaml").get("env"),
        "tuned": OmegaConf.load(conf / "tuned" / "none.yaml"),
        "comm": OmegaConf.load(conf / "comm" / "mpi.yaml"),
        "network": OmegaConf.load(conf / "config.yaml").get("network"),
    }
    for group in ("algo", "backend"):  # the chosen preset's file: an algorithm's, a backend's
        node = raw.get(group)
        preset = conf / group / f"{node.get('name')}.yaml" if isinstance(node, DictConfig) else None
        if preset is not None and preset.is_file():  # a plugin's algorithm: its own presets, not filled here
            sources[group] = OmegaConf.load(preset)
    for group, source in sources.items():
        if group not in raw:
            raw[group] = {}
        node = raw[group]
        if not isinstance(node, DictConfig) or source is None:
            continue
        for key in source:
            if key != "defaults" and key not in node:
                node[key] = OLD_VALUES.get((group, key), source[key])


def load_run_config(run_dir: str | Path) -> RLExpConfig:
    """The config of the run in ``run_dir`` (its :data:`CONFIG_FILE`), checked as :func:`load_config`
    does; a bad value is reported with the file's path."""
    try:
        return load_config(read_run_config(run_dir))
    except ConfigError as exc:
        raise ConfigError(f"{Path(run_dir) / CONFIG_FILE}: {exc}") from None
