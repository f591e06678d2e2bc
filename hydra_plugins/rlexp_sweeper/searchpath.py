"""Hydra finds the YAML presets of installed rlexp plugins (packages that add algorithms through the
``rlexp.algos`` entry-point group): each plugin's ``conf/`` folder joins the config search path after
rlexp's own, so ``algo=<plugin's name>`` composes like a built-in preset (docs/plugins.md)."""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class RLExpPluginSearchPath(SearchPathPlugin):
    """Appends the ``conf/`` folder of every rlexp plugin package to Hydra's search path."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        from rlexp.algos import plugin_conf_dirs

        for conf in plugin_conf_dirs():
            search_path.append(provider=f"rlexp-plugin:{conf.parent.name}", path=f"file://{conf}")
