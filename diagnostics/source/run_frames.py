"""A run directory as diagnostics' frames: the events frame and engine lives for tables that
lack them. Reading the files themselves is rundir.reader's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from logformats.frames import EVENT_FRAME_COLUMNS, assign_engine_lives
from rundir import reader, schema


def read_events(run_dir: Path) -> pd.DataFrame:
    """events.jsonl as the events frame (logformats.frames): one row per event, what the frame
    has no column for said in `detail`."""
    rows = [{"t": e.t, "kind": e.kind, **e.fields, "line": e.line} for e in reader.read_events(run_dir).events]
    if not rows:
        return pd.DataFrame(columns=EVENT_FRAME_COLUMNS)
    df = pd.DataFrame(rows)
    df["t"] = reader.to_time(df["t"])
    if "detail" not in df.columns:
        df["detail"] = None
    known = ("t", "kind", "line", "engine_life", "engine_age_s", "count", "new_tokens", "cached_tokens", "limit")
    detail = df.drop(columns=[c for c in df.columns if c in known or c == "detail"])
    if not detail.empty and len(detail.columns):
        text = detail.apply(lambda r: ", ".join(f"{k}={v}" for k, v in r.items() if pd.notna(v)), axis=1)
        df["detail"] = df["detail"].where(df["detail"].notna(), text)
    if "input_tokens" in df.columns:  # dropped_request carries input_tokens; events keep new_tokens
        df["new_tokens"] = df.get("new_tokens", pd.Series(np.nan, index=df.index)).fillna(df["input_tokens"])
    return df.reindex(columns=EVENT_FRAME_COLUMNS).sort_values("t", kind="stable", ignore_index=True)


def attach_lives(df: pd.DataFrame, events: pd.DataFrame, time_col: str = "t") -> pd.DataFrame:
    """Fill `engine_life` and `engine_age_s` where a table lacks them, from engine_start events."""
    df = df.copy()
    for name in ("engine_life", "engine_age_s"):
        if name not in df.columns:
            df[name] = np.nan
    if df.empty:
        df["engine_life"] = df["engine_life"].astype("int64")
        return df
    if df["engine_life"].isna().any() or df["engine_age_s"].isna().any():
        starts = events.loc[events["kind"].isin(schema.STARTUP_KINDS), "t"].to_numpy(dtype="datetime64[ns]")
        t = np.concatenate([starts, df[time_col].to_numpy(dtype="datetime64[ns]")])
        is_start = np.r_[np.ones(len(starts), bool), np.zeros(len(df), bool)]
        order = np.argsort(t, kind="stable")
        lives, ages, _ = assign_engine_lives(t[order], is_start[order], ~is_start[order])
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        own = back[len(starts) :]
        df["engine_life"] = df["engine_life"].fillna(pd.Series(lives[own], index=df.index))
        df["engine_age_s"] = df["engine_age_s"].fillna(pd.Series(ages[own], index=df.index))
    df["engine_life"] = df["engine_life"].astype("int64")
    return df
