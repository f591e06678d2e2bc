"""Packaging beyond what pyproject.toml can say: the repository's conf/ ships as the package rlexp.conf
(YAML presets only), so an installed rlexp runs from any directory. Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rlexp*", "hydra_plugins*"]), "rlexp.conf"],
    package_dir={"rlexp.conf": "conf"},
)
