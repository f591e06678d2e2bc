"""Environments: build a seeded gymnasium env from ``cfg.env`` and check it fits the algorithm."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import importlib
import importlib.machinery
import inspect
import os
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rlexp.errors import RLExpError
from rlexp.fileio import drop_current_dir
from rlexp.nn import (
    NATURE_CNN_MIN_SIZE,
    Image,
    image_layout,
    is_image_space,
    looks_like_image,
    minatar_cnn_features,
    nature_cnn_output,
)
from rlexp.schema import AlgoConfig, EnvConfig, NetworkConfig

# gymnasium 1.x warns on every v4 MuJoCo env; users chose v4 on purpose (Spinning Up comparisons).
warnings.filterwarnings(
    "ignore", message=r".*is out of date\. You should consider upgrading", module="gymnasium"
)


# gymnasium's env families whose packages are optional: the module an env's entry point starts with ->
# (the package that is missing, the gymnasium extra that installs it).
OPTIONAL_FAMILIES = {
    "gymnasium.envs.box2d": ("box2d", "box2d"),
    "gymnasium.envs.mujoco": ("mujoco", "mujoco"),
    "ale_py": ("ale-py", "atari"),
}
# The package to install for a module that failed to import, where the two names differ.
PACKAGE_OF_MODULE = {"Box2D": "box2d", "pygame": "pygame-ce", "ale_py": "ale-py", "minatar": "minatar"}
# Registry namespaces whose ids a package registers: namespace -> its module (registered on import), or
# module:function (registered by calling it).
NAMESPACE_MODULES = {"ALE": "ale_py", "MinAtar": "minatar.gym:register_envs"}


def missing_dependency(env_id: str, entry_point: str, exc: BaseException) -> RLExpError:
    """The one-line error for an env whose optional package is not installed.

    ``entry_point``: the env's entry point in the registry (its module names the family, e.g.
    Box2D); ``exc``: gymnasium's DependencyNotInstalled (its cause is the ImportError) or an ImportError.
    """
    cause = exc if isinstance(exc, ImportError) else exc.__cause__
    module = getattr(cause, "name", None) or ""
    family = next((v for k, v in OPTIONAL_FAMILIES.items() if entry_point.startswith(k)), None)
    if family is None:  # not one of gymnasium's families: its own message says what to install
        text = str(exc).splitlines()[0] if str(exc) else f"module {module!r} is missing"
        return RLExpError(f"env.id={env_id!r} needs a package that is not installed ({text})")
    package = PACKAGE_OF_MODULE.get(module.split(".")[0], family[0]) if module else family[0]
    return RLExpError(
        f'env.id={env_id!r} needs the optional package {package}: pip install "gymnasium[{family[1]}]"'
    )


def _register_namespace(env_id: str) -> None:
    """Import the package that registers the namespace of ``env_id`` (``ALE/Pong-v5``: ale_py;
    ``MinAtar/Breakout-v1``: minatar's register_envs), which gymnasium does not do itself. RLExpError
    naming the package to install if it is missing."""
    namespace = env_id.split("/", 1)[0] if "/" in env_id else None
    ref = NAMESPACE_MODULES.get(namespace or "")
    if ref is None:
        return
    module, _, function = ref.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise missing_dependency(env_id, module, exc) from None
    if function:
        getattr(loaded, function)()


def _route_mujoco_warnings() -> None:
    """Send MuJoCo's warnings to Python's warnings instead of a MUJOCO_LOG.TXT in the user's directory.

    The 'settotalmass is deprecated' warning comes from gymnasium's own model files: ignored.
    """
    import mujoco

    def warn(msg: str) -> None:
        if "settotalmass" not in msg:
            warnings.warn(f"MuJoCo: {msg.strip()}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(warn)


def _import_env_module(module: str, env_id: str, allow_local: bool) -> None:
    """Import the module of a ``module:EnvId`` id; from the current directory only if ``allow_local``."""
    saved = list(sys.path)
    if allow_local:
        sys.path.insert(0, os.getcwd())
    else:
        drop_current_dir()
    try:
        importlib.import_module(module)
    except ImportError as exc:
        if not allow_local and importlib.machinery.PathFinder.find_spec(module.split(".")[0], [os.getcwd()]):
            raise RLExpError(
                f"env.id={env_id!r}: module {module!r} is not installed, only in the current directory, and a "
                "loaded run imports no code from there (its code would run); if you trust it, pass "
                "allow_env_import=true (python -m rlexp resume=...) or --allow-env-import (test_policy)"
            ) from None
        raise RLExpError(f"env.id={env_id!r}: cannot import module {module!r} ({exc})") from None
    except Exception as exc:  # the module itself failed: the user's code, named in one line
        raise RLExpError(
            f"env.id={env_id!r}: importing module {module!r} failed ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        sys.path[:] = saved


def _import_module_of(ref: str, what: str, form: str, allow_local: bool) -> tuple[str, str]:
    """Import the module of ``ref`` (``module:Name``) and return (module, Name). ``what`` names the
    config value in errors, ``form`` the expected form; ``allow_local``: see :func:`_import_env_module`."""
    module, name = ref.split(":", 1)
    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise RLExpError(f"{what}: {module!r} is not a module name; use {form}")
    _import_env_module(module, ref, allow_local)
    return module, name


def _registered_id(env_id: str, allow_local: bool = True) -> str:
    """The registry id, after importing the module of a ``module:EnvId`` id. Raises RLExpError.

    ``allow_local``: the module may come from the current directory (False when loading a run that
    this command did not start: its config names the module, see ``allow_env_import``).
    """
    if ":" in env_id:
        _, env_id = _import_module_of(
            env_id, f"env.id={env_id!r}", "module:EnvId, e.g. my_envs:MyEnv-v0", allow_local
        )
    if env_id not in gym.registry:
        _register_namespace(env_id)
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=5, cutoff=0.6)
        hint = (
            f"close matches: {', '.join(close)}" if close else "see gymnasium.pprint_registry() for the ids"
        )
        raise RLExpError(f"env.id={env_id!r} is not registered with gymnasium ({hint})")
    return env_id


# gymnasium wrappers that keep statistics across episodes: a checkpoint cannot hold them, and each
# rank would normalise with its own numbers -> the rlexp key that does it right
STATEFUL_WRAPPERS = {
    "NormalizeObservation": "env.normalize_obs=true",
    "NormalizeReward": "env.normalize_reward=true",
}


def wrapper_specs(wrappers: Any, allow_env_import: bool = True) -> list[tuple[str, type, dict[str, Any]]]:
    """``env.wrappers`` as (name, class, kwargs) triples, checked without building an env.

    Each entry is a class name of ``gymnasium.wrappers`` (or ``module:Class``), alone or as a one-key
    mapping to its keyword arguments. RLExpError (one line) for an entry of another form, an unknown
    wrapper, a wrapper with cross-episode state, or keyword arguments its constructor does not take.
    """
    specs = []
    for i, entry in enumerate(list(wrappers or [])):
        if isinstance(entry, str):
            name, kwargs = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            name, kwargs = next(iter(entry.items()))
            kwargs = {} if kwargs is None else kwargs
        else:
            raise RLExpError(
                f"env.wrappers[{i}]={entry!r} is not a wrapper; use a class name (ClipAction) or a one-key "
                "mapping to its keyword arguments ({RescaleAction: {min_action: -1, max_action: 1}})"
            )
        if not isinstance(name, str) or not isinstance(kwargs, dict):
            raise RLExpError(
                f"env.wrappers[{i}]={entry!r}: the keyword arguments of {name!r} must be a mapping"
            )
        if name in STATEFUL_WRAPPERS:
            raise RLExpError(
                f"env.wrappers[{i}]={name} keeps statistics across episodes that checkpoints cannot hold and "
                f"ranks do not share; use {STATEFUL_WRAPPERS[name]} (pooled over ranks, checkpointed)"
            )
        cls = _wrapper_class(name, i, allow_env_import)
        try:
            inspect.signature(cls).bind(None, **kwargs)
        except TypeError as exc:
            raise RLExpError(f"env.wrappers[{i}]: {name} does not take {kwargs} ({exc})") from None
        specs.append((name, cls, dict(kwargs)))
    return specs


def _wrapper_class(name: str, index: int, allow_env_import: bool) -> type:
    """The wrapper class ``name``: gymnasium.wrappers.<name> (else rlexp.wrappers.<name>), or <Class> of
    module for ``module:Class``."""
    if ":" in name:
        module, attr = _import_module_of(
            name, f"env.wrappers[{index}]={name!r}", "module:Class", allow_env_import
        )
        cls = getattr(sys.modules[module], attr, None)
    else:
        import rlexp.wrappers

        cls = getattr(gym.wrappers, name, None) or getattr(rlexp.wrappers, name, None)
    if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper)):
        import rlexp.wrappers

        known = sorted(
            n
            for module in (gym.wrappers, rlexp.wrappers)
            for n in dir(module)
            if isinstance(getattr(module, n), type)
            and issubclass(getattr(module, n), gym.Wrapper)
            and getattr(module, n).__module__.startswith(module.__name__)
            and n not in STATEFUL_WRAPPERS
            and not n.endswith("V0")
        )
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        hint = (
            f"close matches: {', '.join(close)}" if close else f"gymnasium.wrappers has: {', '.join(known)}"
        )
        raise RLExpError(f"env.wrappers[{index}]={name!r} is not a gymnasium env wrapper ({hint})")
    return cls


def apply_wrappers(env: gym.Env, specs: list[tuple[str, type, dict[str, Any]]]) -> gym.Env:
    """``env`` wrapped by each of ``specs`` in order (one line naming the wrapper if one fails)."""
    for i, (name, cls, kwargs) in enumerate(specs):
        try:
            env = cls(env, **kwargs)
        except Exception as exc:
            message = str(exc).splitlines()[0] if str(exc) else ""
            raise RLExpError(
                f"env.wrappers[{i}]: {name}({kwargs}) cannot wrap {env.spec.id if env.spec else env} "
                f"({type(exc).__name__}: {message})"
            ) from None
    return env


def make_env(
    cfg: EnvConfig,
    seed: int | None = None,
    action_space_seed: int | None = None,
    allow_env_import: bool = True,
    **make_kwargs: Any,
) -> gym.Env:
    """A gymnasium env with ``cfg.wrappers`` applied and flat float observations, reset with ``seed`` and
    its action space seeded with ``action_space_seed`` (two streams of :class:`rlexp.seeding.RankSeeds`).

    ``cfg.frame_stack`` > 1 stacks that many observations on a new first axis (after the wrappers).
    Observations that are Box of any shape or Discrete are flattened to one float vector (Discrete
    becomes one-hot), except images (uint8 Box of rank >= 2, :func:`rlexp.nn.is_image_space`), which
    keep their shape: a CNN encodes them, and :func:`image_observations` refuses them for an MLP.
    ``cfg.max_ep_len`` replaces the env's own time limit when set.
    ``allow_env_import``: see :func:`_registered_id`.
    """
    env_id = _registered_id(cfg.id, allow_env_import)
    entry_point = str(gym.spec(env_id).entry_point)
    if "mujoco" in entry_point:
        _route_mujoco_warnings()
    kwargs = {**dict(cfg.kwargs), **make_kwargs}
    if cfg.max_ep_len is not None:
        kwargs["max_episode_steps"] = cfg.max_ep_len
    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.DependencyNotInstalled, ImportError) as exc:
        raise missing_dependency(cfg.id, entry_point, exc) from None
    except gym.error.Error as exc:
        raise RLExpError(f"env.id={cfg.id!r} cannot be made: {str(exc).splitlines()[0]}") from None
    except TypeError as exc:
        raise RLExpError(f"env.kwargs={dict(cfg.kwargs)} rejected by {env_id}: {exc}") from None
    env = apply_wrappers(env, wrapper_specs(cfg.wrappers, allow_env_import))
    if cfg.frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, cfg.frame_stack)
    obs_space = env.observation_space
    if isinstance(obs_space, (spaces.Box, spaces.Discrete)) and not (
        isinstance(obs_space, spaces.Box) and (len(obs_space.shape) == 1 or is_image_space(obs_space))
    ):
        env = gym.wrappers.FlattenObservation(env)
    if seed is not None:
        env.reset(seed=seed)
    if action_space_seed is not None:
        env.action_space.seed(action_space_seed)
    return env


# An env preset of each kind of action space, that a refused space suggests (algo=sac on the default CartPole-v1)
FITTING_ENVS: dict[type, tuple[str, str]] = {
    spaces.Box: ("Box", "Pendulum-v1"),
    spaces.Discrete: ("Discrete", "CartPole-v1"),
}


def check_spaces(
    algo: AlgoConfig, env_id: str, obs_space: spaces.Space, act_space: spaces.Space, option: str | None = None
) -> None:
    """Raise RLExpError naming the algorithm and the space unless ``algo`` supports both spaces.

    ``algo.BOUNDED_ACTIONS``: a Box action space must also have finite bounds (the policy is squashed into them).
    ``option``: the ``algo=`` option the user chose, named instead of the algorithm it runs (``qrdqn``).
    """
    name = option or algo.NAME
    if not isinstance(obs_space, (spaces.Box, spaces.Discrete)):
        raise RLExpError(
            f"{name} cannot handle the observation space {obs_space} of {env_id}; supported: Box, Discrete"
        )
    if not isinstance(act_space, algo.ACTION_SPACES):
        from rlexp.algos import ALGOS  # here: the registry imports the algorithms, which import this module
        from rlexp.config import algo_options

        names = ", ".join(s.__name__ for s in algo.ACTION_SPACES)
        able = {n for n, a in ALGOS.items() if isinstance(act_space, a.ACTION_SPACES)}
        # the algo= options a user can pick (presets such as qrdqn run dqn), and registered algorithms without one
        options = algo_options()
        takers = sorted({o for o, n in options.items() if n in able} | (able - set(options.values())))
        also = f" (for this space: {', '.join(takers)})" if takers else ""
        fitting = [e for space, e in FITTING_ENVS.items() if space in algo.ACTION_SPACES]
        also += f"; or an env with {fitting[0][0]} actions, e.g. env={fitting[0][1]}" if fitting else ""
        raise RLExpError(
            f"{name} cannot handle the action space {act_space} of {env_id}; supported: {names}{also}"
        )
    if getattr(algo, "use_sde", False) and not isinstance(act_space, spaces.Box):
        raise RLExpError(
            f"algo.use_sde=true needs a Box action space, but {env_id} has {act_space}; use algo.use_sde=false"
        )
    if (
        algo.BOUNDED_ACTIONS
        and isinstance(act_space, spaces.Box)
        and not (np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high)))
    ):
        raise RLExpError(f"{name} needs finite action bounds, but {env_id} has the action space {act_space}")
    if isinstance(act_space, spaces.Box):
        if len(act_space.shape) != 1:
            raise RLExpError(
                f"{name} needs a flat action vector, but {env_id} has the action space {act_space} "
                f"(shape {act_space.shape}); supported: Box of shape (n,)"
            )
        if np.any(act_space.high <= act_space.low):
            raise RLExpError(
                f"{env_id} has an action dimension with high <= low ({act_space}); every action "
                "dimension needs low < high"
            )


def image_observations(
    algo: AlgoConfig, network: NetworkConfig, env_id: str, obs_space: spaces.Space
) -> Image | None:
    """The layout of the image observations that ``network``'s encoder reads, or None for flat ones.

    Raises RLExpError (one line naming the observation space and what to choose) when the network
    and the observations do not fit: images with ``network.encoder=mlp`` (they are never flattened
    silently; ``algo.IMAGE_NETWORK`` is the preset to use, ``minatar_cnn`` for images under 36x36), flat
    observations with a CNN encoder, a stack of images (rank > 3), or images smaller than the Nature
    CNN's kernels reach (36x36). Every refusal names a fix that works.
    """
    image = image_layout(obs_space)
    if network.encoder == "mlp":
        if is_image_space(obs_space):
            small = image is not None and min(nature_cnn_output(*image.chw[1:])) < 1
            preset = "minatar_cnn" if small else algo.IMAGE_NETWORK  # the Nature CNN needs 36x36
            raise RLExpError(
                f"{env_id} has image observations {obs_space} and network.encoder=mlp would flatten them "
                f"into {int(np.prod(obs_space.shape))} raw inputs; use network={preset} (a CNN "
                "encoder), or flatten them in your env if an MLP is what you want"
            )
        return None
    if image is None:
        if is_image_space(obs_space):
            what, fix = "a stack of images", "merge the stack into the channels"
        elif looks_like_image(obs_space):
            what, fix = (
                "non-uint8 images",
                "give it uint8 pixels of 0-255 (a wrapper; the CNN scales them by 1/255)",
            )
        else:
            what, fix = "observations", "use an MLP network for them, e.g. network=mlp64x64_tanh"
        raise RLExpError(
            f"network.encoder={network.encoder} reads images (a uint8 Box of shape (H, W, C), (C, H, W) or "
            f"(H, W)), but {env_id} has {what} {obs_space}; {fix}"
        )
    _, height, width = image.chw
    image = dataclasses.replace(image, encoder=network.encoder)
    if network.encoder == "minatar_cnn":
        if minatar_cnn_features(image) < 1:
            raise RLExpError(
                f"network.encoder=minatar_cnn needs images of at least 3x3 pixels, but {env_id} has "
                f"{height}x{width} ({obs_space})"
            )
        return image
    if min(nature_cnn_output(height, width)) < 1:
        smallest = NATURE_CNN_MIN_SIZE
        raise RLExpError(
            f"network.encoder={network.encoder} needs images of at least {smallest}x{smallest} pixels, but "
            f"{env_id} has {height}x{width} ({obs_space}); use network=minatar_cnn (one 3x3 convolution, "
            "for small images) or render larger images"
        )
    return image


def flattened_image_warning(
    algo: AlgoConfig, network: NetworkConfig, env_id: str, obs_space: spaces.Space
) -> str | None:
    """The one-line warning for observations shaped like an image but not uint8 (float pixels, say)
    that an MLP reads flattened (:func:`rlexp.nn.looks_like_image`); None when there is nothing to say.
    They may be a tensor that is not an image, so they are not refused."""
    if network.encoder != "mlp" or not looks_like_image(obs_space):
        return None
    shape = obs_space.shape
    height, width = shape[:2] if shape[-1] in (1, 3, 4) else shape[1:]  # channels last, else first
    preset = "minatar_cnn" if min(nature_cnn_output(height, width)) < 1 else algo.IMAGE_NETWORK
    return (
        f"{env_id} has observations {obs_space} shaped like an image but not uint8; network.encoder=mlp "
        f"flattens them into {int(np.prod(obs_space.shape))} inputs. If they are images, give them as uint8 "
        f"pixels of 0-255 (a wrapper) and use a CNN network (network={preset})"
    )


def obs_dtype(obs_space: spaces.Space) -> Any:
    """How buffers store one observation: images as uint8 (a quarter of float32's memory; the network
    scales them), everything else as float32."""
    return np.uint8 if is_image_space(obs_space) else np.float32


def check_first_step(env: gym.Env, env_id: str, kwargs: Any) -> None:
    """Reset ``env`` and take one random step: an error there comes from the env's config (its
    kwargs, its id), so it is reported as one line naming the env and its kwargs."""
    try:
        env.reset(seed=0)
        env.step(env.action_space.sample())
    except Exception as exc:
        message = str(exc).splitlines()[0] if str(exc) else ""
        raise RLExpError(
            f"env.id={env_id!r} with env.kwargs={dict(kwargs)} fails on its first reset/step "
            f"({type(exc).__name__}: {message})"
        ) from None


def action_dims(act_space: spaces.Space) -> tuple[tuple[int, ...], Any]:
    """Shape and dtype of one stored action."""
    if isinstance(act_space, spaces.Discrete):
        return (), np.int64
    return act_space.shape, np.float32


class ActionAdapter:
    """Turns a policy's action into what ``env.step`` expects.

    Box: clipped to the space's real bounds, which may be asymmetric (the raw sample stays in the
    buffer, so log-probabilities are unaffected). Discrete: a Python int offset by the space's start.
    """

    def __init__(self, act_space: spaces.Space) -> None:
        self.discrete = isinstance(act_space, spaces.Discrete)
        if self.discrete:
            self.start = int(act_space.start)
        else:
            self.low, self.high = act_space.low, act_space.high

    def __call__(self, action: Any) -> Any:
        if self.discrete:
            return int(action) + self.start
        return np.clip(action, self.low, self.high)

    def batch(self, actions: np.ndarray) -> np.ndarray:
        """:meth:`__call__` of each row of ``actions`` (one per env), as one array."""
        if self.discrete:
            return actions.astype(np.int64) + self.start
        return np.minimum(np.maximum(actions, self.low), self.high)  # np.clip's numbers, at half its cost


class ActionScaler:
    """Maps actions in [-1, 1]^n (what off-policy policies output) to a Box's real bounds and back.

    Works for asymmetric and per-dimension bounds (Spinning Up used ``high[0]`` for every dimension),
    on one action or on a batch of them (one row per env): the arithmetic is elementwise.
    """

    def __init__(self, act_space: spaces.Box) -> None:
        low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
        self.center, self.half = (high + low) / 2, (high - low) / 2
        self.dtype = act_space.dtype
        # bounds of [-1, 1]: both maps are the identity (0 + 1 * a and (a - 0) / 1 are a, exactly)
        self.identity = bool(np.all(self.center == 0.0) and np.all(self.half == 1.0))

    def to_env(self, a: np.ndarray) -> np.ndarray:
        clipped = np.minimum(np.maximum(a, -1.0), 1.0)  # np.clip(a, -1, 1)'s numbers, at half its cost
        return (
            clipped.astype(self.dtype)
            if self.identity
            else (self.center + self.half * clipped).astype(self.dtype)
        )

    def normalize(self, a: np.ndarray) -> np.ndarray:
        return (
            np.asarray(a, np.float32) if self.identity else ((a - self.center) / self.half).astype(np.float32)
        )


def rng_state(env: gym.Env) -> dict[str, Any]:
    """The state of the env's own random generator (what its next ``reset()`` draws from)."""
    return env.unwrapped.np_random.bit_generator.state


