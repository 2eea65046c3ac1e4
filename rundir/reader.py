"""Reading a run directory (docs/run-directory.md): the typed manifest, a table's parts as one
frame, the event lines, and the plain rows that resume and status need.

Parts are read in name order; `*.tmp` files (a part being written) are ignored, and a part that
is not readable Parquet is warned about and skipped. A run written by an older schema version
is read with its missing columns filled with nulls; a newer one is refused with a message
saying so.

events.jsonl is read here only (`read_events`), for diagnostics, resume and status alike. The
writer appends whole lines and cuts a torn last line when it opens the run again
(rundir.jsonl.cut_torn_tail), so the one line a crash leaves that is not an event is the last,
torn mid-write; it, and any other line that is not an event, is warned about with its line
number, skipped and counted. Blank lines are passed over.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, NamedTuple, overload

import pandas as pd
import pyarrow.parquet as pq

from rundir import parts, schema
from rundir.errors import RunDirError
from rundir.manifest import RunManifest
from rundir.rows import Event, ProbeRow, RequestRow, SnapshotRow, StepRow

logger = logging.getLogger(__name__)


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / schema.MANIFEST).is_file()


def read_manifest(run_dir: Path) -> RunManifest:
    path = Path(run_dir) / schema.MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirError(f"{run_dir}: expected a run directory with {schema.MANIFEST}, found none") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path}: expected a JSON manifest, could not read it ({exc})") from exc
    if not isinstance(raw, dict):
        raise RunDirError(f"{path}: expected a JSON object, found {type(raw).__name__}")
    version = raw.get("schema_version")
    if not isinstance(version, int):
        raise RunDirError(f"{path}: expected an integer schema_version, found {version!r}")
    if version > schema.SCHEMA_VERSION:
        raise RunDirError(
            f"{path}: schema_version {version} was written by a newer tokdrift; this one reads up to "
            f"{schema.SCHEMA_VERSION}. Upgrade tokdrift to read this run"
        )
    if version not in schema.READABLE_VERSIONS:
        raise RunDirError(
            f"{path}: schema_version {version} is no longer readable (readable: {schema.READABLE_VERSIONS})"
        )
    return RunManifest.from_json(raw, default_run_id=Path(run_dir).name)


def read_table(run_dir: Path, table: str) -> pd.DataFrame:
    """All parts of one table, documented columns first, times as datetime64 (UTC, naive)."""
    columns = schema.TABLES[table]
    frames = []
    for part in parts.live(run_dir / table):
        try:
            frames.append(_renamed(pd.read_parquet(part.path), table))
        except Exception as exc:  # a torn or foreign file must not hide the rest of the run
            logger.warning("%s: not a readable parquet part (%s); skipped", part.path, exc)
    if not frames:
        df = pd.DataFrame({name: pd.Series(dtype="float64") for name in columns})
    else:
        df = pd.concat(frames, ignore_index=True)
    missing = [name for name, (_, required, _) in columns.items() if required and name not in df.columns]
    if missing and frames:
        raise RunDirError(f"{run_dir / table}: expected columns {missing} in its parts, found {sorted(df.columns)}")
    extra = [c for c in df.columns if c not in columns]
    df = df.reindex(columns=[*columns, *extra])
    for name in df.columns:
        if name == "t" or name.startswith("t_"):
            df[name] = to_time(df[name])
    if "t" in df.columns:
        df = df.sort_values("t", kind="stable", ignore_index=True)
    return df


class EventLog(NamedTuple):
    events: list[Event]  # in the order written, each with its line number
    num_skipped: int  # lines that are not an event: a torn last line, or one written by something else


def read_events(run_dir: Path) -> EventLog:
    """Every event of events.jsonl as written; a line that is not one is warned about and skipped."""
    path = Path(run_dir) / schema.EVENTS
    events: list[Event] = []
    skipped = 0
    if not path.is_file():
        return EventLog(events, skipped)
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                events.append(Event.from_json(json.loads(line), lineno))
            except ValueError as exc:
                logger.warning("%s:%d: skipped an event line (%s)", path, lineno, exc)
                skipped += 1
    return EventLog(events, skipped)


@overload
def read_rows(run_dir: Path, table: Literal["requests"], columns: Iterable[str]) -> list[RequestRow]: ...
@overload
def read_rows(run_dir: Path, table: Literal["steps"], columns: Iterable[str]) -> list[StepRow]: ...
@overload
def read_rows(run_dir: Path, table: Literal["snapshots"], columns: Iterable[str]) -> list[SnapshotRow]: ...
@overload
def read_rows(run_dir: Path, table: Literal["probes"], columns: Iterable[str]) -> list[ProbeRow]: ...


def read_rows(run_dir: Path, table: str, columns: Iterable[str]) -> list[Any]:
    """Some columns of every readable part of one table, as its rows (rundir.rows; for resume and status)."""
    out: list[dict[str, Any]] = []  # as Parquet holds them: the table's columns
    for part in parts.live(Path(run_dir) / table):
        try:
            data = pq.read_table(part.path)
        except Exception as exc:  # noqa: BLE001 - a foreign file must not stop a resume
            logger.warning("%s: not a readable part (%s); skipped", part.path, exc)
            continue
        renames = _renames(table, data.column_names)  # read an old column, give it its new name
        new_to_old = {new: old for old, new in renames.items()}
        names = [new_to_old.get(c, c) for c in columns if new_to_old.get(c, c) in data.column_names]
        out.extend({renames.get(k, k): v for k, v in row.items()} for row in data.select(names).to_pylist())
    return out


def _renamed(df: pd.DataFrame, table: str) -> pd.DataFrame:
    """A part written before a column was renamed (schema.RENAMED), under the new names."""
    renames = _renames(table, df.columns)
    return df.rename(columns=renames) if renames else df


def _renames(table: str, columns: Iterable[str]) -> dict[str, str]:
    """{old: new} for the renamed columns (schema.RENAMED) a part still has under the old name."""
    present = set(columns)
    return {old: new for old, new in schema.RENAMED.get(table, {}).items() if old in present and new not in present}


def to_time(col: pd.Series) -> pd.Series:
    """Unix seconds, or datetimes with or without a zone, as naive UTC datetime64[ns]."""
    if pd.api.types.is_datetime64_any_dtype(col):
        col = col.dt.tz_localize(None) if getattr(col.dt, "tz", None) is not None else col
    else:
        col = pd.to_datetime(pd.to_numeric(col, errors="coerce"), unit="s")
    return col.astype("datetime64[ns]")
