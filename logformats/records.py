"""What every log reader fills: records column-wise, then the steps and events tables.

A record is one step row or one event, with the number of the line it came from. Columns are
sparse: each holds the indices of the records that have it and their values, so a reader
puts only what a line says. `finish` turns them, with one time per record, into the tables of
logformats.frames; a record whose time is impossible (NaT) is dropped and counted.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from logformats.frames import EVENT_FRAME_COLUMNS, STEP_FRAME_COLUMNS, assign_engine_lives
from logformats.text import Readable
from rundir.schema import StepPhase

logger = logging.getLogger(__name__)

STEP_KINDS = (StepPhase.PREFILL, StepPhase.DECODE, StepPhase.MIXED, StepPhase.IDLE)  # the records that are steps
FIGURES = "figures"  # a record of figures a process states now and then: neither a step nor an event
FIGURE_META = ("t", "engine_life", "engine_age_s")  # the figures table's columns before the figures
MAX_WARNINGS = 5  # per kind of problem and file; the rest only count


class Records:
    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.linenos: list[int] = []
        self.idx: dict[str, list[int]] = {}
        self.val: dict[str, list[Any]] = {}

    def add(self, lineno: int, kind: str) -> int:
        self.kinds.append(kind)
        self.linenos.append(lineno)
        return len(self.kinds) - 1

    def put(self, i: int, column: str, value: Any) -> None:
        if column not in self.idx:
            self.idx[column], self.val[column] = [], []
        self.idx[column].append(i)
        self.val[column].append(value)

    def columns(self) -> dict[str, np.ndarray]:
        n = len(self.kinds)
        out: dict[str, np.ndarray] = {}
        for column, idx in self.idx.items():
            arr = np.full(n, None, dtype=object) if column == "detail" else np.full(n, np.nan)
            arr[np.asarray(idx, dtype=np.int64)] = self.val[column]
            out[column] = arr
        return out


class Frames(NamedTuple):
    steps: pd.DataFrame
    events: pd.DataFrame
    age_known: bool
    num_bad_lines: int  # records dropped for an impossible time (their distinct lines)
    num_dropped_steps: int  # step records among them
    num_bad_values: int  # numbers that did not fit a float (inf) and were left empty
    figures: pd.DataFrame  # FIGURE_META, then each figure the figures records state (a snapshots table)


def finish(
    times: np.ndarray, kinds: list[str], linenos: list[int], columns: dict[str, np.ndarray], path: Readable
) -> Frames:
    """The steps and events tables, in time order, with engine lives and ages."""
    table = pd.DataFrame(
        {
            "t": np.asarray(times).astype("datetime64[ns]"),
            "kind": np.array(kinds, dtype=object),
            "line": np.asarray(linenos, dtype=np.int64),
            **columns,
        }
    )
    bad = table["t"].isna().to_numpy()
    num_bad_lines = num_dropped_steps = 0
    if bad.any():
        lines = table.loc[bad, "line"]
        num_bad_lines = int(lines.nunique())
        num_dropped_steps = int(table.loc[bad, "kind"].isin(STEP_KINDS).sum())
        for lineno in lines.unique()[:MAX_WARNINGS]:
            logger.warning("%s:%d: expected a time, found an impossible one; line skipped", path, lineno)
        table = table[~bad].reset_index(drop=True)
    num_bad_values = 0
    for column in table.columns:
        if column in ("t", "kind", "line", "detail"):
            continue
        values = table[column].to_numpy(dtype=float)
        infinite = np.isinf(values)
        if infinite.any():
            num_bad_values += int(infinite.sum())
            for lineno in table.loc[infinite, "line"].unique()[:MAX_WARNINGS]:
                logger.warning("%s:%d: %s does not fit a number; field left empty", path, lineno, column)
            table.loc[infinite, column] = np.nan
    # Stable sort: a log is almost always in order; equal times keep file order.
    table = table.sort_values("t", kind="stable", ignore_index=True)
    is_step = table["kind"].isin(STEP_KINDS).to_numpy()
    lives, ages, age_known = assign_engine_lives(
        table["t"].to_numpy(), (table["kind"] == "engine_start").to_numpy(), is_step
    )
    table["engine_life"] = lives
    table["engine_age_s"] = ages
    steps = table[is_step].rename(columns={"kind": "phase"}).reindex(columns=STEP_FRAME_COLUMNS)
    if "full_token_usage" in steps and steps["token_usage"].isna().all():
        steps["token_usage"] = steps["full_token_usage"]
    is_figures = (table["kind"] == FIGURES).to_numpy()
    events = table[~is_step & ~is_figures].reindex(columns=EVENT_FRAME_COLUMNS)
    return Frames(
        steps=steps.reset_index(drop=True),
        events=events.reset_index(drop=True),
        age_known=age_known,
        num_bad_lines=num_bad_lines,
        num_dropped_steps=num_dropped_steps,
        num_bad_values=num_bad_values,
        figures=_figures(table[is_figures]),
    )


def _figures(rows: pd.DataFrame) -> pd.DataFrame:
    """The figures records as a snapshots table: their time, engine life and age, and every column
    they state."""
    stated = [c for c in rows.columns if c not in (*FIGURE_META, "kind", "line", "detail") and rows[c].notna().any()]
    return rows[[*FIGURE_META, *stated]].reset_index(drop=True)
