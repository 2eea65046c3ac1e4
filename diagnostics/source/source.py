"""One entry point for every kind of source: `load_source(path) -> Source`.

A source is a run directory (manifest.json inside), a saved Prometheus scrape series, or an
engine log; which one is decided from what the path holds, not from its name.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from diagnostics.errors import DiagnosticsError
from diagnostics.source import run_frames
from logformats import LogInfo, looks_like_log, parse_log
from logformats.errors import LogFormatError
from logformats.frames import EVENT_FRAME_COLUMNS, STEP_FRAME_COLUMNS, empty_events
from logformats.prometheus import looks_like_scrapes, parse_scrapes
from rundir import reader, schema
from rundir.errors import RunDirError
from rundir.manifest import RunManifest

logger = logging.getLogger(__name__)


class Source(NamedTuple):
    """Everything analysis needs, as tables. Empty tables where the source has none."""

    path: str
    kind: str  # run_dir, log, prometheus
    engine: str  # freetoken, tokdrift, sglang, vllm, llama.cpp, ollama, unknown
    steps: pd.DataFrame  # logformats.frames.STEP_FRAME_COLUMNS
    events: pd.DataFrame  # logformats.frames.EVENT_FRAME_COLUMNS
    requests: pd.DataFrame  # rundir.schema.REQUEST_COLUMNS (run directories only)
    probes: pd.DataFrame  # rundir.schema.PROBE_COLUMNS
    snapshots: pd.DataFrame  # rundir.schema.SNAPSHOT_COLUMNS (+ any extra numeric columns)
    manifest: RunManifest | None
    log_info: LogInfo | None


def load_source(path: Path | str, date: dt.date | None = None, year: int | None = None) -> Source:
    """Read a run directory, a Prometheus scrape series or an engine log."""
    try:
        return _load(Path(path), date, year)
    except (RunDirError, LogFormatError) as exc:  # diagnostics' callers catch one error type
        raise DiagnosticsError(str(exc)) from exc


def _load(path: Path, date: dt.date | None, year: int | None) -> Source:
    if not path.exists():
        raise DiagnosticsError(f"{path}: expected a run directory, engine log or scrape series; nothing is there")
    if reader.is_run_dir(path):
        return _load_run_dir(path, date, year)
    if looks_like_scrapes(path):
        steps, events, engine = parse_scrapes(path)
        return Source(
            path=str(path),
            kind="prometheus",
            engine=engine,
            steps=steps,
            events=events,
            requests=_empty_table("requests"),
            probes=_empty_table("probes"),
            snapshots=_empty_table("snapshots"),
            manifest=None,
            log_info=None,
        )
    if path.is_dir():
        raise DiagnosticsError(
            f"{path}: expected a run directory (with {schema.MANIFEST}) or a folder of *.prom scrapes, found neither"
        )
    parsed = parse_log(path, date=date, year=year)
    engine = parsed.info.format.split("-")[0]  # freetoken-excerpt and sglang-time-only name their engine first
    return Source(
        path=str(path),
        kind="log",
        engine=engine,
        steps=parsed.steps,
        events=parsed.events,
        requests=_empty_table("requests"),
        probes=_empty_table("probes"),
        # The figures a log states beside its steps (a vLLM plugin's own state), as a run's snapshots.
        snapshots=parsed.snapshots
        if parsed.snapshots is not None and not parsed.snapshots.empty
        else _empty_table("snapshots"),
        manifest=None,
        log_info=parsed.info,
    )


def _load_run_dir(path: Path, date: dt.date | None, year: int | None) -> Source:
    manifest = reader.read_manifest(path)
    events = run_frames.read_events(path)
    steps = reader.read_table(path, "steps")
    log_info = None
    log = path / schema.ENGINE_LOG
    if steps.empty and log.is_file() and looks_like_log(log):
        parsed = parse_log(log, date=date, year=year)
        steps, log_info = parsed.steps, parsed.info
        events = pd.concat(
            [e for e in (events, parsed.events) if not e.empty] or [empty_events()], ignore_index=True
        ).sort_values("t", kind="stable", ignore_index=True)
    steps = run_frames.attach_lives(steps, events).reindex(columns=STEP_FRAME_COLUMNS)
    tables = {
        name: run_frames.attach_lives(reader.read_table(path, name), events, "t_send" if name == "requests" else "t")
        for name in ("requests", "probes", "snapshots")
    }
    target = manifest.target if isinstance(manifest.target, str) else "builtin"
    said = (manifest.engine or {}).get("name")  # what a URL target said of itself (soak.identify)
    engine = "tokdrift" if target == "builtin" else (log_info.format if log_info else said or "unknown")
    return Source(
        path=str(path),
        kind="run_dir",
        engine=engine,
        steps=steps,
        events=events.reindex(columns=EVENT_FRAME_COLUMNS),
        requests=tables["requests"],
        probes=tables["probes"],
        snapshots=tables["snapshots"],
        manifest=manifest,
        log_info=log_info,
    )


def _empty_table(table: str) -> pd.DataFrame:
    return pd.DataFrame({name: pd.Series(dtype="float64") for name in schema.TABLES[table]})
