"""A run's score: one number from its progress.txt (the ``score:`` keys of config.yaml).

Every job returns it to Hydra (so a sweeper such as ``hydra/sweeper=optuna`` can optimise it), and
:func:`rlexp.train` returns it with the run. The default is Spinning Up's Performance (the mean test
return where the algorithm runs test episodes, else the mean training return), averaged over the
last few epochs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rlexp.errors import RLExpError
from rlexp.schema import ScoreConfig

# Spinning Up's Performance: the first of these that the run logs
PERFORMANCE_COLUMNS = ("AverageTestEpRet", "AverageEpRet")


def score_column(progress: pd.DataFrame, cfg: ScoreConfig) -> str:
    """The column that ``cfg`` scores: ``score.column``, or the Performance column of the run."""
    if cfg.column is not None:
        if cfg.column not in progress.columns:
            raise RLExpError(
                f"score.column={cfg.column!r} is not a column of progress.txt; it has: "
                f"{', '.join(progress.columns)}"
            )
        return cfg.column
    logged = [col for col in PERFORMANCE_COLUMNS if col in progress.columns]
    if not logged:
        raise RLExpError(f"progress.txt has none of {', '.join(PERFORMANCE_COLUMNS)}; set score.column")
    # The first with a value (no episode may have ended yet: then the score is None)
    return next((col for col in logged if progress[col].notna().any()), logged[0])


def score(progress: pd.DataFrame, cfg: ScoreConfig) -> float | None:
    """``cfg.aggregate`` of the last ``cfg.last`` values of the scored column (None: no epoch yet)."""
    if progress.empty:
        return None
    values = progress[score_column(progress, cfg)].dropna().to_numpy(dtype=float)[-cfg.last :]
    if values.size == 0:
        return None
    if cfg.aggregate == "last":
        return float(values[-1])
    return float(getattr(np, cfg.aggregate)(values))


def run_score(run_dir: Path, cfg: ScoreConfig) -> float | None:
    """The score of the run in ``run_dir`` as its progress.txt stands now."""
    path = run_dir / "progress.txt"
    if not path.is_file():
        return None
    return score(pd.read_table(path), cfg)
