"""glibc malloc thresholds for CPU inference: keep a step's large temporaries in the heap.

A CPU forward allocates and frees tensors of 0.1-10 MB many times a step (a batch's
recurrent states, gathered K/V, chunked delta-rule blocks). With glibc's defaults a free
of such a block often hands the pages back to the kernel (munmap, or a heap trim), so the
next step page-faults the same megabytes in again. Fixed thresholds (an mmap threshold of
32 MB, glibc's ceiling, and a trim threshold of 256 MB) keep them in the heap: measured on
the default checkpoint, one torch thread, a batch-8 decode step went from 41-45 ms to
32-33 ms; batch 1 did not move. The price is the memory of the largest step's temporaries,
kept after the step: glibc then trims the main arena's top only past 256 MB, and a thread's
arena (the server's engine thread has one) only by whole free heaps at its end, its heaps being
64 MB, below the threshold. A served engine takes that memory before its first request
(engine/runtime/warmup.py: two full prompt chunks on the engine thread), so that its RSS is flat
from then on instead of stepping up whenever a larger prompt than any before comes (docs/soak.md,
"Memory of a long run"). Settings the user gave through MALLOC_*_ environment variables are kept.

`heap_stats()` reads what the arenas hold (glibc's mallinfo2), so that the retained free
memory can be told from memory in use.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from typing import NamedTuple

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # mallopt parameter numbers, from glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20  # glibc refuses more on 64-bit
TRIM_THRESHOLD = 256 * 2**20

_done = False


class HeapStats(NamedTuple):
    """glibc's malloc arenas, all of them summed (mallinfo2)."""

    arena_bytes: int  # taken from the system for the arenas' heaps (brk and thread-arena heaps)
    in_use_bytes: int  # of those, in allocated blocks
    free_bytes: int  # of those, freed but kept by malloc (the thresholds above say how much)
    mmap_bytes: int  # blocks above the mmap threshold, each mapped on its own and unmapped on free


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def tune_host_malloc() -> bool:
    """Set both thresholds once per process; False where there is no glibc or the user set them."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux") or any(
        k.startswith("MALLOC_") and k.endswith("THRESHOLD_") for k in os.environ
    ):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # musl and friends: nothing to tune
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
    if _done:
        logger.info(
            "host malloc: mmap threshold %d MB, trim threshold %d MB", MMAP_THRESHOLD >> 20, TRIM_THRESHOLD >> 20
        )
    return _done


def heap_stats() -> HeapStats | None:
    """What glibc's malloc holds now; None without glibc 2.33+ (musl, macOS). Walks every
    arena's free lists under their locks: call it every few seconds, not per step."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.argtypes, mallinfo2.restype = (), _MallInfo2
    info = mallinfo2()
    return HeapStats(info.arena, info.uordblks, info.fordblks, info.hblkhd)
