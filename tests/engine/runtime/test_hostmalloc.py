"""The CPU engine raises glibc's malloc thresholds once, and leaves a user's own settings alone."""

import platform
import sys

import pytest

from engine.runtime import hostmalloc

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's"
)


@glibc
def test_thresholds_are_set_on_glibc(monkeypatch):
    monkeypatch.setattr(hostmalloc, "_done", False)
    for name in [k for k in __import__("os").environ if k.startswith("MALLOC_")]:
        monkeypatch.delenv(name)
    assert hostmalloc.tune_host_malloc() is True
    assert hostmalloc.tune_host_malloc() is True  # idempotent


def test_user_malloc_settings_win(monkeypatch):
    monkeypatch.setattr(hostmalloc, "_done", False)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1048576")
    assert hostmalloc.tune_host_malloc() is False
    assert hostmalloc._done is False


@glibc
def test_heap_stats_see_a_block_come_and_go():
    if hostmalloc.heap_stats() is None:
        pytest.skip("mallinfo2 needs glibc 2.33")
    held = lambda s: s.in_use_bytes + s.mmap_bytes  # in an arena or mapped on its own, by size
    before = hostmalloc.heap_stats()
    block = bytearray(8 * 2**20)
    during = hostmalloc.heap_stats()
    del block
    after = hostmalloc.heap_stats()
    assert held(during) - held(before) > 7 * 2**20  # other objects come and go meanwhile
    assert held(during) - held(after) > 7 * 2**20
