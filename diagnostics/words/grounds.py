"""What a verdict stands on, said right after its word: `from a 16.7-min soak of vLLM 0.27.1, a
test fault set in it`, `from a 3.4-hour llama.cpp log alone`.

A fifth reader asked for the verdict and how solid the data under it in the same breath: how long
the run or the log was, whether it was a soak or a log read alone, and whether a fault was put in on
purpose (a test instrument: the slowdown it makes is real, but made). The length is the run's
serving time (its manifest), or a log's span from its first step to its last.
"""

from __future__ import annotations

import pandas as pd

from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words.details import engine_name
from diagnostics.words.said import duration

# How a reader knows each engine by name; the built-in engine is said as such.
SAID_AS = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "freetoken": "FreeToken",
    "ollama": "Ollama",
    "llama.cpp": "llama.cpp",
    "tokdrift": "the built-in engine",
}
ADJECTIVE = {"s": "second", "min": "min", "h": "hour"}  # a duration's unit before a noun
MAX_VERSION = 12  # a version longer than this (a build hash) stays below the break


def grounds(a: Analysis, source: Source | None) -> str | None:
    """`from a 16.7-min soak of vLLM 0.27.1, a test fault set in it`; None where no source is at hand."""
    if source is None:
        return None
    engine = _engine(a, source)
    fault = ", a test fault set in it" if _fault_set(source) else ""
    if source.kind == "run_dir":
        m = source.manifest
        length = f"{_long(m.elapsed_s)} " if m is not None and m.elapsed_s else ""
        return f"from {_a(length or 'soak')}{length}soak of {engine}{fault}"
    span = _span(source)
    long = f"{_long(span)} " if span else ""
    if source.kind == "prometheus":
        return f"from {_a(long or 'series')}{long}series of {engine}'s metrics{fault}"
    info = source.log_info
    what = "step record" if info is not None and info.format == "vllm-steps" else "log"
    if info is not None and info.format.endswith("-excerpt"):
        what = "log excerpt"
    name = engine if engine != "the built-in engine" else "tokdrift"
    if a.clock == "busy" and span:  # a clock that leaves idle time out: its span is the engine's time at work
        return f"from {_a(name)}{name} {what} alone, {duration(span)} of serving in it{fault}"
    return f"from {_a(long or name)}{long}{name} {what} alone{fault}"


def _engine(a: Analysis, source: Source) -> str:
    """`vLLM 0.27.1`, `llama.cpp`, `the built-in engine`: the name, and the version where it is short."""
    name = engine_name(source)
    said = SAID_AS.get(name, name if name != "unknown" else "an engine")
    version = next((life.facts.get("version") for life in a.lives if life.facts.get("version")), None)
    if version is None and source.manifest is not None:
        version = (source.manifest.engine or {}).get("version")
    if name == "tokdrift" or not version or len(str(version)) > MAX_VERSION:
        return said
    return f"{said} {version}"


def _fault_set(source: Source) -> bool:
    """Whether a test fault was set: the source's own event, or the soak's command asking for one."""
    ev = source.events
    if len(ev) and "kind" in ev and (ev["kind"] == "fault_on").any():
        return True
    m = source.manifest
    return m is not None and any(str(x) == "--fault" or str(x).startswith("--fault=") for x in m.command)


def _span(source: Source) -> float | None:
    """A log's span from its first step to its last, in seconds."""
    t = source.steps["t"] if len(source.steps) and "t" in source.steps else None
    if t is None or t.isna().all():
        return None
    span = pd.Timestamp(t.max()) - pd.Timestamp(t.min())
    return span.total_seconds() if span.total_seconds() > 0 else None


def _long(seconds: float) -> str:
    """`66-second`, `16.7-min`, `3.4-hour`: a length (diagnostics.words.said.duration) as an adjective."""
    number, unit = duration(seconds).split(" ")
    return f"{number}-{ADJECTIVE[unit]}"


def _a(word: str) -> str:
    """The article before a word as it is read aloud: `an 11-second`, `an 8.0-min`, `a 16.7-min`."""
    w = word.strip()
    if w[:1].isdigit():
        whole = w.split(".")[0].split("-")[0]
        return "an " if whole.startswith("8") or whole in ("11", "18") else "a "
    return "an " if w[:1].lower() in "aeiou" else "a "
