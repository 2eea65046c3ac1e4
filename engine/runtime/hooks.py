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


class MemoryReport(NamedTuple):
    """What the engine holds in host memory besides its preallocated pools and weights. Every
    figure is bounded: by the live requests, the KV pool's pages or a configured queue length
    (docs/soak.md, "Memory of a long run")."""

    num_requests: int  # live requests, waiting or running; a finished one is dropped at once
    num_pending_updates: int  # requests with output not yet taken by take_updates()
    radix_nodes: int  # at most the KV pool's pages
    cached_tokens: int  # at most the KV pool's tokens
    radix_index_bytes: int  # the tree's token and KV-slot arrays, 16 bytes per cached token
    eviction_heap_entries: int  # KV and snapshot heaps, each compacted past max(1024, 2 x live entries)
    kv_released_runs: int  # freed page arrays not yet merged, at most the pages they hold
    allocator_events: int  # queued KV alloc/free events, at most max_events; 0 unless enabled
    retained_requests: int  # finished requests kept by the gc-pressure fault; 0 without it
