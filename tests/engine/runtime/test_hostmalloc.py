"""The CPU engine raises glibc's malloc thresholds once, and leaves a user's own settings alone."""

import platform
import sys

import pytest

from engine.runtime import hostmalloc

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                           reason="mallopt is glibc's")


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
