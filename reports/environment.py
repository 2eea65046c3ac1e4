"""The environment a report names: engine config, hardware, versions and trace, from the manifest
(run directories) or from the log's own startup lines (plain logs)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from diagnostics.labels import Confidence, Verdict
from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words.details import engine_name
from diagnostics.words.said import duration
from reports.narrative import verdict_words
from reports.redact import Redactor
from rundir.manifest import Decided

MAX_STARTUP_LINES = 6
# The running verdict a soak stopped on (its manifest's `decided`), by what it is: the verdict at
# the top is the whole run's, analysed afresh, and may differ in its figure and confidence.
DECIDED = "running verdict when the soak stopped"
# How sure the running verdict was, as its line says it (diagnostics.decision.live: `verdict so far:
# engine_age_degradation, medium confidence (...)`); the record keeps no confidence of its own.
_SURE = re.compile(r"\b(" + "|".join(Confidence) + r") confidence\b")
SECTIONS = ("engine", "host", "trace")


class Environment(NamedTuple):
    rows: list[tuple[str, str]]  # (field, value), already redacted
    configs: str | None  # resolved configs as indented JSON, redacted
    startup: list[str]  # the engine's startup lines from its log


def environment(source: Source, redactor: Redactor, a: Analysis) -> Environment:
    """What `source` says of where it ran; `a`, the whole run's analysis, for the running verdict a
    soak stopped on to be said beside it."""
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
        if m.decided is not None:
            rows.append((DECIDED, running_verdict(m.decided, a)))
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


def running_verdict(d: Decided, a: Analysis) -> str:
    """`the same as the whole run's (Aged, medium confidence), decided at test-request cycle 25, 15.9
    min into the soak`: the running verdict a soak stopped on, in line one's words and without its
    figure. Its interval is at the running level (99%, say), and a fifth reader found it beside the
    90% ones unexplained; the whole run's figure at the top is the one to read."""
    sure = _SURE.search(d.line or "")
    try:
        then = dataclasses.replace(a, verdict=Verdict(d.verdict), confidence=Confidence(sure[1]) if sure else None)
        said = verdict_words(then) if sure else str(then.verdict)
    except ValueError:  # a verdict this version does not know: as the record says it
        said = d.verdict
    at = [f"at test-request cycle {d.cycle}"] if d.cycle is not None else []
    at += [f"{duration(d.elapsed_s)} into the soak"] if d.elapsed_s is not None else []
    decided = f", decided {', '.join(at)}" if at else ""
    final = verdict_words(a)
    if said == final:
        return f"the same as the whole run's ({final}){decided}"
    return f"{said}{decided}; the whole run's verdict at the top ({final}) supersedes it"


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
