"""Times of log lines: full dates, time-only lines (with --date), dates without a year.

Parsed in bulk: the text of a million stamps goes to pandas' parser in one call. A stamp that
is no possible time (`2419-91-37 94:25:02`, a garbled line) becomes NaT; the reader drops that
line and counts it.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path

import numpy as np
import pandas as pd

from logformats.errors import LogFormatError
from logformats.text import Readable

logger = logging.getLogger(__name__)

# Formats whose lines carry a time of day and no date, and why.
TIME_ONLY = {"freetoken-excerpt": "a pasted excerpt", "sglang-time-only": "SGLang releases of 2024 print no date"}
EPOCH = np.datetime64("1970-01-01", "ns")
MONTHS = {
    name: k
    for k, name in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)
}


def log_times(
    fmt: str, dates: list[str], clock: list[str], path: Readable, date: dt.date | None, year: int | None
) -> np.ndarray:
    """Each record's time, from its date text (empty for time-only lines) and its time of day."""
    if not clock:
        return np.array([], dtype="datetime64[ns]")
    if fmt in TIME_ONLY:
        start = date or date_from_name(path)
        if start is None:
            raise LogFormatError(
                f"{path}: lines carry only a time of day ({TIME_ONLY[fmt]}); expected --date YYYY-MM-DD "
                f"(or a date in the file name), found neither"
            )
        since = _stamps(["1970-01-01"] * len(clock), clock) - EPOCH
        # Past midnight the clock goes back: a step back of more than 12 h is the next day.
        sod = since / np.timedelta64(1, "s")  # NaN where the stamp was impossible
        valid = np.isfinite(sod)
        day = np.zeros(len(sod), dtype=np.int64)
        day[valid] = np.concatenate([[0], np.cumsum(np.diff(sod[valid]) < -12 * 3600)])
        stamps: np.ndarray = np.datetime64(start, "ns") + day.astype("timedelta64[D]") + since
        return stamps
    if fmt == "vllm":
        if year is None:
            year = file_year(path, "vLLM dates have no year")
        month = np.array([int(d[:2]) for d in dates])
        roll = np.concatenate([[0], np.cumsum(np.diff(month) < -6)])  # December -> January
        return _stamps([f"{year + k}-{d}" for k, d in zip(roll.tolist(), dates)], clock)
    return _stamps(dates, clock)


def iso_times(texts: list[str]) -> np.ndarray:
    """Naive ISO stamps (`2025-01-02T10:11:12.345`) as datetime64[ns]; NaT where impossible."""
    if not texts:
        return np.array([], dtype="datetime64[ns]")
    stamps: np.ndarray = pd.to_datetime(pd.Series(texts, dtype=object), format="ISO8601", errors="coerce").to_numpy(
        dtype="datetime64[ns]"
    )
    return stamps


def journal_iso(months: list[str], rests: list[str], year: int) -> list[str]:
    """ISO text of journald's `Mon DD HH:MM:SS` stamps, which carry no year: December to January
    rolls it."""
    numbers = [MONTHS.get(m, 0) for m in months]
    out, k, last = [], 0, None
    for month, rest in zip(numbers, rests):
        if last is not None and month and month < last - 6:
            k += 1
        if month:
            last = month
        day, _, clock = rest.partition(" ")
        # An unknown month name is a garbled stamp: text that parses to NaT.
        out.append(f"{year + k:04d}-{month:02d}-{int(day):02d}T{clock}" if month and day.isdigit() else "garbled")
    return out


def file_year(path: object, why: str) -> int:
    """The year a log with yearless dates was written: its file's modification year, or this year
    for text read from memory (a log being tailed)."""
    if not isinstance(path, Path):
        return dt.date.today().year
    year = dt.datetime.fromtimestamp(path.stat().st_mtime).year
    logger.warning("%s: %s; assuming %d (the file's modification year); pass --year to set it", path, why, year)
    return year


def date_from_name(path: object) -> dt.date | None:
    m = re.search(r"(\d{4})-(\d{2})-(\d{2})", getattr(path, "name", str(path)))
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def _stamps(dates: list[str], clock: list[str]) -> np.ndarray:
    text = [f"{d} {c}" for d, c in zip(dates, clock)]
    stamps: np.ndarray = pd.to_datetime(text, format="%Y-%m-%d %H:%M:%S", errors="coerce").to_numpy(
        dtype="datetime64[ns]"
    )
    return stamps
