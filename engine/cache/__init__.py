"""Prefix caches: `hybrid_radix` (default), `radix`, `none`. Build one with `make_prefix_cache`."""

from __future__ import annotations

from engine.cache.base import (
    CacheReport,
    EvictionCounters,
    InsertResult,
    MambaCacheStats,
    MatchResult,
    NoPrefixCache,
    PrefixCache,
)
from engine.cache.eviction import EVICTION_POLICIES
from engine.cache.radix import HybridRadixCache, RadixCache
from engine.errors import EngineError
from engine.memory.allocator import SlotAllocator

_RADIX_CACHES: dict[str, type[RadixCache]] = {c.cache_type: c for c in (HybridRadixCache, RadixCache)}
CACHE_TYPES: dict[str, type[PrefixCache]] = {**_RADIX_CACHES, NoPrefixCache.cache_type: NoPrefixCache}

__all__ = [
    "CACHE_TYPES",
    "EVICTION_POLICIES",
    "CacheReport",
    "EvictionCounters",
    "HybridRadixCache",
    "InsertResult",
    "MambaCacheStats",
    "MatchResult",
    "NoPrefixCache",
    "PrefixCache",
    "RadixCache",
    "make_prefix_cache",
]


def make_prefix_cache(
    cache_type: str,
    kv_allocator: SlotAllocator,
    state_allocator: SlotAllocator | None = None,
    eviction_policy: str = "lru",
    leak_snapshots_limit: int | None = None,
) -> PrefixCache:
    """The cache named by `cache_type`, freeing what it evicts through the given allocators.

    `leak_snapshots_limit` (the snapshot-leak fault; None = off): up to this many state slots of
    evicted snapshots are never freed."""
    if cache_type == "none":
        return NoPrefixCache(kv_allocator.page_size)
    if cache_type not in CACHE_TYPES:
        raise EngineError(f"cache_type must be one of {', '.join(CACHE_TYPES)}; got {cache_type!r}")
    return _RADIX_CACHES[cache_type](kv_allocator, state_allocator, eviction_policy, leak_snapshots_limit)
