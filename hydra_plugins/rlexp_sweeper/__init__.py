"""rlexp's Hydra sweeper plugin (Hydra loads plugins only from the ``hydra_plugins`` namespace)."""
