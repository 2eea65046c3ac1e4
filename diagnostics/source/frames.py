"""Helpers over the step and event frames (their columns: logformats.frames)."""

from __future__ import annotations

import math

import pandas as pd


def first_life_ends(
    df: pd.DataFrame, time_col: str, early_fraction: float, late_fraction: float, min_rows: int
) -> tuple[pd.DataFrame, int, int] | None:
    """The rows of `df`'s first engine life in time order, and how many of them are early and
    late (`ceil(fraction * rows)` each); None when either is below `min_rows`. Early against
    late within one life is how prefix reuse and prefill time judge a run."""
    life = df[df["engine_life"] == df["engine_life"].min()].sort_values(time_col, kind="stable")
    n = len(life)
    num_early, num_late = math.ceil(early_fraction * n), math.ceil(late_fraction * n)
    if num_early < min_rows or num_late < min_rows:
        return None
    return life, num_early, num_late
