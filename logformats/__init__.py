"""Engine logs -> a steps table and an events table.

Two families of format (docs/diagnostics.md, "Engine logs"):
- batch lines (batch.py): FreeToken (full prefix or the pasted time-only excerpt), tokdrift's
  engine (FreeToken's format), SGLang (dated, or 2024's time-only prefix) and vLLM;
- per-request timings (llamacpp.py, slots.py): llama.cpp's server and Ollama, whose lines may
  carry no time at all;
- and the step record tokdrift's vLLM plugin writes (vllm_steps.py): one JSON line per engine
  iteration.

The format is detected from the first lines. A line no format knows is counted and skipped;
a line of a known shape that does not read (an impossible time, a truncated timing line) is
counted as bad and skipped; a number that does not parse is warned about with its line number
and left empty. One bad line never fails a file. The bytes of a file are read whatever they
were saved as (text.py).
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from logformats import batch, llamacpp, messages, vllm_steps
from logformats.errors import LogFormatError
from logformats.figures import Missing, llamacpp_missing, vllm_missing
from logformats.logtime import log_times
from logformats.records import MAX_WARNINGS, finish
from logformats.slots import SlotReader
from logformats.text import HEAD_LINES, Readable, Text, head
from rundir.schema import StepPhase

logger = logging.getLogger(__name__)

KNOWN = "FreeToken, SGLang, vLLM, llama.cpp, Ollama or tokdrift, or a vLLM step record"
MAX_CLOCK_S = 5e9  # seconds from a clock's origin beyond this (158 years) are garbled numbers
CLOCK_NOTES = {
    "relative": "clock: llama.cpp's stamps, the time since the engine started (engine age itself)",
    "busy": "clock: engine busy time (the log has no timestamps): each request's prompt and eval "
    "time added in order; concurrent slots make it run ahead of wall time",
}


class LogInfo(NamedTuple):
    """What reading the file found, beside the tables."""

    path: str
    format: str  # freetoken, freetoken-excerpt, tokdrift, sglang, sglang-time-only, vllm, vllm-steps, llama.cpp, ollama
    num_lines: int
    num_step_lines: int  # lines read into steps (a vLLM line that adds to the stats line before it too)
    num_event_lines: int
    num_other_lines: int  # known prefix, message of no interest
    num_unknown_lines: int  # no known prefix (llama.cpp, which prints most lines bare: not text)
    num_bad_values: int
    kv_capacity: int | None
    age_known: bool  # False when no startup line precedes the first step
    num_bad_lines: int = 0  # a known shape that does not read: an impossible time, a truncated timing line
    clock: str = "wall"  # wall (the log's own dates), relative (time since start), busy (engine busy time)
    notes: tuple[str, ...] = ()  # what the reader could not get from this log, for the log_lines check
    dated: bool = True  # False: the clock is no time of day (busy time, or stamps since start without --date)
    # Figures a verdict from the log alone needs that this log lacks, each with the engine option that prints it.
    missing: tuple[Missing, ...] = ()


class ParsedLog(NamedTuple):
    steps: pd.DataFrame
    events: pd.DataFrame
    info: LogInfo
    held: dict[int, float] | None = None  # llama.cpp: KV tokens each slot held at the end (SlotReader.holdings)
    # Figures the log states now and then beside its steps (records.FIGURES: a vLLM plugin's own
    # state), as a snapshots table: t, engine_life, engine_age_s, then one column a figure. Often empty.
    snapshots: pd.DataFrame | None = None


FAR_HEAD_LINES = 5000  # where the first 200 lines match no format (a wrapper's banner, a download's progress)


def looks_like_log(path: Path) -> str | None:
    """The log format of `path`, or None when no format matches its first lines (or, failing
    those, its first FAR_HEAD_LINES: an engine started by a wrapper that printed first)."""
    return _detect_head(path if isinstance(path, Text) else Path(path))[0]


def _detect_head(path: Readable) -> tuple[str | None, list[str]]:
    """The format of the file's first HEAD_LINES lines, or of its first FAR_HEAD_LINES where those
    match none; and the lines it was decided on."""
    lines = head(path)
    fmt = detect(lines)
    if fmt is None and len(lines) == HEAD_LINES:
        lines = head(path, FAR_HEAD_LINES)
        fmt = detect(lines)
    return fmt, lines


def detect(lines: list[str]) -> str | None:
    counts = {name: sum(1 for line in lines if pattern.match(line)) for name, pattern in batch.PREFIXES.items()}
    family = llamacpp.detect(lines)
    if family is not None:
        counts[family[0]] = family[1]
    counts[vllm_steps.NAME] = vllm_steps.detect(lines)
    best = max(counts, key=lambda name: counts[name])
    return best if counts[best] else None


def parse_log(
    path: Readable, date: dt.date | None = None, year: int | None = None, held: dict[int, float] | None = None
) -> ParsedLog:
    """Read an engine log: a path, or its text (`Text`). `date` is needed for time-only lines,
    `year` for vLLM's and journald's dates (which have none); `date` also anchors llama.cpp's
    clocks that are no time of day. `held`: a llama.cpp log read in pieces, what the slots held
    at the end of the previous piece (its ParsedLog.held)."""
    path = path if isinstance(path, Text) else Path(path)
    fmt, lines = _detect_head(path)
    if fmt is None:
        found = "the file is empty" if not lines else f"none of the first {len(lines)} lines has a known prefix"
        raise LogFormatError(f"{path}: expected an engine log ({KNOWN}), but {found}")
    if fmt in ("llama.cpp", "ollama"):
        return _parse_per_request(path, date, year, held)
    if fmt == vllm_steps.NAME:
        return _parse_step_record(path)
    return _parse_batch(path, fmt, date, year)


def _parse_batch(path: Readable, fmt: str, date: dt.date | None, year: int | None) -> ParsedLog:
    builder = batch.scan(path, fmt)
    if fmt == "freetoken" and builder.saw_tokdrift:
        fmt = "tokdrift"
    times = log_times(fmt, builder.dates, builder.clock, path, date, year)
    frames = finish(times, builder.kinds, builder.linenos, builder.columns(), path)
    steps = frames.steps
    if fmt == "vllm":
        # A stats line averages its whole window: name what the window held.
        gen, prompt = steps["gen_tps"].fillna(0) > 0, steps["input_tps"].fillna(0) > 0
        steps["phase"] = np.where(
            gen & prompt,
            StepPhase.MIXED,
            np.where(gen, StepPhase.DECODE, np.where(prompt, StepPhase.PREFILL, StepPhase.IDLE)),
        )
        steps["phase"] = steps["phase"].astype(object)
    missing = _vllm_missing(steps) if fmt == "vllm" else ()
    num_dropped_events = frames.num_bad_lines - frames.num_dropped_steps  # one record per line here
    info = LogInfo(
        path=str(path),
        format=fmt,
        num_lines=builder.num_lines,
        num_step_lines=builder.num_steps - frames.num_dropped_steps,
        num_event_lines=builder.num_events - num_dropped_events,
        num_other_lines=builder.num_other,
        num_unknown_lines=builder.num_unknown,
        num_bad_values=builder.num_bad + frames.num_bad_values,
        kv_capacity=builder.kv_capacity,
        age_known=frames.age_known,
        num_bad_lines=frames.num_bad_lines,
        missing=missing,
    )
    _log_skipped(info)
    return ParsedLog(steps, frames.events, info, snapshots=frames.figures)


def _vllm_missing(steps: pd.DataFrame) -> tuple[Missing, ...]:
    """A vLLM log's stats windows: how long (the median gap between its lines, within a life) and
    how many of those that generated tokens held a prompt too."""
    if steps.empty:
        return ()
    t = pd.to_datetime(steps["t"]).astype("int64") / 1e9
    gaps = t.groupby(steps["engine_life"]).diff().dropna()
    gaps = gaps[gaps > 0]
    generating = steps["phase"].isin((StepPhase.DECODE, StepPhase.MIXED))
    mixed = steps["phase"].eq(StepPhase.MIXED)
    return vllm_missing(float(gaps.median()) if len(gaps) else 0.0, int(generating.sum()), int(mixed.sum()))


def _parse_step_record(path: Readable) -> ParsedLog:
    record = vllm_steps.scan(path)
    frames = finish(record.times, record.kinds, record.linenos, record.columns, path)
    info = LogInfo(
        path=str(path),
        format=vllm_steps.NAME,
        num_lines=record.num_lines,
        num_step_lines=record.num_steps - frames.num_dropped_steps,
        num_event_lines=record.num_events,
        num_other_lines=record.num_other,
        num_unknown_lines=record.num_unknown,
        num_bad_values=frames.num_bad_values,
        kv_capacity=record.kv_capacity,
        age_known=frames.age_known,
        num_bad_lines=record.num_bad + frames.num_bad_lines,
        notes=() if record.has_details or not record.num_steps else (vllm_steps.NO_DETAILS,),
    )
    _log_skipped(info)
    return ParsedLog(frames.steps, frames.events, info, snapshots=frames.figures)


def _parse_per_request(
    path: Readable, date: dt.date | None, year: int | None, held: dict[int, float] | None = None
) -> ParsedLog:
    scan = llamacpp.scan(path)
    clock = llamacpp.clocks(scan.entries, path, year)
    has_release = any(
        (e.kind == "slot" and e.payload[3].startswith("stop processing"))
        or (e.kind == "old" and e.payload[1] == "slot released")
        for e in scan.entries
    )
    reader = SlotReader(path, clock.kind, has_release, held)
    num_bad = scan.num_bad_lines
    life = -1
    for entry, sec, entry_life in zip(scan.entries, clock.secs.tolist(), clock.lives.tolist()):
        if clock.kind != "busy" and sec != sec:  # NaN: an impossible stamp
            num_bad += 1
            if num_bad <= MAX_WARNINGS:
                logger.warning("%s:%d: expected a time, found an impossible one; line skipped", path, entry.lineno)
            continue
        if clock.kind == "relative" and entry_life != life:
            reader.new_life(entry.lineno, float(clock.origins[entry_life]), first=life == -1)
            life = entry_life
        messages.read(reader, entry, sec)
    reader.shared_batches()
    secs = np.asarray(reader.secs, dtype=float)
    usable = np.isfinite(secs) & (np.abs(secs) <= MAX_CLOCK_S)
    base = clock.base if clock.base is not None else np.datetime64(date or "1970-01-01", "ns")
    times = np.full(len(secs), np.datetime64("NaT"), dtype="datetime64[ns]")
    times[usable] = base + np.round(secs[usable] * 1e9).astype("timedelta64[ns]")
    frames = finish(times, reader.records.kinds, reader.records.linenos, reader.records.columns(), path)
    notes = []
    if reader.num_requests and not frames.steps["phase"].isin((StepPhase.DECODE, StepPhase.MIXED)).any():
        notes.append("only access lines: request latency without token counts")
    fmt = "ollama" if scan.ollama else "llama.cpp"
    info = LogInfo(
        path=str(path),
        format=fmt,
        num_lines=scan.num_lines,
        num_step_lines=reader.num_step_lines,
        num_event_lines=reader.num_events,
        num_other_lines=scan.num_other + reader.num_other,
        num_unknown_lines=scan.num_unknown,
        num_bad_values=reader.num_bad_values + frames.num_bad_values,
        kv_capacity=reader.kv_capacity,
        age_known=frames.age_known,
        num_bad_lines=num_bad + reader.num_bad_lines + frames.num_bad_lines,
        clock=clock.kind,
        notes=tuple(notes),
        dated=clock.kind == "wall" or (clock.kind == "relative" and date is not None),
        missing=llamacpp_missing(clock.kind, has_release, len(reader.served)) if fmt == "llama.cpp" else (),
    )
    _log_skipped(info)
    return ParsedLog(frames.steps, frames.events, info, reader.holdings())


def _log_skipped(info: LogInfo) -> None:
    if info.num_unknown_lines:
        logger.info("%s: skipped %d lines with no known prefix", info.path, info.num_unknown_lines)
    if info.num_bad_lines:
        logger.info("%s: skipped %d lines of a known shape that do not read", info.path, info.num_bad_lines)
