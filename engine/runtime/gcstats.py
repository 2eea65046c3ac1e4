"""Python garbage-collection counts and pause times, from `gc.callbacks`.

One monitor per process (the collector is per process): `gc_monitor()` installs it on first
use. Its callback runs at the start and end of every collection, automatic or explicit, and
costs two `perf_counter` calls and a few additions per collection.
"""

from __future__ import annotations

import gc
import time
from typing import NamedTuple


class GcStats(NamedTuple):
    gen0_collections: int  # collections of each generation seen since the monitor started
    gen1_collections: int
    gen2_collections: int  # full collections
    pause_s_total: float  # wall time inside all collections
    full_pause_s_total: float  # of which in full collections
    last_full_pause_s: float | None  # the latest full collection's pause; None before one
    max_pause_s: float
    collected_total: int  # objects the collector freed


class GcMonitor:
    def __init__(self) -> None:
        self._counts = [0, 0, 0]
        self._pause = self._full_pause = self._max = 0.0
        self._last_full: float | None = None
        self._collected = 0
        self._start: float | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        if self._start is None:
            return
        pause = time.perf_counter() - self._start
        self._start = None
        generation = info.get("generation", 0)
        # No lock: a collection can start inside stats() on the same thread, and the GIL already
        # makes each update atomic enough for counters read every few seconds.
        self._counts[generation] += 1
        self._pause += pause
        self._max = max(self._max, pause)
        self._collected += info.get("collected", 0)
        if generation == 2:
            self._full_pause += pause
            self._last_full = pause

    def stats(self) -> GcStats:
        gen0, gen1, gen2 = self._counts
        return GcStats(
            gen0_collections=gen0,
            gen1_collections=gen1,
            gen2_collections=gen2,
            pause_s_total=self._pause,
            full_pause_s_total=self._full_pause,
            last_full_pause_s=self._last_full,
            max_pause_s=self._max,
            collected_total=self._collected,
        )


_monitor: GcMonitor | None = None


def gc_monitor() -> GcMonitor:
    """The process's monitor, installed in `gc.callbacks` on the first call."""
    global _monitor
    if _monitor is None:
        _monitor = GcMonitor()
        gc.callbacks.append(_monitor)
    return _monitor
