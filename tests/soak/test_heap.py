"""The driver gives back memory it freed (soak/heap.py): pages malloc kept after a free leave the RSS."""

import sys

import numpy as np
import psutil
import pytest

from soak.heap import give_back_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_pages_leave_the_rss():
    # 100 KB blocks stay in malloc's heap (below its mmap threshold); freeing every other one leaves
    # holes that no trim of the heap's top can return: only malloc_trim's page-wise release can.
    blocks = [np.ones(100 * 1024 // 8) for _ in range(2000)]  # ~200 MB, touched
    del blocks[::2]
    rss = psutil.Process().memory_info().rss
    give_back_freed_memory()
    after = psutil.Process().memory_info().rss
    assert rss - after > 50 * 2**20, (rss >> 20, after >> 20)
    assert all(b[0] == 1.0 for b in blocks)  # what is still held is untouched
