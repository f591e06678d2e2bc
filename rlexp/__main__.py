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

import hydra

from rlexp.config import CONF_DIR, normalize_overrides, register_configs, register_resolvers
from rlexp.errors import RLExpError
from rlexp.explain import user_message
from rlexp.fileio import drop_current_dir
from rlexp.launch import launch

register_configs()
register_resolvers()
_hydra_main = hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")(launch)


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
            import rlexp

            print(f"rlexp {rlexp.__version__} (Hydra {hydra.__version__})")
            return
        if any(arg in ("--help", "-h") for arg in sys.argv[1:]):  # rlexp's help; Hydra's: --hydra-help
            from rlexp.help import help_text

            print(help_text([a for a in sys.argv[1:] if a not in ("--help", "-h")]), end="")
            return
        sys.argv[1:] = normalize_overrides(sys.argv[1:])
        with contextlib.nullcontext() if _EARLY_STOP is not None else StopRequest():
            _hydra_main()
    except KeyboardInterrupt:
        print("rlexp: interrupted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:
        msg = None if full_error else user_message(exc)
        if msg is None:
            raise
        print(f"rlexp: error: {msg}", file=sys.stderr)
        sys.exit(exc.exit_code if isinstance(exc, RLExpError) else 2)


if __name__ == "__main__":
    main()
