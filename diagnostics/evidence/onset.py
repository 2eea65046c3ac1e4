"""Where a slowdown began and what began it: the onset in the series that carried the verdict,
and its trigger.

A decode line's throughput covers the window since the previous one (FreeToken and SGLang print
every 40 forwards, vLLM every 10 s, a scrape covers the time since the last), so the first
degraded sample only says the change happened somewhere after the last healthy one. The onset
is placed inside that window — from the last healthy sample to the first degraded one, its
width `window_s` — and the trigger is sought there: a recorded fault switched on, a prefill (an
append onto a cached prefix, or a window's prompt tokens where the log prints no single
prefill), a dropped request, a preemption. When the window holds one prefill, that prefill is the
onset. When it holds nothing notable, the nearest notable event just before it (within one
window's width) is the trigger: a change can show one line late.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnostics.result import Onset, Trigger
from diagnostics.source.source import Source
from rundir.schema import StepPhase

TRIGGER_QUANTILE = 0.9  # a prefill stands out above this quantile of the life's earlier ones
WITHIN_WINDOW = 2.0  # ...or at this many times the next largest prefill in the window
EVENT_KINDS = ("dropped_request", "preemption")
MIN_LOOKBACK_S = 60.0  # how far before the window a trigger is sought, at least


def series_onset(
    source: Source, onset_t: np.datetime64 | None, onset_age_s: float | None, series: pd.DataFrame
) -> Onset | None:
    """The onset a prefix-reuse or prefill comparison found in its own series, if any."""
    if onset_t is None or onset_age_s is None:
        return None
    return onset_at(source, onset_t, float(onset_age_s), int(series["engine_life"].iloc[0]))


def onset_at(
    source: Source, t: np.datetime64 | pd.Timestamp, engine_age_s: float, life: int, window_s: float | None = None
) -> Onset:
    """An onset found in a per-call or per-prefill series: its trigger is a fault switched on
    before it, if any (no step window to search for a standout prefill)."""
    found = trigger(source, source.steps.iloc[:0], life, pd.Timestamp.min, t)
    return Onset(
        t=pd.Timestamp(t).to_datetime64(), engine_age_s=engine_age_s, engine_life=life, trigger=found, window_s=window_s
    )


def step_onset(source: Source, life_use: pd.DataFrame, onset_idx: int) -> Onset:
    """The onset inside the window from the last healthy sample to the first degraded one."""
    pos = life_use.index.get_loc(onset_idx)
    life = int(life_use.loc[onset_idx, "engine_life"])
    steps = source.steps
    first_bad = life_use.loc[onset_idx]
    hi = int(first_bad["step_index"])
    if pos > 0:
        last_good = life_use.iloc[pos - 1]
        lo, t0 = int(last_good["step_index"]) + 1, pd.Timestamp(last_good["t"])
    else:  # nothing healthy before it in this life: the window opens at the life's first row
        in_life = np.flatnonzero(steps["engine_life"].to_numpy() == life)
        lo = int(in_life[0]) if len(in_life) else hi
        t0 = pd.Timestamp(steps["t"].iloc[lo])
    t1 = pd.Timestamp(first_bad["t"])
    window = steps.iloc[lo : hi + 1]
    candidates = _prefills(steps, window)
    if len(candidates) == 1:  # one prefill in the window: that prefill is the onset
        found: Trigger | None = (
            _event_trigger(_faults(source, t0, t1)) if len(_faults(source, t0, t1)) else candidates[0]
        )
    else:
        found = trigger(source, window, life, t0, t1) or _largest(candidates)
        if found is None:
            found = _just_before(source, steps, life, lo, t0, max((t1 - t0).total_seconds(), MIN_LOOKBACK_S))
    if found is not None and t0 < pd.Timestamp(found.t) <= t1:
        at = pd.Timestamp(found.t)
    else:  # an idle line is not where a slowdown starts: the first prefill or decode row after it is
        busy = [i for i in range(lo, hi + 1) if steps["phase"].iloc[i] != StepPhase.IDLE] or [hi]
        at = pd.Timestamp(steps["t"].iloc[busy[0]])
    age = float(first_bad["engine_age_s"]) - (t1 - at).total_seconds()
    return Onset(
        t=at.to_datetime64(), engine_age_s=age, engine_life=life, trigger=found, window_s=(t1 - t0).total_seconds()
    )


def creep_onset(life_use: pd.DataFrame, idx: int, change_age_s: float) -> Onset:
    """A creep's onset: the first sample where its trend stands out of the healthy noise. It has no
    trigger; `window_s` is how long the trend had been rising by then (from where it started)."""
    row = life_use.loc[idx]
    age = float(row["engine_age_s"])
    return Onset(
        t=pd.Timestamp(row["t"]).to_datetime64(),
        engine_age_s=age,
        engine_life=int(row["engine_life"]),
        trigger=None,
        window_s=max(0.0, float(row["busy_s"]) - change_age_s),
    )


def trigger(
    source: Source, window: pd.DataFrame, life: int, t0: pd.Timestamp, t1: np.datetime64 | pd.Timestamp
) -> Trigger | None:
    """What happened between the last healthy sample (t0) and the first degraded one (t1).

    A recorded fault switch first; then a prefill that stands out (the most new tokens in the
    window, above the TRIGGER_QUANTILE of the life's earlier prefills, or any when there were
    fewer than five, or WITHIN_WINDOW times the next largest in the window); then a dropped
    request or a preemption. None when nothing stands out.
    """
    faults = _faults(source, t0, t1)
    if not faults.empty:
        return _event_trigger(faults.iloc[-1])
    found = _standout(source.steps, window, life)
    if found is not None:
        return found
    ev = source.events
    other = ev[(ev["t"] >= t0) & (ev["t"] <= t1) & ev["kind"].isin(EVENT_KINDS)]
    return _event_trigger(other.iloc[-1]) if not other.empty else None


def _just_before(
    source: Source, steps: pd.DataFrame, life: int, lo: int, t0: pd.Timestamp, lookback_s: float
) -> Trigger | None:
    """The nearest notable event before the window (within `lookback_s`): a standout prefill, a
    dropped request, a preemption."""
    start = t0 - pd.Timedelta(seconds=lookback_s)
    before = steps.iloc[:lo]
    before = before[(before["t"] >= start) & (before["engine_life"] == life)]
    found = _standout(steps, before, life, nearest=True)
    ev = source.events
    other = ev[(ev["t"] >= start) & (ev["t"] <= t0) & ev["kind"].isin(EVENT_KINDS)]
    event = _event_trigger(other.iloc[-1]) if not other.empty else None
    if found is None or (event is not None and pd.Timestamp(event.t) > pd.Timestamp(found.t)):
        return event
    return found


def _standout(steps: pd.DataFrame, window: pd.DataFrame, life: int, nearest: bool = False) -> Trigger | None:
    """The largest prefill in `window` (the latest when `nearest`) if it stands out against the
    life's earlier prefills."""
    prefills = window[_is_prefill(window)]
    if prefills.empty:
        return None
    # A prefill's size is the work it does, its new tokens: a cached prefix is reused, not computed.
    before = steps[(steps["engine_life"] == life) & _is_prefill(steps) & (steps["t"] < prefills["t"].min())]
    earlier = before["new_tokens"].dropna()
    limit = earlier.quantile(TRIGGER_QUANTILE) if len(earlier) >= 5 else -np.inf
    standing = prefills[prefills["new_tokens"] > limit]
    if standing.empty:
        return None
    best = standing.iloc[-1] if nearest else standing.loc[standing["new_tokens"].idxmax()]
    return _prefill_trigger(best)


