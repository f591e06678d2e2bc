"""The algorithm registry: ``ALGOS`` maps each ``algo=NAME`` to its config class.

Every package below this one is an algorithm: its ``__init__.py`` defines the algorithm's config
class (a subclass of :class:`rlexp.schema.AlgoConfig` with a ``NAME``), which is both the schema of
``conf/algo/<name>.yaml`` and the algorithm's description: its family (through its base class), the
action spaces it supports, the statistics it logs and its learner per backend, all as real
references. Adding an algorithm touches its YAML preset and its package, nothing else. Nothing here
imports a deep-learning library: each learner module is imported only when its class is asked for.

Algorithms of other installed packages join through the entry-point group ``rlexp.algos`` (each entry
names a config class); their YAML presets are found in the ``conf/`` folder of the entry's package
(:func:`plugin_conf_dirs`; see docs/plugins.md). The launcher, every MPI rank and test_policy build
this registry alike, so a plugin's algorithm works wherever a built-in one does.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import pkgutil
import sys
from pathlib import Path

from rlexp.schema import AlgoConfig

ENTRY_POINT_GROUP = "rlexp.algos"  # installed packages add algorithms here: name = "module:ConfigClass"


def _discover() -> dict[str, type[AlgoConfig]]:
    """NAME -> config class of every algorithm package below rlexp.algos."""
    found: dict[str, type[AlgoConfig]] = {}
    for info in pkgutil.iter_modules(__path__, f"{__name__}."):
        if not info.ispkg:
            continue  # the family loops and learner bases
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, AlgoConfig) and obj.__module__ == info.name:
                found[obj.NAME] = obj
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:  # a broken plugin must not stop every rlexp command
            _warn(f"entry point {ep.name} = {ep.value} of group {ENTRY_POINT_GROUP} cannot be loaded ({exc})")
            continue
        if not (isinstance(obj, type) and issubclass(obj, AlgoConfig) and obj.NAME):
            _warn(f"entry point {ep.name} = {ep.value} is not an AlgoConfig subclass with a NAME; left out")
        elif obj.NAME in found and found[obj.NAME] is not obj:
            _warn(f"entry point {ep.name} = {ep.value}: algo {obj.NAME!r} exists already; left out")
        else:
            found[obj.NAME] = obj
    return dict(sorted(found.items()))


def _warn(message: str) -> None:
    print(f"rlexp: warning: {message}", file=sys.stderr, flush=True)


def plugin_conf_dirs() -> list[Path]:
    """The ``conf/`` folders of the packages that add algorithms (their YAML presets, e.g.
    ``conf/algo/<name>.yaml``), in entry-point order; Hydra searches them after rlexp's own."""
    dirs: list[Path] = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = importlib.util.find_spec(ep.module)
        except (ImportError, ValueError):
            continue
        if spec is None or spec.origin is None:
            continue
        if spec.submodule_search_locations is None and "." not in ep.module:
            continue  # a top-level module file: its folder is site-packages, not the plugin's
        conf = Path(spec.origin).parent / "conf"
        if conf.is_dir() and conf not in dirs:
            dirs.append(conf)
    return dirs


ALGOS: dict[str, type[AlgoConfig]] = _discover()
