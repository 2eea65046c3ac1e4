"""One consistent reading of the engine's hooks, taken on the engine thread between two steps.

`/metrics` and `/v1/cache/status` both read it; `as_json()` is the cache-status body.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from engine.cache.base import CacheReport
from engine.memory.allocator import AllocatorSummary
from engine.moe.expert_cache import ExpertCacheStats
from engine.runtime.engine import Engine
from engine.runtime.faults import FaultStats
from engine.runtime.gcstats import GcStats
from engine.runtime.hooks import MambaStats
from engine.runtime.hostmalloc import HeapStats, heap_stats


class EngineSnapshot(NamedTuple):
    engine_age_s: float
    last_step: int
    num_running: int
    num_waiting: int
    kv_total_tokens: int
    kv_used_tokens: int  # held by requests and the cache
    kv_usage: float  # (used - evictable) / total, as the engine log's `token usage`
    max_context: int
    num_retractions: int
    num_dropped: int  # requests refused as longer than the context
    cache: CacheReport
    mamba: MambaStats
    allocator: AllocatorSummary
    experts: ExpertCacheStats | None  # None with the resident MoE backend
    config: dict[str, Any]
    integrity: str | None = None  # "ok" or the failed check's message; None when not checked
    faults: FaultStats | None = None  # the degradation mechanisms' signals (docs/faults.md)
    gc: GcStats | None = None  # Python GC collections and pause times
    heap: HeapStats | None = None  # what glibc's malloc holds: in use, and freed but kept (hostmalloc.py)


def take_snapshot(engine: Engine, check: bool = False) -> EngineSnapshot:
    """Read every hook; call on the engine thread (EngineRunner.call)."""
    integrity = None
    if check:
        try:
            engine.check_integrity()
            integrity = "ok"
        except Exception as exc:  # the message carries the numbers that disagree
            integrity = f"{type(exc).__name__}: {exc}"
    cache = engine.cache_report()
    kv = engine.kv_allocator
    return EngineSnapshot(
        engine_age_s=engine.engine_age_s,
        last_step=engine.num_steps,
        num_running=len(engine.scheduler.running),
        num_waiting=len(engine.scheduler.waiting),
        kv_total_tokens=kv.num_slots,
        kv_used_tokens=kv.num_used,
        kv_usage=(kv.num_used - cache.evictable_tokens) / kv.num_slots,
        max_context=engine.max_context,
        num_retractions=engine.scheduler.num_retractions,
        num_dropped=engine.num_dropped,
        cache=cache,
        mamba=engine.mamba_stats(),
        allocator=engine.allocator_summary(),
        experts=engine.expert_cache_stats(),
        config=dataclasses.asdict(engine.config) | {"checkpoint": engine.checkpoint, "device": str(engine.device)},
        integrity=integrity,
        faults=engine.fault_stats(),
        gc=engine.gc_stats(),
        heap=heap_stats(),
    )


def as_json(snap: EngineSnapshot) -> dict[str, Any]:
    experts = None
    if snap.experts is not None:
        experts = snap.experts._asdict() | {"per_layer": [layer._asdict() for layer in snap.experts.per_layer]}
    out = {
        "engine_age_s": round(snap.engine_age_s, 3),
        "last_step": snap.last_step,
        "num_running": snap.num_running,
        "num_waiting": snap.num_waiting,
        "kv_total_tokens": snap.kv_total_tokens,
        "kv_used_tokens": snap.kv_used_tokens,
        "kv_usage": snap.kv_usage,
        "max_context": snap.max_context,
        "num_retractions": snap.num_retractions,
        "num_dropped": snap.num_dropped,
        "cache_report": snap.cache._asdict(),
        "mamba_stats": snap.mamba._asdict(),
        "allocator_summary": snap.allocator._asdict(),
        "expert_cache_stats": experts,
        "config": snap.config,
    }
    if snap.faults is not None:
        out["fault_stats"] = snap.faults._asdict() | {"faults": list(snap.faults.faults)}
    if snap.gc is not None:
        out["gc"] = snap.gc._asdict()
    if snap.heap is not None:
        out["heap"] = snap.heap._asdict()
    if snap.integrity is not None:
        out["integrity"] = snap.integrity
    return out