def set_rng_state(env: gym.Env, state: dict[str, Any]) -> None:
    env.unwrapped.np_random.bit_generator.state = state


# The method of a wrapper whose env carries state from one episode into the next besides its generator
# (MinAtar's last action, which a sticky action repeats: rlexp.atari.MinAtarObservations), and the one
# that sets it back: RecordedEpisode records it at each reset and restores it before a replay.
CARRIED = "carried_state"
SET_CARRIED = "set_carried_state"


def carried_state(env: gym.Env) -> dict[str, Any] | None:
    """What ``env`` carries into its next episode besides its generator (None: nothing)."""
    return env.get_wrapper_attr(CARRIED)() if env.has_wrapper_attr(CARRIED) else None


# The info key of a step that ends an episode (terminated) while the game goes on: a lost life under
# rlexp.atari.EpisodicLife. The next reset() then continues the game instead of restarting it.
CONTINUES = "episode_continues"


class RecordedEpisode(gym.Wrapper):
    """The outermost wrapper of every training env: keeps what rebuilds its running episode exactly,
    for checkpoints and resume.

    gymnasium has no portable way to save an env's internal state (MuJoCo's physics, a time limit's
    counter, a wrapper's buffers). But a seeded env is deterministic: the same generator state at
    ``reset()`` and the same actions give the same episode. So this records the generator state
    before the episode's reset (or the seed it was reset with), what the env carries over from its
    last episode (:func:`carried_state`), and every action since, and :meth:`replay` repeats them (at
    most one episode, e.g. 1000 steps, about 0.1 s). It lives inside the env, so in an async vector env
    it records in the env's own process and only :meth:`episode_state` and :meth:`replay` cross the
    pipe (:class:`VectorEpisodes`).

    A game whose episodes end at each lost life (a step whose info has :data:`CONTINUES`, as
    :class:`rlexp.atari.EpisodicLife` gives) is one recording from the game's reset: the resets that
    continue it are recorded among its actions and replayed, and the return and length it reports are
    the whole game's, so a run logs game scores (:meth:`episode_stats`).
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.start: dict[str, Any] = {}
        self.actions: list[Any] = []
        self.soft_resets: list[int] = []  # positions in ``actions`` where a reset continued the game
        self.ret = 0.0  #: the running episode's (game's) return so far
        self.continues = False  # whether the last step ended an episode of a game that goes on
        #: the episode to rebuild at the next :meth:`replay` (set through the vector env's set_attr)
        self.replay_state: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if self.continues and seed is None:  # the game goes on: its recording too
            self.continues = False
            self.soft_resets.append(len(self.actions))
            return self.env.reset(options=options)
        self.start = {"seed": seed} if seed is not None else {"rng": rng_state(self.env)}
        carried = carried_state(self.env)
        if carried is not None:
            self.start["carried"] = carried
        self.actions, self.soft_resets, self.ret, self.continues = [], [], 0.0, False
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, ...]:
        self.actions.append(np.array(action))  # a copy: the caller may reuse its array
        result = self.env.step(action)
        self.ret += float(result[1])
        if result[2]:
            self.continues = bool(result[4].get(CONTINUES, False))
        return result

    def episode_stats(self) -> tuple[float, int] | None:
        """The running game's return and length so far; None right after a step that ended an
        episode of a game that goes on (a lost life: nothing to log yet)."""
        return None if self.continues else (self.ret, len(self.actions))

    def episode_state(self) -> dict[str, Any]:
        """The running episode: how it was reset (``start``), its actions since and where resets
        continued the game (``soft_resets``, only when there were some)."""
        discrete = isinstance(self.env.action_space, spaces.Discrete)
        shape = () if discrete else self.env.action_space.shape
        actions = np.asarray(self.actions, dtype=np.int64 if discrete else None).reshape(-1, *shape)
        state = {"start": self.start, "actions": actions}
        if self.soft_resets or self.continues:
            state["soft_resets"] = np.asarray(self.soft_resets, np.int64)
            state["continues"] = self.continues
        return state

    def replay(self) -> tuple[np.ndarray, float]:
        """Rebuild the episode of ``replay_state``; return its current observation and its return so far."""
        state, self.replay_state = self.replay_state, None
        assert state is not None, "replay() without a replay_state"
        start = state["start"]
        self.continues = False
        if "carried" in start:  # absent from checkpoints written before it was recorded
            self.env.get_wrapper_attr(SET_CARRIED)(start["carried"])
        if "seed" in start:
            obs = self.reset(seed=int(start["seed"]))[0]
        else:
            set_rng_state(self.env, start["rng"])
            obs = self.reset()[0]
        discrete = isinstance(self.env.action_space, spaces.Discrete)
        soft = {int(i) for i in np.asarray(state.get("soft_resets", []), np.int64).reshape(-1)}
        for i, a in enumerate(np.asarray(state["actions"])):
            if i in soft:
                self.continues = True
                obs = self.reset()[0]
            obs = self.step(int(a) if discrete else a)[0]
        if len(state["actions"]) in soft:  # a continued game before its first action
            self.continues = True
            obs = self.reset()[0]
        self.continues = bool(state.get("continues", False))
        return obs, self.ret


class SyncEnvs:
    """A rank's envs stepped one after the other in this process (``env.vector=sync``).

    What gymnasium's SyncVectorEnv does with autoreset disabled, and nothing more: it calls each env's
    ``step`` and ``reset`` and stacks their observations, rewards and flags into arrays (the
    observation space's dtype, float64 rewards, bool flags, as SyncVectorEnv's). It skips what rlexp
    never reads (the per-step merging of the envs' ``info`` dicts and the batched-space machinery),
    which cost more than a fast env's own step (issue 33).

    :param fns: one function per env that makes it.
    """

    def __init__(self, fns: list[Any]) -> None:
        self.envs: list[gym.Env] = [fn() for fn in fns]
        self.num_envs = len(self.envs)
        self.single_observation_space: spaces.Space = self.envs[0].observation_space
        self.single_action_space: spaces.Space = self.envs[0].action_space
        for env in self.envs[1:]:
            assert env.observation_space == self.single_observation_space, "envs with different spaces"
            assert env.action_space == self.single_action_space, "envs with different spaces"
        space = self.single_observation_space
        self._obs_shape, self._obs_dtype = (self.num_envs, *space.shape), space.dtype

    def reset(self, seeds: list[int | None], mask: np.ndarray | None = None) -> np.ndarray:
        """Reset every env with its seed, or (``mask``) only those where it is true; their first
        observations, one row per env (the others' rows are undefined)."""
        obs = np.empty(self._obs_shape, self._obs_dtype)
        for i, (env, seed) in enumerate(zip(self.envs, seeds, strict=True)):
            if mask is None or mask[i]:
                obs[i] = env.reset(seed=seed)[0]
        return obs

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        """One step of every env: observations, rewards, terminated and truncated flags, one row per env,
        and whether any episode ended."""
        n = self.num_envs
        obs = np.empty(self._obs_shape, self._obs_dtype)
        rew, terminated, truncated = np.empty(n), np.empty(n, np.bool_), np.empty(n, np.bool_)
        ended = False
        for i, env in enumerate(self.envs):
            obs[i], rew[i], te, tr, _ = env.step(actions[i])
            terminated[i], truncated[i] = te, tr
            ended = ended or te or tr
        return obs, rew, terminated, truncated, bool(ended)

    def call(self, name: str) -> list[Any]:
        """Each env's method ``name`` called (on the outermost wrapper, :class:`RecordedEpisode`)."""
        return [getattr(env, name)() for env in self.envs]

    def set_attr(self, name: str, values: list[Any]) -> None:
        for env, value in zip(self.envs, values, strict=True):
            setattr(env, name, value)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class AsyncEnvs:
    """A rank's envs each in its own process (``env.vector=async``): gymnasium's AsyncVectorEnv with
    autoreset disabled, behind :class:`SyncEnvs`'s methods. The processes start with ``forkserver``:
    a fresh interpreter, never a fork of an MPI rank."""

    def __init__(self, fns: list[Any]) -> None:
        mode = gym.vector.AutoresetMode.DISABLED
        self.vec = gym.vector.AsyncVectorEnv(fns, context="forkserver", autoreset_mode=mode)
        self.num_envs = self.vec.num_envs
        self.single_observation_space: spaces.Space = self.vec.single_observation_space
        self.single_action_space: spaces.Space = self.vec.single_action_space

    def reset(self, seeds: list[int | None], mask: np.ndarray | None = None) -> np.ndarray:
        if mask is None:
            return self.vec.reset(seed=seeds)[0]
        return self.vec.reset(options={"reset_mask": np.asarray(mask, np.bool_)})[0]

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        obs, rew, terminated, truncated, _ = self.vec.step(actions)
        return obs, rew, terminated, truncated, bool(terminated.any() or truncated.any())

    def call(self, name: str) -> list[Any]:
        return list(self.vec.call(name))

    def set_attr(self, name: str, values: list[Any]) -> None:
        self.vec.set_attr(name, values)

    def close(self) -> None:
        self.vec.close()


class VectorEpisodes:
    """This rank's ``env.num_envs`` training envs (``env.vector``: :class:`SyncEnvs` in this process, or
    :class:`AsyncEnvs`, one process per env) and the return and length of each env's running episode.

    gymnasium 1.x's vector envs reset an env that ended on the *next* ``step()`` call, which ignores
    that call's action for it (and reports a reward of 0). This one runs with autoreset disabled and
    :meth:`reset_ended` resets the envs that ended right after the step that ended them, as a single
    env loop does: every ``step()`` is a real env step of every env, so each one counts in
    ``steps_per_epoch``, is stored and is learned from, and the final observation of an episode is
    the one the step returned (the bootstrap value of a truncated episode).

    Exact resume: :meth:`state_dict` holds each env's episode (:class:`RecordedEpisode`) and the
    generators of the action samplers; :meth:`load_state_dict` replays them in their envs.

    :param envs: the envs (:class:`SyncEnvs` or :class:`AsyncEnvs`), each wrapped last in
        :class:`RecordedEpisode`.
    :param action_space_seeds: one seed per env for its action sampler (:meth:`sample_actions`).
    :param env_id: the envs' id, for messages.
    """

    def __init__(self, envs: SyncEnvs | AsyncEnvs, action_space_seeds: list[int], env_id: str) -> None:
        self.envs, self.num_envs, self.env_id = envs, envs.num_envs, env_id
        self.observation_space: spaces.Space = envs.single_observation_space
        self.action_space: spaces.Space = envs.single_action_space
        self.samplers = [copy.deepcopy(self.action_space) for _ in range(self.num_envs)]
        for sampler, seed in zip(self.samplers, action_space_seeds, strict=True):
            sampler.seed(seed)
        box = self.action_space
        uniform = isinstance(box, spaces.Box) and box.dtype.kind == "f" and box.is_bounded("both")
        #: (low, high - low, dtype) of a bounded float Box action space, in float64: sampled directly
        low = box.low.astype(np.float64) if uniform else None
        self._uniform = (low, box.high.astype(np.float64) - low, box.dtype) if uniform else None
        #: whether an episode ended in the last step (then :meth:`episodes` and :meth:`reset_ended`)
        self.any_ended = False

    def reset(self, seeds: list[int]) -> np.ndarray:
        """Reset every env with its seed; return the first observations (one row per env)."""
        return self.envs.reset(seeds)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One step of every env (``actions``: one row per env, as the env takes them); return the
        observations, rewards, terminated and truncated flags, one row per env (:attr:`any_ended`
        says whether any flag is set)."""
        obs, rew, terminated, truncated, self.any_ended = self.envs.step(actions)
        return obs, rew, terminated, truncated

    def episodes(self) -> list[tuple[float, int] | None]:
        """The return and length of each env's running episode (of an ended one: the whole episode,
        until :meth:`reset_ended`); None for an env whose episode ended at a lost life of a game that
        goes on (:data:`CONTINUES`): its game is logged when it is over."""
        return self.envs.call("episode_stats")

    def reset_ended(self, ended: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Reset the envs where ``ended``; return ``obs`` with their rows replaced by the new first
        observations (their episodes restart)."""
        if not ended.any():
            return obs
        first = self.envs.reset([None] * self.num_envs, mask=ended)
        obs = obs.copy()
        obs[ended] = first[ended]
        return obs

    def sample_actions(self) -> np.ndarray:
        """One uniformly random action per env (the off-policy loop's warm-up), each env's from its sampler.

        For a bounded float Box, the numbers ``Box.sample`` draws (``Generator.uniform``: ``low + (high -
        low) * random()`` in float64, from the same generator) without its per-call bookkeeping of
        unbounded dimensions."""
        if self._uniform is not None:
            low, span, dtype = self._uniform
            return np.stack([low + span * s.np_random.random(low.shape) for s in self.samplers]).astype(dtype)
        return np.stack([sampler.sample() for sampler in self.samplers])

    def state_dict(self, obs: np.ndarray) -> dict[str, Any]:
        """Every env's running episode (``obs``: their current observations, checked on replay)."""
        return {
            "episodes": list(self.envs.call("episode_state")),
            "obs": np.asarray(obs),
            "action_space_rng": [s.np_random.bit_generator.state for s in self.samplers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> np.ndarray:
        """Replay every env's recorded episode (its return too); return their current observations.

        RLExpError if an observation differs from the recorded one. Also reads the one-env state of
        checkpoints written before vector envs (one episode, not a list).
        """
        if "episodes" not in state:  # before env.num_envs: one env's episode
            state = {
                "episodes": [{"start": state["start"], "actions": state["actions"]}],
                "obs": np.asarray(state["obs"])[None],
                "action_space_rng": [state["action_space_rng"]],
            }
        episodes = state["episodes"]
        self.envs.set_attr("replay_state", list(episodes))
        replayed = self.envs.call("replay")
        obs = np.stack([np.asarray(o) for o, _ in replayed])
        if not np.array_equal(obs, np.asarray(state["obs"])):
            raise RLExpError(
                f"env {self.env_id} did not replay its episode identically, "
                "so this run cannot continue exactly from its checkpoint"
            )
        for sampler, rng in zip(self.samplers, state["action_space_rng"], strict=True):
            sampler.np_random.bit_generator.state = rng
        return obs

    def close(self) -> None:
        self.envs.close()


def _recorded_env(cfg: EnvConfig, allow_env_import: bool) -> gym.Env:
    """One training env (what :func:`make_vector_env` hands the vector env to build in each slot)."""
    return RecordedEpisode(make_env(cfg, allow_env_import=allow_env_import))


def make_vector_env(cfg: EnvConfig, action_space_seeds: list[int], allow_env_import: bool) -> VectorEpisodes:
    """This rank's ``cfg.num_envs`` training envs, each :func:`make_env` (not reset yet: call
    :meth:`VectorEpisodes.reset` or :meth:`VectorEpisodes.load_state_dict`).

    ``cfg.vector``: ``sync`` steps the envs one after the other in this process; ``async`` steps each
    in its own process (worth it when an env step costs more than the pipe, e.g. MuJoCo with several
    envs per rank). The processes start with ``forkserver``: a fresh interpreter, never a fork of an
    MPI rank.
    """
    fns = [functools.partial(_recorded_env, cfg, allow_env_import) for _ in range(cfg.num_envs)]
    envs = AsyncEnvs(fns) if cfg.vector == "async" else SyncEnvs(fns)
    return VectorEpisodes(envs, action_space_seeds, cfg.id)
