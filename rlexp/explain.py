"""One line for an exception a user caused: Hydra's and OmegaConf's errors, submitit's SLURM failures,
rlexp's own; None for anything else (a bug, which keeps its traceback).

Shared by the command line (``python -m rlexp``) and the Python API (:func:`rlexp.train`), so both
report a user error in the same words.
"""

from __future__ import annotations

import difflib
import re

from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from rlexp.config import explain_error, unknown_key
from rlexp.errors import RLExpError, user_error
from rlexp.plot import ENV_ID_SHAPE


def slurm_failure(text: str) -> str:
    """One line from the message of a submitit error: sbatch refusing the job, a job that raised, or a
    job that ended without a result (its error stream is in ``text``). rlexp's own error line wins."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    refused = [line.split("error:", 1)[-1].strip() for line in lines if line.startswith("sbatch:")]
    if refused:
        return f"SLURM refused the job: sbatch: {'; '.join(refused)}"
    head = re.match(r"Job (?:(\S+) )?\(task[:=] ?(\d+)\)", lines[0]) if lines else None
    job = "a SLURM job"
    if head is not None:  # "Job 17 (task: 0) with path ..." or, for a job that raised, "Job (task=0) ..."
        job = f"SLURM job {head[1]} (task {head[2]})" if head[1] else f"a SLURM job (task {head[2]})"
    ours = [line.removeprefix("rlexp: error: ") for line in lines if line.startswith("rlexp: error")]
    logs = [line.removeprefix("- ") for line in lines if line.startswith("- /")]
    logs += [line.split("stdout: ", 1)[1] for line in lines if "Look at stdout: " in line]
    where = f" (logs: {logs[-1]})" if logs else ""
    if ours:
        return f"{job} failed: {ours[-1]}{where}"
    state = re.search(r"\(state: ([^)]*)\)", text)
    if state:
        return f"{job} ended without a result (state {state[1]}){where}"
    # A job that raised: the exception's own line is the last one of its traceback.
    body = [line for line in lines[1:] if not line.startswith(("---", "You can check", "- "))]
    return f"{job} failed: {body[-1] if body else 'no error message'}{where}"


# The env presets that take a namespaced gymnasium id (env=ALE/Pong-v5 means env=atari env.id=ALE/Pong-v5)
NAMESPACE_PRESETS = {"ALE": "atari", "MinAtar": "minatar"}


def unknown_option(group: str, option: str, options: list[str]) -> str:
    """The line for ``group=option`` where the group has no such preset: the options, the close ones
    first. An env id given as a preset is turned into the preset that takes it: ``env=ALE/Pong-v5``
    (which Hydra reads as the option Pong-v5 of a group env/ALE) into ``env=atari env.id=ALE/Pong-v5``,
    any other id into ``env=gym env.id=...``."""
    if group.startswith("env/"):
        env_id = f"{group.removeprefix('env/')}/{option}"
        preset = NAMESPACE_PRESETS.get(env_id.split("/", 1)[0], "gym")
        return (
            f"env={env_id} is not an env preset; an env id goes in env.id: env={preset} env.id={env_id} "
            f"(env presets: {', '.join(options)})"
        )
    lower = {o.lower(): o for o in options}  # algo=SAC, env=cartpole
    close = [lower[c] for c in difflib.get_close_matches(option.lower(), list(lower), n=3, cutoff=0.6)]
    hint = f" (close matches: {', '.join(f'{group}={c}' for c in close)})" if close else ""
    if group == "env" and not close and ENV_ID_SHAPE.fullmatch(option):  # named as a gymnasium id is
        hint = f" (any gymnasium id: env=gym env.id={option})"
    return f"unknown {group} option {option!r}{hint}; choose one of: {', '.join(options)}"


def user_message(exc: BaseException) -> str | None:
    """One line for an error the user can fix, or None for a bug (which keeps its traceback)."""
    if isinstance(exc, RLExpError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:  # Hydra making hydra.run.dir, say
        return user_error(exc)
    if type(exc).__module__.startswith("submitit") and isinstance(exc, RuntimeError):
        return slurm_failure(str(exc))
    if isinstance(exc, MissingConfigException) and exc.options is not None and exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        return unknown_option(group, option, list(exc.options))
    several = re.match(r"Ambiguous value for argument '([^'=]+)=([^']*)'", str(exc))
    if isinstance(exc, HydraException) and several:  # seed=0,1 without --multirun
        key, values = several.groups()
        return (
            f"{key}={values} has several values: a sweep over them needs --multirun (python -m rlexp "
            f"--multirun {key}={values}); a list is written {key}=[{values}]"
        )
    if isinstance(exc, OverrideParseException):
        return f"bad override syntax: {str(exc).splitlines()[0]} (see hydra.cc override grammar)"
    cause = exc.__cause__
    tuned = re.match(r"In 'tuned_preset/(\w+)/.*full_key: (\S+)", str(exc), re.DOTALL)
    if isinstance(exc, HydraException) and tuned:  # tuned=ppo with algo=sac: a key the algo does not have
        name, key = tuned.groups()
        return f"tuned={name} holds settings of algo={name} ({key} is not a key of the chosen algo); use algo={name}"
    if isinstance(exc, ConfigCompositionException) and isinstance(
        cause, (ConfigAttributeError, ConfigKeyError)
    ):
        return unknown_key(cause) or explain_error(cause)
    if isinstance(exc, ConfigCompositionException) and isinstance(cause, OmegaConfBaseException):
        return explain_error(cause)
    if isinstance(exc, HydraException) and isinstance(exc.__cause__, RLExpError):
        return str(exc.__cause__)  # raised while Hydra instantiated one of rlexp's plugins (a sweeper)
    if isinstance(exc, HydraException):
        return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, OmegaConfBaseException):
        return explain_error(exc)
    return None
