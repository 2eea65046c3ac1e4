"""Read a soak run directory (docs/run-directory.md) into typed tables.

Parts are read in name order; `*.tmp` files (a part being written) are ignored. A run written
by an older schema version is read with its missing columns filled with nulls; a newer one is
refused with a message saying so. A torn last line in events.jsonl (a crash mid-write) is
warned about and skipped.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from diagnostics import rundir_schema as schema
from diagnostics.errors import DiagnosticsError
from diagnostics.frames import EVENT_FRAME_COLUMNS, assign_engine_lives

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Manifest:
    schema_version: int
    run_id: str
    status: str
    started_at: Optional[str]
    ended_at: Optional[str]
    target: Any
    raw: dict = field(repr=False, default_factory=dict)  # everything, as written


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / schema.MANIFEST).is_file()


def read_manifest(run_dir: Path) -> Manifest:
    path = run_dir / schema.MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DiagnosticsError(f"{path}: expected a JSON manifest, could not read it ({exc})") from exc
    if not isinstance(raw, dict):
        raise DiagnosticsError(f"{path}: expected a JSON object, found {type(raw).__name__}")
    version = raw.get("schema_version")
    if not isinstance(version, int):
        raise DiagnosticsError(f"{path}: expected an integer schema_version, found {version!r}")
    if version > schema.SCHEMA_VERSION:
        raise DiagnosticsError(
            f"{path}: schema_version {version} was written by a newer tokdrift; this one reads up to "
            f"{schema.SCHEMA_VERSION}. Upgrade tokdrift to analyse this run")
    if version not in schema.READABLE_VERSIONS:
        raise DiagnosticsError(
            f"{path}: schema_version {version} is no longer readable (readable: {schema.READABLE_VERSIONS})")
    return Manifest(version, str(raw.get("run_id", run_dir.name)), str(raw.get("status", "unknown")),
                    raw.get("started_at"), raw.get("ended_at"), raw.get("target"), raw)


def read_table(run_dir: Path, table: str) -> pd.DataFrame:
    """All parts of one table, documented columns first, times as datetime64 (UTC, naive)."""
    columns = schema.TABLES[table]
    parts = sorted((run_dir / table).glob(schema.PART_GLOB)) if (run_dir / table).is_dir() else []
    frames = []
    for part in parts:
        try:
            frames.append(pd.read_parquet(part))
        except Exception as exc:  # a torn or foreign file must not hide the rest of the run
            logger.warning("%s: not a readable parquet part (%s); skipped", part, exc)
    if not frames:
        df = pd.DataFrame({name: pd.Series(dtype="float64") for name in columns})
    else:
        df = pd.concat(frames, ignore_index=True)
    missing = [name for name, (_, required, _) in columns.items() if required and name not in df.columns]
    if missing and frames:
        raise DiagnosticsError(f"{run_dir / table}: expected columns {missing} in its parts, found "
                               f"{sorted(df.columns)}")
    extra = [c for c in df.columns if c not in columns]
    df = df.reindex(columns=[*columns, *extra])
    for name in df.columns:
        if name == "t" or name.startswith("t_"):
            df[name] = _to_time(df[name])
    if "t" in df.columns:
        df = df.sort_values("t", kind="stable", ignore_index=True)
    return df


def read_events(run_dir: Path) -> pd.DataFrame:
    path = run_dir / schema.EVENTS
    rows = []
    if path.is_file():
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    if not isinstance(row, dict) or "kind" not in row or "t" not in row:
                        raise ValueError("expected an object with 't' and 'kind'")
                except ValueError as exc:
                    logger.warning("%s:%d: skipped an event line (%s)", path, lineno, exc)
                    continue
                rows.append({**row, "line": lineno})
    if not rows:
        return pd.DataFrame(columns=EVENT_FRAME_COLUMNS)
    df = pd.DataFrame(rows)
    df["t"] = _to_time(df["t"])
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
        own = back[len(starts):]
        df["engine_life"] = df["engine_life"].fillna(pd.Series(lives[own], index=df.index))
        df["engine_age_s"] = df["engine_age_s"].fillna(pd.Series(ages[own], index=df.index))
    df["engine_life"] = df["engine_life"].astype("int64")
    return df


def _to_time(col: pd.Series) -> pd.Series:
    if pd.api.types.is_datetime64_any_dtype(col):
        col = col.dt.tz_localize(None) if getattr(col.dt, "tz", None) is not None else col
    else:
        col = pd.to_datetime(pd.to_numeric(col, errors="coerce"), unit="s")
    return col.astype("datetime64[ns]")
