"""The engine's instrumentation hooks: what the server's /v1/cache/status and /metrics read
(`EngineHooks`, a part of `Engine`), and their typed results that no single component owns.
Each is cheap enough for every few seconds, none for every step; none changes the engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from engine.memory.allocator import AllocatorSummary, disorder
from engine.runtime.faults import FaultStats
from engine.runtime.gcstats import GcStats

if TYPE_CHECKING:
    from engine.cache.base import CacheReport, PrefixCache
    from engine.memory.allocator import AllocEvent, SlotAllocator
    from engine.model.attention_backend import TorchAttention
    from engine.model.experts import ExpertProvider
    from engine.moe.expert_cache import ExpertCacheStats
    from engine.runtime.config import EngineConfig
    from engine.runtime.faults import GcPressure, OutputBuffer
    from engine.runtime.gcstats import GcMonitor
    from engine.runtime.request import Request
    from engine.runtime.scheduler import Scheduler


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


class EngineHooks:
    """The hooks, as methods of `Engine` (which derives from this class): the parts of the engine
    they read are declared here and set by `Engine.__init__`."""

    config: EngineConfig
    cache: PrefixCache
    scheduler: Scheduler
    kv_allocator: SlotAllocator
    state_allocator: SlotAllocator
    experts: ExpertProvider
    attention: TorchAttention
    _requests: dict[str, Request]
    _updates: list[Request]
    _gc: GcMonitor
    _gc_pressure: GcPressure | None
    _output_buffer: OutputBuffer | None

    def cache_report(self) -> CacheReport:
        """Radix tree shape and cached / evictable / locked tokens (engine.cache.CacheReport)."""
        return self.cache.cache_report()

    def mamba_stats(self) -> MambaStats:
        """State slots: used by live requests and by snapshots, snapshots anchored and evicted."""
        snap = self.cache.mamba_stats()
        live = sum(1 for r in self.scheduler.running if r.state_slot is not None)
        return MambaStats(
            num_slots=self.state_allocator.num_slots,
            num_free=self.state_allocator.num_free,
            num_live=live,
            num_snapshots=snap.num_snapshots,
            num_pinned=snap.num_pinned,
            num_anchored=snap.num_anchored,
            num_evicted=snap.num_evicted,
            num_leaked=snap.num_leaked,
        )

    def allocator_summary(self) -> AllocatorSummary:
        return self.kv_allocator.summary()

    def enable_allocator_events(self, maxlen: int | None = None) -> None:
        self.kv_allocator.enable_events(maxlen or self.config.max_events)

    def take_allocator_events(self) -> list[AllocEvent]:
        return self.kv_allocator.take_events()

    def expert_cache_stats(self) -> ExpertCacheStats | None:
        """Expert cache hits, misses, evictions per layer; None with the resident backend."""
        return self.experts.stats()

    def fault_stats(self) -> FaultStats:
        """The degradation mechanisms' own signals (engine.runtime.faults.FaultStats), computed
        whether or not a fault is on. O(free KV pages + running context): call every few seconds."""
        evictions = self.cache.eviction_counters()
        pairs = breaks = 0.0
        for request in self.scheduler.running:
            n = min(request.num_computed, len(request.kv_slots))
            if n >= 2:
                pairs += n - 1
                breaks += disorder(request.kv_slots[:n]) * (n - 1)
        experts = self.expert_cache_stats()
        return FaultStats(
            faults=self.config.faults,
            eviction_calls_total=evictions.num_calls,
            eviction_nodes_visited_total=evictions.num_visited,
            eviction_s_total=evictions.seconds,
            state_slots_leaked=self.cache.mamba_stats().num_leaked,
            match_truncated_tokens_total=self.cache.num_truncated_tokens,
            kv_free_list_disorder=self.kv_allocator.free_list_disorder(),
            kv_gather_breaks=breaks / pairs if pairs else None,
            kv_gather_s_total=self.attention.gather_s,
            expert_miss_rate=experts.misses / (experts.hits + experts.misses)
            if experts is not None and experts.hits + experts.misses
            else None,
            expert_bytes_copied_total=experts.bytes_copied if experts is not None else None,
            expert_copy_s_total=experts.copy_s if experts is not None else None,
            retained_requests=len(self._gc_pressure.retained) if self._gc_pressure else 0,
            retained_objects=self._gc_pressure.num_objects if self._gc_pressure else 0,
            output_buffer_bytes=self._output_buffer.num_bytes if self._output_buffer else 0,
        )

    def memory_report(self) -> MemoryReport:
        """Sizes of the engine's host-side structures (engine.runtime.hooks.MemoryReport).
        O(radix nodes): call every few seconds, not per step."""
        index = self.cache.index_memory()
        return MemoryReport(
            num_requests=len(self._requests),
            num_pending_updates=len(self._updates),
            radix_nodes=index.num_nodes,
            cached_tokens=self.cache.cache_report().cached_tokens,
            radix_index_bytes=index.nbytes,
            eviction_heap_entries=index.num_heap_entries,
            kv_released_runs=self.kv_allocator.num_released_runs,
            allocator_events=self.kv_allocator.num_events_queued,
            retained_requests=len(self._gc_pressure.retained) if self._gc_pressure else 0,
        )

    def gc_stats(self) -> GcStats:
        """Python GC collections per generation and pause times since the process started the
        monitor (engine.runtime.gcstats.GcStats)."""
        return self._gc.stats()
