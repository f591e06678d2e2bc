"""rlexp's Hydra launcher plugin (Hydra loads plugins only from the ``hydra_plugins`` namespace)."""
