"""Typed results of the engine's instrumentation hooks that no single component owns."""

from __future__ import annotations

from typing import NamedTuple


class MambaStats(NamedTuple):
    num_slots: int  # state slots in the pool
    num_free: int
    num_live: int  # held by running requests
    num_snapshots: int  # held by the prefix cache as snapshots
    num_pinned: int  # snapshots pinned by a running request's lock
    num_anchored: int  # snapshots the cache accepted since start
    num_evicted: int  # snapshots evicted since start
    num_leaked: int = 0  # state slots held by nobody (the snapshot-leak fault)
