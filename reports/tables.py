"""Tables the pages show beside the analysis: matched bands, probes per life, events, log lines.

Each is computed from the analysis' own samples and the source's tables, never re-deciding
anything the analysis decided.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words.said import stamp
from logformats import looks_like_log, parse_log
from logformats.errors import LogFormatError
from reports.inputs import Inputs
from rundir.schema import STARTUP_KINDS

MAX_BANDS = 12
MAX_EVENTS = 60
LOG_CONTEXT = 8  # log lines shown either side of the trigger
MAX_CLOCK_GAP_S = 60.0  # a run's engine.log line this close to the onset is its line
QUIET_EVENTS = ("probe",)  # too many to list; the probe plot shows them


class BandRow(NamedTuple):
    batch: str
    context: str  # the band's range of context tokens
    num_early: int
    early_tps: float
    num_late: int
    late_tps: float

    @property
    def ratio(self) -> float:
        return self.late_tps / self.early_tps


class ProbeLife(NamedTuple):
    engine_life: int
    num_probes: int
    first_tps: float  # median of the life's first quarter of probes
    last_tps: float  # ... and of its last quarter
    first_age: str
    last_age: str


class EventRow(NamedTuple):
    t: str
    engine_life: str
    engine_age: str
    kind: str
    detail: str


class LogLine(NamedTuple):
    number: int
    text: str
    marked: bool  # the trigger's own line


def matched_bands(a: Analysis) -> list[BandRow]:
    """The batch-and-context bands the analysis' `bins` comparison compared, as it compared them
    (diagnostics.evidence.decode): the best supported first."""
    if a.bands is None or a.bands.empty:
        return []
    rows = [
        BandRow(
            batch=f"{r.num_running_reqs:g}",
            context=f"{r.context_lo:,.0f}-{r.context_hi:,.0f}",
            num_early=int(r.num_early),
            early_tps=r.early_tps,
            num_late=int(r.num_late),
            late_tps=r.late_tps,
        )
        for r in a.bands.itertuples()
    ]
    rows.sort(key=lambda r: -min(r.num_early, r.num_late))
    return rows[:MAX_BANDS]


def probe_lives(probes: pd.DataFrame) -> list[ProbeLife]:
    if probes.empty or "decode_tps" not in probes:
        return []
    ok = probes[probes["decode_tps"].notna() & (probes["decode_tps"] > 0)]
    if "status" in ok:
        ok = ok[ok["status"].fillna("ok") == "ok"]
    out = []
    for life, rows in ok.groupby("engine_life", sort=True):
        k = max(1, len(rows) // 4)
        out.append(
            ProbeLife(
                engine_life=int(life),
                num_probes=len(rows),
                first_tps=float(rows["decode_tps"].head(k).median()),
                last_tps=float(rows["decode_tps"].tail(k).median()),
                first_age=_age(rows["engine_age_s"].iloc[0]),
                last_age=_age(rows["engine_age_s"].iloc[-1]),
            )
        )
    return out


def events(source: Source) -> tuple[list[EventRow], int]:
    """Notable events in time order (at most MAX_EVENTS) and how many more were left out."""
    ev = _with_lives(source.events)
    ev = ev[~ev["kind"].isin(QUIET_EVENTS)]
    rows = [
        EventRow(
            t=stamp(r.t, source.kind) or "",
            engine_life="" if pd.isna(r.engine_life) else f"{int(r.engine_life)}",
            engine_age=_age(r.engine_age_s),
            kind=str(r.kind),
            detail="" if pd.isna(r.detail) else str(r.detail),
        )
        for r in ev.head(MAX_EVENTS).itertuples()
    ]
    return rows, max(0, len(ev) - MAX_EVENTS)


def _with_lives(ev: pd.DataFrame) -> pd.DataFrame:
    """Engine life and age where events.jsonl left them out: counted from engine_start events."""
    missing = ev["engine_life"].isna()
    if not missing.any():
        return ev
    starts = np.sort(ev.loc[ev["kind"].isin(STARTUP_KINDS), "t"].to_numpy(dtype="datetime64[ns]"))
    if len(starts) == 0:
        return ev
    t = ev["t"].to_numpy(dtype="datetime64[ns]")
    k = np.searchsorted(starts, t, side="right") - 1  # -1: before the first engine start
    life = np.where(k >= 0, k, np.nan)
    age = np.where(k >= 0, (t - starts[np.clip(k, 0, None)]) / np.timedelta64(1, "s"), np.nan)
    return ev.assign(
        engine_life=ev["engine_life"].where(~missing, life), engine_age_s=ev["engine_age_s"].where(~missing, age)
    )


def trigger_line(inputs: Inputs) -> int | None:
    """The engine log's line for the trigger (else the onset): from the steps' own line numbers,
    else, for a run directory whose steps came from the engine's hooks, by time in its engine.log
    (given up when no log line lies within MAX_CLOCK_GAP_S, as when the log's clock is local time)."""
    a, steps = inputs.analysis, inputs.source.steps
    if a.onset is None:
        return None
    at = a.onset.trigger.t if a.onset.trigger is not None else a.onset.t
    if "line" in steps and steps["line"].notna().any():
        rows = steps[(steps["t"] == at) & steps["line"].notna()]
        if rows.empty:
            rows = steps[(steps["t"] >= a.onset.t) & steps["line"].notna()].head(1)
        return int(rows["line"].iloc[0]) if len(rows) else None
    log = inputs.engine_log
    if log is None or not looks_like_log(log):
        return None
    try:
        rows = parse_log(log).steps.dropna(subset=["line"])
    except LogFormatError:
        return None
    if rows.empty:
        return None
    gap = (rows["t"] - pd.Timestamp(at)).abs()
    best = gap.idxmin()
    return int(rows.loc[best, "line"]) if gap[best].total_seconds() <= MAX_CLOCK_GAP_S else None


def log_lines(path: Path, center: int, context: int = LOG_CONTEXT) -> list[LogLine]:
    lo, hi = max(1, center - context), center + context
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if number > hi:
                break
            if number >= lo:
                out.append(LogLine(number, line.rstrip("\n"), number == center))
    return out


def suspect_series(source: Source, name: str) -> pd.DataFrame:
    """The figure a suspect was ranked on: a snapshot column (a cumulative counter as a rate) or a step column."""
    snaps = source.snapshots
    if name in snaps.columns and "t" in snaps:
        df = snaps[["t", name]].dropna().sort_values("t")
        v = df[name].to_numpy(dtype=float)
        if len(v) > 2 and np.all(np.diff(v) >= 0) and v[-1] > v[0]:
            rate = np.diff(v, prepend=np.nan) / df["t"].diff().dt.total_seconds().to_numpy()
            return pd.DataFrame({"t": df["t"].to_numpy(), name: rate}).dropna()
        return df
    if name in source.steps.columns:
        return source.steps[["t", name]].dropna()
    return pd.DataFrame({"t": pd.Series(dtype="datetime64[ns]"), name: pd.Series(dtype=float)})


def _age(seconds: float | None) -> str:
    return "" if seconds is None or pd.isna(seconds) else f"{float(seconds) / 60:.1f} min"
