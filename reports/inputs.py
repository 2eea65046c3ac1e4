"""What every report verb starts from: a source, its analysis, and the files around it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.analysis import analyze
from diagnostics.result import Analysis
from diagnostics.source.source import Source, load_source
from rundir import schema


class Inputs(NamedTuple):
    source: Source
    analysis: Analysis

    @property
    def name(self) -> str:
        """A short name for the run or log: the run id, else the file name."""
        m = self.source.manifest
        return m.run_id if m is not None else Path(self.source.path).name

    @property
    def engine_log(self) -> Path | None:
        """The engine's own log: the source itself for a log, engine.log in a run directory."""
        path = Path(self.source.path)
        if self.source.kind == "log":
            return path
        if self.source.kind == "run_dir" and (path / schema.ENGINE_LOG).is_file():
            return path / schema.ENGINE_LOG
        return None

    @property
    def command(self) -> list[str] | None:
        """The soak's command line as its manifest recorded it (run directories only)."""
        m = self.source.manifest
        return [str(x) for x in m.command] if m is not None and m.command else None

    @property
    def profiles(self) -> list[Path]:
        folder = Path(self.source.path) / schema.PROFILES
        if self.source.kind != "run_dir" or not folder.is_dir():
            return []
        return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix == ".json")


def load(path: Path | str, date: dt.date | None = None, year: int | None = None) -> Inputs:
    source = load_source(path, date=date, year=year)
    return Inputs(source, analyze(source))


def model_life_samples(a: Analysis) -> pd.DataFrame:
    """The samples the change points were found on: usable, matched, in the healthy model's engine life.

    `a.changepoints.segments` index into this frame's rows.
    """
    s = a.samples
    if a.model is None or s.empty:
        return s.iloc[:0]
    keep = (s["excluded"] == "") & s["matched"] & s["residual"].notna() & (s["engine_life"] == a.model.engine_life)
    return s[keep]


def restarts(source: Source) -> list[np.datetime64]:
    """When each engine life after the first began: its engine_start event, else its first row."""
    steps = source.steps
    if steps.empty:
        return []
    span = steps.groupby("engine_life")["t"].agg(["min", "max"]).sort_index()
    starts = source.events.loc[source.events["kind"].isin(schema.STARTUP_KINDS), "t"]
    out = []
    for (_, prev), (_, row) in zip(span.iloc[:-1].iterrows(), span.iloc[1:].iterrows()):
        between = starts[(starts > prev["max"]) & (starts <= row["min"])]
        out.append((between.iloc[0] if len(between) else row["min"]).to_datetime64())
    return out
