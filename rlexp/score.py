"""A run's score: one number from its progress.txt (the ``score:`` keys of config.yaml).

Every job returns it to Hydra (so a sweeper such as ``hydra/sweeper=optuna`` can optimise it), and
:func:`rlexp.train` returns it with the run. The default is Spinning Up's Performance (the mean test
return where the algorithm runs test episodes, else the mean training return), averaged over the
last few epochs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.errors import RLExpError
from rlexp.schema import ScoreConfig

#: progress.txt as columns: a pandas DataFrame, or the dict of arrays that :func:`read_progress` gives
#: (pandas, a 0.5 s import, is not needed to score a run)
Table = Any

# Spinning Up's Performance: the first of these that the run logs
PERFORMANCE_COLUMNS = ("AverageTestEpRet", "AverageEpRet")


def read_progress(path: Path) -> dict[str, np.ndarray]:
    """A progress.txt as ``{column: float64 values}`` (an empty or non-numeric cell is NaN), as
    ``pandas.read_table`` reads it for scoring, without importing pandas."""
    lines = path.read_text().splitlines()
    if not lines:
        return {}
    header = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:] if line]
    return {
        col: np.array([_number(row[i]) if i < len(row) else math.nan for row in rows])
        for i, col in enumerate(header)
    }


def _number(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def _values(progress: Table, column: str) -> np.ndarray:
    return np.asarray(progress[column], dtype=float)


def score_column(progress: Table, cfg: ScoreConfig) -> str:
    """The column that ``cfg`` scores: ``score.column``, or the Performance column of the run."""
    columns: Sequence[str] = list(progress.keys())
    if cfg.column is not None:
        if cfg.column not in columns:
            raise RLExpError(
                f"score.column={cfg.column!r} is not a column of progress.txt; it has: {', '.join(columns)}"
            )
        return cfg.column
    logged = [col for col in PERFORMANCE_COLUMNS if col in columns]
    if not logged:
        raise RLExpError(f"progress.txt has none of {', '.join(PERFORMANCE_COLUMNS)}; set score.column")
    # The first with a value (no episode may have ended yet: then the score is None)
    return next((col for col in logged if not np.isnan(_values(progress, col)).all()), logged[0])


def score(progress: Table, cfg: ScoreConfig) -> float | None:
    """``cfg.aggregate`` of the last ``cfg.last`` values of the scored column (None: no epoch yet).

    ``progress``: a DataFrame of progress.txt or :func:`read_progress`'s columns."""
    columns = list(progress.keys())
    if not columns or len(progress[columns[0]]) == 0:
        return None
    values = _values(progress, score_column(progress, cfg))
    values = values[~np.isnan(values)][-cfg.last :]
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
    return score(read_progress(path), cfg)