def _largest(candidates: list[Trigger]) -> Trigger | None:
    """Of several prefills in the window, none standing out against the life's earlier ones, the
    one with WITHIN_WINDOW times the new tokens of the next largest: it stands out of the window."""
    sized = sorted((c.new_tokens, k) for k, c in enumerate(candidates) if c.new_tokens)
    if len(sized) >= 2 and sized[-1][0] >= WITHIN_WINDOW * sized[-2][0]:
        return candidates[sized[-1][1]]
    return None


def _prefills(steps: pd.DataFrame, window: pd.DataFrame) -> list[Trigger]:
    """Every prefill in the window: prefill rows, and windows of a stats line or a scrape that hold
    prompt tokens (about input_tps times the window's length; which prefills, the line cannot say)."""
    out = [_prefill_trigger(row) for _, row in window[_is_prefill(window)].iterrows()]
    windows = window[
        window["phase"].isin((StepPhase.MIXED, StepPhase.DECODE))
        & (window["input_tps"].fillna(0) > 0)
        & window["new_tokens"].isna()
    ]
    for i, row in windows.iterrows():
        pos = steps.index.get_loc(i)
        prev = steps.iloc[pos - 1] if pos > 0 and steps["engine_life"].iloc[pos - 1] == row["engine_life"] else None
        width = (row["t"] - prev["t"]).total_seconds() if prev is not None else np.nan
        tokens = int(round(row["input_tps"] * width)) if np.isfinite(width) else None
        out.append(
            Trigger(
                kind="prefill",
                t=pd.Timestamp(row["t"]).to_datetime64(),
                new_tokens=tokens,
                cached_tokens=None,
                detail=f"about {tokens} prompt tokens in the {width:.0f} s window ending here"
                if tokens
                else "prompt tokens in the window ending here",
            )
        )
    return out


def _is_prefill(rows: pd.DataFrame) -> pd.Series:
    """Rows that name one prefill's new tokens (a prefill line; an engine step that ran prefill)."""
    return rows["phase"].isin((StepPhase.PREFILL, StepPhase.MIXED)) & rows["new_tokens"].notna()


def _prefill_trigger(row: pd.Series) -> Trigger:
    cached = row["cached_tokens"]
    kind = "prefill_append" if pd.notna(cached) and cached > 0 else "prefill"
    return Trigger(
        kind=kind,
        t=pd.Timestamp(row["t"]).to_datetime64(),
        new_tokens=int(row["new_tokens"]),
        cached_tokens=None if pd.isna(cached) else int(cached),
        detail=f"{int(row['new_tokens'])} new tokens onto {0 if pd.isna(cached) else int(cached)} cached",
    )


def _faults(source: Source, t0: pd.Timestamp, t1: np.datetime64 | pd.Timestamp) -> pd.DataFrame:
    ev = source.events
    return ev[(ev["t"] >= t0) & (ev["t"] <= t1) & (ev["kind"] == "fault_on")]


def _event_trigger(e: pd.Series | pd.DataFrame) -> Trigger:
    if isinstance(e, pd.DataFrame):
        e = e.iloc[-1]
    new = None if pd.isna(e["new_tokens"]) else int(e["new_tokens"])
    cached = None if pd.isna(e["cached_tokens"]) else int(e["cached_tokens"])
    return Trigger(
        kind=str(e["kind"]),
        t=e["t"].to_datetime64(),
        new_tokens=new,
        cached_tokens=cached,
        detail="" if pd.isna(e["detail"]) else str(e["detail"]),
    )
