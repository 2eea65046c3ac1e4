"""Times of log lines: full dates, time-only excerpts (with --date), vLLM's dates without a year.

Parsed in bulk: the text of a million stamps goes to pandas' ISO parser in one call.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from diagnostics.errors import DiagnosticsError

logger = logging.getLogger(__name__)


def log_times(fmt: str, dates: list[str], clock: list[str], path: Path, date: Optional[dt.date],
              year: Optional[int]) -> np.ndarray:
    """Each record's time, from its date text (empty for excerpts) and its time of day."""
    if not clock:
        return np.array([], dtype="datetime64[ns]")
    if fmt == "freetoken-excerpt":
        start = date or _date_from_name(path)
        if start is None:
            raise DiagnosticsError(
                f"{path}: lines carry only a time of day (a pasted excerpt); expected --date YYYY-MM-DD "
                f"(or a date in the file name), found neither")
        clock = _stamps(["1970-01-01"] * len(clock), clock) - np.datetime64("1970-01-01", "ns")
        # Past midnight the clock goes back: a step back of more than 12 h is the next day.
        sod = clock.astype("timedelta64[s]").astype(np.int64)
        day = np.concatenate([[0], np.cumsum(np.diff(sod) < -12 * 3600)])
        return np.datetime64(start, "ns") + day.astype("timedelta64[D]") + clock
    if fmt == "vllm":
        if year is None:
            year = dt.datetime.fromtimestamp(path.stat().st_mtime).year
            logger.warning("%s: vLLM dates have no year; assuming %d (the file's modification year); "
                           "pass --year to set it", path, year)
        month = np.array([int(d[:2]) for d in dates])
        roll = np.concatenate([[0], np.cumsum(np.diff(month) < -6)])  # December -> January
        return _stamps([f"{year + k}-{d}" for k, d in zip(roll.tolist(), dates)], clock)
    return _stamps(dates, clock)


def _stamps(dates: list[str], clock: list[str]) -> np.ndarray:
    text = [f"{d} {c}" for d, c in zip(dates, clock)]
    return pd.to_datetime(text, format="%Y-%m-%d %H:%M:%S").to_numpy(dtype="datetime64[ns]")


def _date_from_name(path: Path) -> Optional[dt.date]:
    m = re.search(r"(\d{4})-(\d{2})-(\d{2})", path.name)
    if not m:
        return None
    try:
        return dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


