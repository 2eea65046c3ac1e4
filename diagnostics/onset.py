"""Where a slowdown began and what began it: the onset in the series that carried the verdict,
and its trigger, the notable event between the last healthy sample and the first degraded one."""

from __future__ import annotations

from typing import Optional

import pandas as pd

from diagnostics.result import Onset, Trigger
from diagnostics.source import Source

TRIGGER_QUANTILE = 0.9  # a prefill stands out above this quantile of the life's earlier ones


def series_onset(source: Source, onset_t, onset_age_s: Optional[float], series: pd.DataFrame) -> Optional[Onset]:
    """The onset a prefix-reuse or prefill comparison found in its own series, if any."""
    if onset_t is None:
        return None
    return onset_at(source, onset_t, float(onset_age_s), int(series["engine_life"].iloc[0]))


def onset_at(source: Source, t, engine_age_s: float, life: int) -> Onset:
    """An onset found in a per-call or per-prefill series: its trigger is a fault switched on
    before it, if any (no step window to search for a standout prefill)."""
    found = trigger(source, source.steps.iloc[:0], life, pd.Timestamp.min, t)
    return Onset(pd.Timestamp(t).to_datetime64(), engine_age_s, life, found)


def step_onset(source: Source, life_use: pd.DataFrame, onset_idx) -> Onset:
    """The first step row after the last healthy sample: a decode line's window starts there."""
    pos = life_use.index.get_loc(onset_idx)
    life = int(life_use.loc[onset_idx, "engine_life"])
    steps = source.steps
    first_bad = life_use.loc[onset_idx]
    if pos > 0:
        last_good = life_use.iloc[pos - 1]
        lo = int(last_good["step_index"]) + 1
        t0 = last_good["t"]
    else:
        lo = int(first_bad["step_index"])
        t0 = first_bad["t"]
    hi = int(first_bad["step_index"])
    # An idle line is not where a slowdown starts: the first prefill or decode row after it is.
    busy = [i for i in range(lo, hi + 1) if steps.iloc[i]["phase"] != "idle"] or [hi]
    row = steps.iloc[busy[0]]
    found = trigger(source, steps.iloc[lo:hi + 1], life, t0, first_bad["t"])
    return Onset(row["t"].to_datetime64(), float(row["engine_age_s"]), life, found)


def trigger(source: Source, window: pd.DataFrame, life: int, t0, t1) -> Optional[Trigger]:
    """What happened between the last healthy sample (t0) and the first degraded one (t1).

    A recorded fault switch first; then a prefill that stands out (the largest in the window,
    above the TRIGGER_QUANTILE of the life's earlier prefills, or any when there were fewer
    than five); then a dropped request or a preemption. None when nothing stands out.
    """
    ev = source.events
    ev = ev[(ev["t"] >= t0) & (ev["t"] <= t1)]
    faults = ev[ev["kind"] == "fault_on"]
    if not faults.empty:
        return _event_trigger(faults.iloc[-1])
    prefills = window[(window["phase"] == "prefill") & window["new_tokens"].notna()]
    if not prefills.empty:
        total = prefills["new_tokens"] + prefills["cached_tokens"].fillna(0)
        best = prefills.loc[total.idxmax()]
        steps = source.steps
        before = steps[(steps["engine_life"] == life) & (steps["phase"] == "prefill") & (steps["t"] < best["t"])]
        earlier = (before["new_tokens"] + before["cached_tokens"].fillna(0)).dropna()
        if len(earlier) < 5 or total.max() > earlier.quantile(TRIGGER_QUANTILE):
            cached = best["cached_tokens"]
            kind = "prefill_append" if pd.notna(cached) and cached > 0 else "prefill"
            return Trigger(kind, best["t"].to_datetime64(), int(best["new_tokens"]),
                           None if pd.isna(cached) else int(cached),
                           f"{int(best['new_tokens'])} new tokens onto {0 if pd.isna(cached) else int(cached)} cached")
    other = ev[ev["kind"].isin(("dropped_request", "preemption"))]
    return _event_trigger(other.iloc[-1]) if not other.empty else None


def _event_trigger(e: pd.Series) -> Trigger:
    new = None if pd.isna(e["new_tokens"]) else int(e["new_tokens"])
    cached = None if pd.isna(e["cached_tokens"]) else int(e["cached_tokens"])
    return Trigger(str(e["kind"]), e["t"].to_datetime64(), new, cached, "" if pd.isna(e["detail"]) else str(e["detail"]))
