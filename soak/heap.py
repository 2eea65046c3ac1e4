"""The driver's memory: one allocator for what it builds, and what it freed handed back after
every flush.

A flush writes Parquet parts and, every 16 flushes, merges them (rundir.parts): tables of a few
MB built and dropped. pyarrow's C++ code allocates them from its bundled mimalloc by default,
whose per-thread heaps keep freed pages (arrow's reader threads among them) and which glibc's
malloc_trim does not reach: in a 103-minute soak its region of the driver grew 9 -> 22 MB from
the first level-2 merge (minute 46) on, while everything else stayed flat, and a store written as
a 12-hour soak's (4,320 flushes) held 79-85 MB of anonymous memory with it against 67 MB with the
system allocator (docs/soak.md, "Memory of a long run"). So the soak runs pyarrow on the system allocator
(`use_system_allocator_for_arrow`, before pyarrow is imported), and hands glibc's free pages back
after every flush: handing them back kept a 4-hour store replay at 123-128 MB from minute 20 on
where it read 117 -> 132-158 MB without. About 6 ms a call, on the soak's event loop once a flush
(`flush_every_s`, 10 s).
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from collections.abc import Callable

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"  # read once, when pyarrow picks its default pool


def use_system_allocator_for_arrow() -> bool:
    """pyarrow's default memory pool becomes the system allocator (a user's own choice in
    ARROW_DEFAULT_MEMORY_POOL is kept). Takes effect only before pyarrow is imported: returns
    whether it could."""
    if "pyarrow" in sys.modules:
        return False
    os.environ.setdefault(ARROW_POOL_VARIABLE, "system")
    return True


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim; None elsewhere (musl and friends, macOS)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def give_back_freed_memory() -> None:
    """pyarrow's unused pool memory and glibc's free pages back to the system (glibc only)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
