"""The prefix-cache interface the scheduler talks to, its result types, and the `none` cache.

Ownership rules, the whole contract between a cache and its caller:

- KV slots: after `insert`, the cache owns the slots of positions [0, cached_len) of the
  inserted tokens. `dup_kv_slot_ids` are the caller's slots for positions that were already
  cached under other slots: the caller frees them (and, if the request goes on, uses
  `path_kv_slot_ids(node)` instead). Slots past `cached_len` stay the caller's.
- State slots: a snapshot passed to `insert` belongs to the cache unless it comes back as
  `unused_snapshot_slot`, which the caller frees. `match_prefix` returns the cache's snapshot
  slot; the caller copies it into the request's own slot (the cache never touches tensors).
- The cache frees what it evicts through the allocators it was given.
- `inc_lock(node)` keeps the path root..node from KV eviction and pins node's snapshot
  (if any) until the matching `dec_lock(node)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

if TYPE_CHECKING:
    from engine.cache.tree import TreeNode

# A run of token ids (or KV slot ids) as callers hold them: a list, a numpy array or a tensor.
Ids = Sequence[int] | np.ndarray | torch.Tensor


class MatchResult(NamedTuple):
    cached_len: int  # prompt tokens served from the cache (a multiple of page_size)
    kv_slot_ids: torch.Tensor  # int64 [cached_len], the cache's slots: read, never free
    node: TreeNode | None  # lock this while the request uses the prefix; None = nothing matched
    state_slot: int | None  # hybrid: snapshot at cached_len to copy into the request's slot


class InsertResult(NamedTuple):
    prefix_len: int  # tokens that were cached before this insert
    cached_len: int  # tokens cached now: the page-aligned length inserted (0 for `none`)
    dup_kv_slot_ids: torch.Tensor  # int64: caller's slots duplicating cached ones; caller frees
    node: TreeNode | None  # the node ending at cached_len (lock it to keep the prefix)
    unused_snapshot_slot: int | None  # snapshot the cache did not keep; caller frees it


class CacheReport(NamedTuple):
    num_nodes: int  # radix nodes, root excluded
    num_leaves: int
    max_depth: int  # nodes on the longest root-to-leaf path
    cached_tokens: int  # = evictable_tokens + locked_tokens
    evictable_tokens: int  # in nodes no running request locks
    locked_tokens: int
    num_snapshots: int
    evicted_tokens: int  # since start
    queried_tokens: int  # tokens passed to match_prefix since start
    matched_tokens: int  # of those, served from the cache

    @classmethod
    def empty(cls, queried_tokens: int = 0) -> CacheReport:
        """A cache that holds nothing (and has matched nothing of what it was asked)."""
        return cls(
            num_nodes=0,
            num_leaves=0,
            max_depth=0,
            cached_tokens=0,
            evictable_tokens=0,
            locked_tokens=0,
            num_snapshots=0,
            evicted_tokens=0,
            queried_tokens=queried_tokens,
            matched_tokens=0,
        )


class MambaCacheStats(NamedTuple):
    num_snapshots: int  # state slots the cache holds now
    num_pinned: int  # of those, pinned by a lock (not evictable)
    num_anchored: int  # snapshots accepted by insert since start
    num_unused: int  # snapshots insert handed back (a snapshot already there, unaligned end)
    num_evicted: int  # snapshots freed by evict_snapshots
    num_freed_with_kv: int  # snapshots freed because their KV leaf was evicted
    num_leaked: int = 0  # state slots of dropped snapshots never freed (the snapshot-leak fault)


class IndexMemory(NamedTuple):
    """Host memory of the cache's index (the KV and states it points to live in the pools)."""

    num_nodes: int  # radix nodes, root excluded
    nbytes: int  # token and KV-slot arrays of the nodes, each buffer counted once
    num_heap_entries: int  # eviction heap entries (KV and snapshot), stale ones included


class EvictionCounters(NamedTuple):
    num_calls: int  # evict / evict_snapshots calls since start
    num_visited: int  # heap entries popped, tree nodes walked or pages scanned finding victims
    seconds: float  # wall time inside those calls


