"""Packaging beyond what pyproject.toml can say: the repository's conf/ ships as the package rlexp.conf
(YAML presets only), so an installed rlexp runs from any directory. Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    # hydra_plugins is a namespace package (no __init__.py): Hydra finds every plugin below it
    packages=[
        *find_namespace_packages(include=["rlexp*", "hydra_plugins*"], exclude=["*.__pycache__"]),
        "rlexp.conf",
    ],
    package_dir={"rlexp.conf": "conf"},
)
