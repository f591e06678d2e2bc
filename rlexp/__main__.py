"""``python -m rlexp [group=option ...] [key=value ...]``: the Hydra entry point.

Hydra composes the config from conf/ and runs :func:`rlexp.launch.launch` once per job (once, or
once per combination with --multirun). Errors a user can cause are reported as one line
(``rlexp: error: ...``) with exit status 2; set HYDRA_FULL_ERROR=1 to see the full stack trace.
"""

# ruff: noqa: E402 (the stop handler is installed before Hydra and the libraries are imported)
from __future__ import annotations

from rlexp.stopping import StopRequest

# First of all, as a program: a stop signal from now on is a clean stop (Hydra alone takes ~1 s to load).
_EARLY_STOP = StopRequest().__enter__() if __name__ == "__main__" else None

import contextlib
import os
import sys
from typing import Any

from rlexp.errors import RLExpError
from rlexp.fileio import drop_current_dir

# Hydra, the config schemas and the launcher are imported when a command needs them: --version needs
# none of them, --help no launcher (and no command imports torch or TensorFlow before a run starts).


def __getattr__(name: str) -> Any:
    """``CONF_DIR``, with rlexp's configs registered in Hydra's ConfigStore (what importing this
    module gave before its imports were deferred; tests compose configs with it)."""
    if name == "CONF_DIR":
        from rlexp.config import CONF_DIR, register_configs, register_resolvers

        register_configs()
        register_resolvers()
        return CONF_DIR
    raise AttributeError(f"module 'rlexp.__main__' has no attribute {name!r}")


def _hydra_main() -> None:
    """Hydra's entry point with rlexp's configs and :func:`rlexp.launch.launch` as the task."""
    import hydra

    from rlexp.launch import launch

    hydra.main(version_base="1.3", config_path=__getattr__("CONF_DIR"), config_name="config")(launch)()


def _version() -> str:
    """``rlexp X (Hydra Y)``, from the installed distributions (nothing imported)."""
    from importlib.metadata import PackageNotFoundError, version

    import rlexp

    try:
        hydra_version = version("hydra-core")
    except PackageNotFoundError:  # pragma: no cover (a dependency)
        hydra_version = "unknown"
    return f"rlexp {rlexp.__version__} (Hydra {hydra_version})"


def main() -> None:
    """Run Hydra; turn user errors into one line on stderr and a non-zero exit status."""
    # Nothing more is imported from the current directory (python -m put it first on the path): it may
    # be a downloaded run directory with .py files in it. A new run's `module:EnvId` env id still
    # imports its module from there (rlexp.envs), a resumed run's only with allow_env_import=true.
    drop_current_dir()
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra then raises instead of printing its own report
    try:
        if any(arg in ("--version", "-V") for arg in sys.argv[1:]):  # rlexp's version, Hydra's beside it
            print(_version())
            return
        if any(arg in ("--help", "-h") for arg in sys.argv[1:]):  # rlexp's help; Hydra's: --hydra-help
            from rlexp.help import help_text

            print(help_text([a for a in sys.argv[1:] if a not in ("--help", "-h")]), end="")
            return
        from rlexp.config import check_command_line, normalize_overrides

        check_command_line(sys.argv[1:])
        sys.argv[1:] = normalize_overrides(sys.argv[1:])
        with contextlib.nullcontext() if _EARLY_STOP is not None else StopRequest():
            _hydra_main()
    except KeyboardInterrupt:
        print("rlexp: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        from rlexp.explain import user_message

        msg = None if full_error else user_message(exc)
        if msg is None:
            raise
        print(f"rlexp: error: {msg}", file=sys.stderr)
        sys.exit(exc.exit_code if isinstance(exc, RLExpError) else 2)
    finally:
        from rlexp.worker import exit_fast

        exit_fast()


if __name__ == "__main__":
    main()