class PrefixCache:
    """A prefix cache over token ids. Subclasses: `RadixCache`, `HybridRadixCache`, `NoPrefixCache`.

    Not thread-safe: hooks (`cache_report`, `mamba_stats`) are cheap counter reads but must be
    called from the engine thread, or under the engine's lock.
    """

    cache_type = ""
    page_size = 1
    keeps_snapshots = False  # True where insert() adopts linear-attention state snapshots

    def match_prefix(self, token_ids: Ids) -> MatchResult:
        """Longest cached prefix of `token_ids` (whole pages; hybrid: ending at a snapshot).

        Match at most len(prompt) - 1 tokens so that one is left to compute logits from."""
        raise NotImplementedError

    def insert(self, token_ids: Ids, kv_slot_ids: Ids, snapshot_slot: int | None = None) -> InsertResult:
        """Cache the page-aligned prefix of `token_ids`, whose KV is in `kv_slot_ids` (at least
        that long). `snapshot_slot` holds the linear-attention state after all of `token_ids`;
        it is kept only by the hybrid cache when len(token_ids) is page-aligned and no snapshot
        sits there yet."""
        raise NotImplementedError

    def leak_snapshots(self, limit: int) -> None:
        """The snapshot-leak fault from now on (RadixCache); a cache without snapshots has none."""

    def inc_lock(self, node: TreeNode | None) -> None:
        """Protect root..node from eviction, and node's snapshot too."""

    def dec_lock(self, node: TreeNode | None) -> None:
        """Undo one `inc_lock(node)`."""

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` KV slots from unlocked leaves, least recently used first:
        whole leaves, or with a page-granular policy (`lru_page_scan`) exactly the pages that
        hold `num_tokens`, cut from leaf tails. Returns the number freed (less when not enough
        is evictable)."""
        return 0

    def evict_snapshots(self, num: int) -> int:
        """Free up to `num` unpinned snapshots, least recently used first. Returns the number."""
        return 0

    def path_kv_slot_ids(self, node: TreeNode | None) -> torch.Tensor:
        """The cache's KV slots for root..node, int64 [tokens]."""
        return _EMPTY

    @property
    def evictable_tokens(self) -> int:
        return 0

    @property
    def num_evictable_snapshots(self) -> int:
        return 0

    @property
    def num_truncated_tokens(self) -> int:
        """Matched KV tokens dropped since start because no snapshot ended them (hybrid)."""
        return 0

    def eviction_counters(self) -> EvictionCounters:
        return EvictionCounters(0, 0, 0.0)

    @property
    def eviction_s(self) -> float:
        """Wall time inside eviction since start (`eviction_counters().seconds`, cheaper)."""
        return 0.0

    def cache_report(self) -> CacheReport:
        return CacheReport.empty()

    def mamba_stats(self) -> MambaCacheStats:
        return MambaCacheStats(
            num_snapshots=0, num_pinned=0, num_anchored=0, num_unused=0, num_evicted=0, num_freed_with_kv=0
        )

    def index_memory(self) -> IndexMemory:
        """What the index holds in host memory. O(nodes): call every few seconds, not per step."""
        return IndexMemory(0, 0, 0)

    def check_integrity(self, kv_in_use: int | None = None, state_in_use: int | None = None) -> None:
        """Raise `IntegrityError` with the numbers when the cache disagrees with itself or with
        the allocators. `kv_in_use` / `state_in_use`: slots live requests hold outside the cache;
        when given, free + cached + in use must equal the total exactly."""


_EMPTY = torch.empty(0, dtype=torch.int64)


class NoPrefixCache(PrefixCache):
    """`cache_type='none'`: nothing is ever cached; every request owns all its slots."""

    cache_type = "none"

    def __init__(self, page_size: int = 1) -> None:
        self.page_size = page_size
        self._queried = 0

    def match_prefix(self, token_ids: Ids) -> MatchResult:
        self._queried += len(token_ids)
        return MatchResult(0, _EMPTY, None, None)

    def insert(self, token_ids: Ids, kv_slot_ids: Ids, snapshot_slot: int | None = None) -> InsertResult:
        return InsertResult(
            prefix_len=0, cached_len=0, dup_kv_slot_ids=_EMPTY, node=None, unused_snapshot_slot=snapshot_slot
        )

    def cache_report(self) -> CacheReport:
        return CacheReport.empty(self._queried)
