"""The environment a report names: engine config, hardware, versions and trace, from the manifest
(run directories) or from the log's own startup lines (plain logs)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any, NamedTuple

from diagnostics.source.source import Source
from diagnostics.words.details import engine_name
from reports.redact import Redactor

MAX_STARTUP_LINES = 6
# The running verdict a soak stopped on (its manifest's `decided`), by what it is: the verdict at
# the top is the whole run's, analysed afresh, and may differ in its figure and confidence.
DECIDED = "running verdict when the soak stopped"
SECTIONS = ("engine", "host", "trace")


class Environment(NamedTuple):
    rows: list[tuple[str, str]]  # (field, value), already redacted
    configs: str | None  # resolved configs as indented JSON, redacted
    startup: list[str]  # the engine's startup lines from its log


def environment(source: Source, redactor: Redactor) -> Environment:
    rows: list[tuple[str, str]] = [
        ("source", f"{source.kind} {redactor.text(source.path)}"),
        ("engine", engine_name(source)),
    ]
    configs = None
    m = source.manifest
    if m is not None:
        raw = redactor.json(m.raw)
        for key in ("run_id", "status", "stop_reason", "started_at", "ended_at", "target"):
            if raw.get(key) is not None:
                rows.append((key, _when(raw[key]) if key.endswith("_at") else _value(raw[key])))
        if m.decided is not None and m.decided.line:
            line = _value(raw["decided"]["line"])  # redacted with the rest of the manifest
            rows.append((DECIDED, f"superseded by the whole run's verdict at the top; it said {line}"))
        if isinstance(raw.get("command"), list):
            rows.append(("command", " ".join(str(x) for x in raw["command"])))
        for section in SECTIONS:
            value = raw.get(section)
            if isinstance(value, dict):
                rows += [(f"{section}.{k}", v) for k, v in _flatten(value)]
            elif value is not None:
                rows.append((section, _value(value)))
        if raw.get("configs"):
            configs = json.dumps(raw["configs"], indent=2, sort_keys=True, default=str)
    info = source.log_info
    if info is not None:
        rows.append(("log format", f"{info.format}, {info.num_lines} lines ({info.num_step_lines} step lines)"))
        if info.kv_capacity:
            rows.append(("KV capacity (tokens)", f"{info.kv_capacity:,}"))
    starts = source.events[source.events["kind"] == "engine_start"]["detail"].dropna().astype(str)
    startup = [redactor.text(s) for s in dict.fromkeys(starts)][:MAX_STARTUP_LINES]
    return Environment(rows, configs, startup)


def _when(value: object) -> str:
    """A manifest's ISO time to the second, in its own zone (`2026-12-02 14:11:55 UTC`)."""
    try:
        t = dt.datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    zone = "" if t.tzinfo is None else (" UTC" if t.utcoffset() == dt.timedelta(0) else t.strftime(" %z"))
    return t.strftime("%Y-%m-%d %H:%M:%S") + zone


def _flatten(d: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _flatten(v, name + ".")
        else:
            yield name, _value(v, name)


def _value(v: object, name: str = "") -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, default=str)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and name.endswith("bytes"):
        return f"{v:,} ({v / (1 << 30):.1f} GiB)"
    return "" if v is None else str(v)
