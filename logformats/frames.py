"""The two tables every source becomes: steps (one row per engine step or sample) and events.
Every reader here (logs, scrapes) and diagnostics' run-directory reader builds them.

Times are naive `datetime64[ns]` in the source's own clock (a log's local time, a run
directory's UTC); no time zone is invented. Column meanings are in rundir.schema.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rundir.schema import STEP_COLUMNS

_STEP_FIELDS = [name for name in STEP_COLUMNS if name not in ("t", "engine_age_s", "engine_life", "phase")]
STEP_FRAME_COLUMNS = ["t", "engine_life", "engine_age_s", "phase", *_STEP_FIELDS, "line"]
EVENT_FRAME_COLUMNS = [
    "t",
    "engine_life",
    "engine_age_s",
    "kind",
    "count",
    "new_tokens",
    "cached_tokens",
    "limit",
    "detail",
    "line",
]


def empty_steps() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=_dtype(name)) for name in STEP_FRAME_COLUMNS})


def empty_events() -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype=_dtype(name)) for name in EVENT_FRAME_COLUMNS})


def _dtype(name: str) -> str:
    if name == "t":
        return "datetime64[ns]"
    if name in ("phase", "kind", "detail"):
        return "object"
    if name in ("engine_life", "line"):
        return "int64"
    return "float64"


def assign_engine_lives(
    t: np.ndarray, is_start: np.ndarray, is_step: np.ndarray
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Engine life index and engine age (s) of each record, in time order.

    A startup record begins a new life only when steps happened since the previous one, so
    that the several lines an engine prints while starting (`Resolved config`, then `Cache
    rebuilt`) make one start, dated by the first. Records before any startup belong to life 0,
    aged from the first record; `age_known` says whether a startup preceded the first step.
    """
    n = len(t)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0), False
    steps_before = np.cumsum(is_step) - is_step  # steps strictly before each record
    boundaries: list[int] = []
    origins = [t[0]]
    age_known = False
    last = None
    for i in np.flatnonzero(is_start):
        if last is None and steps_before[i] == 0:
            origins[0], age_known, last = t[i], True, 0
        elif last is None or steps_before[i] > last:
            boundaries.append(int(i))
            origins.append(t[i])
            last = steps_before[i]
    lives = np.searchsorted(np.asarray(boundaries, dtype=np.int64), np.arange(n), side="right")
    ages = (t - np.asarray(origins)[lives]) / np.timedelta64(1, "s")
    return lives.astype(np.int64), ages.astype(float), age_known
