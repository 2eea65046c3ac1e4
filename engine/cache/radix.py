"""Radix prefix cache over token ids (`radix`), and its hybrid form with state snapshots
(`hybrid_radix`), after SGLang's radix and mamba radix caches.

Keys are compared in whole pages. A node's edge holds a run of pages of tokens and the KV slot
of each token; the path root..node spells a cached prefix:

    root ─[a b c d]─ n1 ─[e f]─ n2        prefix "abcdef" ends at n2
                      └─[x y]─ n3        prefix "abcdxy" ends at n3

Linear-attention state cannot be rebuilt from KV, so the hybrid cache keeps state snapshots
(state slots) anchored at node ends, and a match stops at the deepest matched node that holds
one. Counters behind `cache_report()` and `mamba_stats()` move with every change, so the hooks
cost O(1); only `max_depth` walks the tree, once per structural change, when it is read.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from engine.cache.base import (
    _EMPTY,
    CacheReport,
    EvictionCounters,
    Ids,
    IndexMemory,
    InsertResult,
    MambaCacheStats,
    MatchResult,
    PrefixCache,
)
from engine.cache.eviction import make_eviction_policy
from engine.cache.integrity import check_radix
from engine.cache.tree import TreeNode
from engine.errors import EngineError
from engine.memory.allocator import IntegrityError, SlotAllocator


class RadixCache(PrefixCache):
    """`cache_type='radix'`: KV prefix reuse only. Suits models without linear-attention layers."""

    cache_type = "radix"

    def __init__(
        self,
        kv_allocator: SlotAllocator,
        state_allocator: SlotAllocator | None = None,
        eviction_policy: str = "lru",
        leak_snapshots_limit: int | None = None,
    ) -> None:
        self.kv_allocator = kv_allocator
        self.state_allocator = state_allocator
        self.page_size = kv_allocator.page_size
        self.eviction_policy = eviction_policy
        if self.keeps_snapshots and state_allocator is None:
            raise EngineError(f"{self.cache_type} cache needs a state-slot allocator, got None")
        self.root = TreeNode(np.empty(0, np.int64), _EMPTY, None)
        self.root.lock_ref = 1  # never evicted, never counted
        self._kv_policy = make_eviction_policy(eviction_policy, self._is_evictable_leaf, self.root, self.page_size)
        # a snapshot goes whole, with its node's end: a page-granular policy leaves it to the heap
        self._snapshot_policy = make_eviction_policy(
            "lru" if self._kv_policy.evicts_pages else eviction_policy, self._is_evictable_snapshot, self.root
        )
        self._clock = 0
        self._num_nodes = 0
        self._num_leaves = 0
        self._evictable = 0
        self._locked = 0
        self._num_snapshots = 0
        self._num_pinned = 0
        self._anchored = self._unused = self._snap_evicted = self._snap_with_kv = 0
        self._evicted_tokens = self._queried = self._matched = 0
        self._max_depth: int | None = 0  # None = recompute on the next read
        self._evict_calls = 0
        self._evict_s = 0.0
        self._truncated = 0
        # snapshot-leak fault: None = off; else at most this many dropped snapshots' slots are
        # kept here, never freed, never evictable (check_integrity counts them as leaked)
        self._leak_limit = leak_snapshots_limit
        self._leaked: list[int] = []

    # --- public API -------------------------------------------------------------------------

    def match_prefix(self, token_ids: Ids) -> MatchResult:
        key = self._key(token_ids)
        self._queried += len(token_ids)
        path, partial = self._walk(key)
        path = self._use(path, partial)
        if not path:
            return MatchResult(0, _EMPTY, None, None)
        self._clock += 1
        for node in path:
            self._touch(node)
        cached_len = sum(len(n.key) for n in path)
        self._matched += cached_len
        return MatchResult(cached_len, torch.cat([n.value for n in path]), path[-1], path[-1].snapshot)

    def insert(self, token_ids: Ids, kv_slot_ids: Ids, snapshot_slot: int | None = None) -> InsertResult:
        key = self._key(token_ids)
        n_key = len(key)
        value = torch.as_tensor(kv_slot_ids, dtype=torch.int64).reshape(-1)  # [>= n_key]
        if len(value) < n_key:
            raise EngineError(f"insert: {n_key} page-aligned tokens but only {len(value)} KV slots")
        self._clock += 1
        node, pos, dups = self.root, 0, []
        prefix_len = n_key
        while pos < n_key:
            child = node.children.get(key[pos : pos + self.page_size].tobytes())
            if child is None:
                prefix_len = pos
                node = self._add_leaf(node, key[pos:], value[pos:n_key].clone())
                break
            n = self._common_len(child.key, key[pos:])
            if n < len(child.key):
                child = self._split(child, n)
            mine = value[pos : pos + n]  # [n]
            differ = mine != child.value  # [n]
            if bool(differ.any()):
                dups.append(mine[differ])
            self._touch(child)
            node, pos = child, pos + n
        unused = self._adopt_snapshot(node, snapshot_slot, aligned=n_key == len(token_ids))
        return InsertResult(
            prefix_len=prefix_len,
            cached_len=n_key,
            dup_kv_slot_ids=torch.cat(dups) if dups else _EMPTY,
            node=node if node is not self.root else None,
            unused_snapshot_slot=unused,
        )

    def inc_lock(self, node: TreeNode | None) -> None:
        if node is None or node is self.root:
            return
        node.direct_locks += 1
        if node.direct_locks == 1 and node.snapshot is not None:
            self._num_pinned += 1
        while node is not self.root:
            if node.lock_ref == 0:
                self._evictable -= len(node.key)
                self._locked += len(node.key)
            node.lock_ref += 1
            node = node.up

    def dec_lock(self, node: TreeNode | None) -> None:
        if node is None or node is self.root:
            return
        if node.direct_locks <= 0 or not node.alive:
            raise IntegrityError(f"dec_lock on {node} without a matching inc_lock")
        node.direct_locks -= 1
        if node.direct_locks == 0 and node.snapshot is not None:
            self._num_pinned -= 1
            self._snapshot_policy.touch(node)
        while node is not self.root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable += len(node.key)
                self._locked -= len(node.key)
                if node.is_leaf:
                    self._kv_policy.touch(node)
            node = node.up

    def evict(self, num_tokens: int) -> int:
        start = time.perf_counter()
        self._evict_calls += 1
        freed: list[torch.Tensor] = []
        num_freed = 0
        by_page = self._kv_policy.evicts_pages
        while num_freed < num_tokens:
            leaf = self._kv_policy.pop()
            if leaf is None:
                break
            if by_page and len(leaf.key) > self.page_size:
                freed.append(self._cut_tail(leaf))
                num_freed += self.page_size
                continue
            freed.append(leaf.value)
            num_freed += len(leaf.key)
            self._remove_leaf(leaf)
        if freed:
            self.kv_allocator.free(torch.cat(freed))
            self._evicted_tokens += num_freed
        self._evict_s += time.perf_counter() - start
        return num_freed

    def evict_snapshots(self, num: int) -> int:
        start = time.perf_counter()
        self._evict_calls += 1
        slots: list[int] = []
        while len(slots) < num:
            node = self._snapshot_policy.pop()
            if node is None:
                break
            assert node.snapshot is not None  # the snapshot policy's candidates hold one
            slots.append(node.snapshot)
            node.snapshot = None
        if slots:
            assert self.state_allocator is not None
            self._num_snapshots -= len(slots)
            self._snap_evicted += len(slots)
            self._free_snapshot_slots(slots)
        self._evict_s += time.perf_counter() - start
        return len(slots)

    def path_kv_slot_ids(self, node: TreeNode | None) -> torch.Tensor:
        parts = []
        while node is not None and node is not self.root:
            parts.append(node.value)
            node = node.parent
        return torch.cat(parts[::-1]) if parts else _EMPTY

    @property
    def evictable_tokens(self) -> int:
        return self._evictable

    @property
    def num_evictable_snapshots(self) -> int:
        return self._num_snapshots - self._num_pinned

    def cache_report(self) -> CacheReport:
        if self._max_depth is None:
            self._max_depth = self._compute_max_depth()
        return CacheReport(
            num_nodes=self._num_nodes,
            num_leaves=self._num_leaves,
            max_depth=self._max_depth,
            cached_tokens=self._evictable + self._locked,
            evictable_tokens=self._evictable,
            locked_tokens=self._locked,
            num_snapshots=self._num_snapshots,
            evicted_tokens=self._evicted_tokens,
            queried_tokens=self._queried,
            matched_tokens=self._matched,
        )

    def mamba_stats(self) -> MambaCacheStats:
        return MambaCacheStats(
            num_snapshots=self._num_snapshots,
            num_pinned=self._num_pinned,
            num_anchored=self._anchored,
            num_unused=self._unused,
            num_evicted=self._snap_evicted,
            num_freed_with_kv=self._snap_with_kv,
            num_leaked=len(self._leaked),
        )

    def index_memory(self) -> IndexMemory:
        # The eviction-scan fault's page cuts leave a leaf views of its old arrays: count each
        # buffer once, whole, as it is held.
        keys: dict[int, int] = {}  # id of the array owning the memory -> bytes
        values: dict[int, int] = {}  # storage address -> bytes
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            owner = node.key if node.key.base is None else node.key.base
            keys[id(owner)] = owner.nbytes
            storage = node.value.untyped_storage()
            values[storage.data_ptr()] = storage.nbytes()
        heap = self._kv_policy.num_entries + self._snapshot_policy.num_entries
        return IndexMemory(self._num_nodes, sum(keys.values()) + sum(values.values()), heap)

    @property
    def num_truncated_tokens(self) -> int:
        return self._truncated

    @property
    def eviction_s(self) -> float:
        return self._evict_s

    def eviction_counters(self) -> EvictionCounters:
        return EvictionCounters(
            self._evict_calls, self._kv_policy.num_visited + self._snapshot_policy.num_visited, self._evict_s
        )

    def check_integrity(self, kv_in_use: int | None = None, state_in_use: int | None = None) -> None:
        check_radix(self, kv_in_use, state_in_use)

    # --- private: walking and matching ------------------------------------------------------

    def _key(self, token_ids: Ids) -> np.ndarray:
        if isinstance(token_ids, torch.Tensor):
            ids = token_ids.detach().to("cpu", torch.int64).numpy().reshape(-1)
        else:
            ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        return ids[: len(ids) - len(ids) % self.page_size]  # [whole pages]

    def _common_len(self, a: np.ndarray, b: np.ndarray) -> int:
        """Tokens of whole pages that a and b share at their start."""
        m = min(len(a), len(b))
        differ = np.flatnonzero(a[:m] != b[:m])  # [mismatches]
        n = int(differ[0]) if len(differ) else m
        return n - n % self.page_size

    def _walk(self, key: np.ndarray) -> tuple[list[TreeNode], tuple[TreeNode, int] | None]:
        """Nodes whose whole key matches along `key`, then (next node, tokens matched into it)."""
        node, pos = self.root, 0
        path: list[TreeNode] = []
        while pos < len(key):
            child = node.children.get(key[pos : pos + self.page_size].tobytes())
            if child is None:
                break
            n = self._common_len(child.key, key[pos:])
            if n < len(child.key):
                return path, (child, n)
            path.append(child)
            node, pos = child, pos + n
        return path, None

    def _use(self, path: list[TreeNode], partial: tuple[TreeNode, int] | None) -> list[TreeNode]:
        """The matched nodes to serve: radix splits a partly matched node and serves it too."""
        if partial is not None:
            path.append(self._split(*partial))
        return path

    def _touch(self, node: TreeNode) -> None:
        node.last_access = self._clock
        self._kv_policy.touch(node)
        if node.snapshot is not None:
            self._snapshot_policy.touch(node)

    # --- private: changing the tree ---------------------------------------------------------

    def _split(self, node: TreeNode, n: int) -> TreeNode:
        """Cut `node`'s edge after n tokens; the new upper node is returned. A snapshot stays
        with `node`, whose end does not move. Both halves get their own arrays: as views of the
        old ones, either would keep the other's tokens in memory after that one is evicted."""
        parent = node.up
        upper = TreeNode(node.key[:n].copy(), node.value[:n].clone(), parent, node.last_access)
        upper.lock_ref = node.lock_ref  # the locks through node pass through upper
        parent.children[node.key[: self.page_size].tobytes()] = upper
        node.key, node.value, node.parent = node.key[n:].copy(), node.value[n:].clone(), upper
        upper.children[node.key[: self.page_size].tobytes()] = node
        self._num_nodes += 1
        self._max_depth = None
        return upper

    def _add_leaf(self, parent: TreeNode, key: np.ndarray, value: torch.Tensor) -> TreeNode:
        leaf = TreeNode(key.copy(), value, parent, self._clock)
        if parent is self.root or not parent.is_leaf:
            self._num_leaves += 1
        parent.children[key[: self.page_size].tobytes()] = leaf
        self._num_nodes += 1
        self._evictable += len(key)
        self._max_depth = None
        self._kv_policy.touch(leaf)
        return leaf

    def _remove_leaf(self, leaf: TreeNode) -> None:
        parent = leaf.up
        del parent.children[leaf.key[: self.page_size].tobytes()]
        leaf.alive = False
        self._num_nodes -= 1
        self._evictable -= len(leaf.key)
        self._max_depth = None
        self._drop_snapshot_with_kv(leaf)
        if parent is self.root or not parent.is_leaf:
            self._num_leaves -= 1
        else:
            self._kv_policy.touch(parent)

    def _cut_tail(self, leaf: TreeNode) -> torch.Tensor:
        """Cut the last page off `leaf` (which keeps at least one) and return its KV slots. A
        snapshot at the leaf's end goes with it, as when the whole leaf is evicted.

            before: ─[a b c d]─ leaf (snapshot after d)     after: ─[a b c]─ leaf (no snapshot)
        """
        n = len(leaf.key) - self.page_size
        cut = leaf.value[n:]  # [page_size]
        leaf.key, leaf.value = leaf.key[:n], leaf.value[:n]
        self._evictable -= self.page_size
        self._drop_snapshot_with_kv(leaf)
        return cut

    def _drop_snapshot_with_kv(self, node: TreeNode) -> None:
        if node.snapshot is not None:
            assert self.state_allocator is not None
            self._free_snapshot_slots([node.snapshot])
            node.snapshot = None
            self._num_snapshots -= 1
            self._snap_with_kv += 1

    def _adopt_snapshot(self, node: TreeNode, slot: int | None, aligned: bool) -> int | None:
        if slot is None:
            return None
        if not self.keeps_snapshots or node is self.root or not aligned or node.snapshot is not None:
            self._unused += 1
            return slot
        node.snapshot = slot
        self._num_snapshots += 1
        self._anchored += 1
        if node.direct_locks > 0:
            self._num_pinned += 1
        self._snapshot_policy.touch(node)
        return None

    def leak_snapshots(self, limit: int) -> None:
        """Switch the snapshot-leak fault on from now: up to `limit` state slots of the snapshots
        dropped from now on are kept, never freed (the fault's onset, `fault_leak_after`)."""
        self._leak_limit = limit

    def _free_snapshot_slots(self, slots: list[int]) -> None:
        """Return dropped snapshots' state slots; with the snapshot-leak fault, keep them instead
        while fewer than the limit are leaked."""
        if self._leak_limit is not None:
            keep = max(0, min(len(slots), self._leak_limit - len(self._leaked)))
            self._leaked.extend(slots[:keep])
            slots = slots[keep:]
        if slots:
            assert self.state_allocator is not None
            self.state_allocator.free(slots)

    # --- private: predicates and checks -----------------------------------------------------

    def _is_evictable_leaf(self, node: TreeNode) -> bool:
        return node.alive and node.lock_ref == 0 and not node.children

    def _is_evictable_snapshot(self, node: TreeNode) -> bool:
        return node.alive and node.snapshot is not None and node.direct_locks == 0

    def _compute_max_depth(self) -> int:
        """Longest root-to-leaf path in nodes: O(nodes), run only after the shape changed."""
        deepest, stack = 0, [(self.root, 0)]
        while stack:
            node, depth = stack.pop()
            deepest = max(deepest, depth)
            stack.extend((c, depth + 1) for c in node.children.values())
        return deepest


class HybridRadixCache(RadixCache):
    """`cache_type='hybrid_radix'`: KV prefixes plus linear-attention state snapshots.

    A match ends at the deepest matched node holding a snapshot: the KV past it is useless
    without the state at its end. Nodes are not split on match (a snapshot sits at a node end).
    """

    cache_type = "hybrid_radix"
    keeps_snapshots = True

    def _use(self, path: list[TreeNode], partial: tuple[TreeNode, int] | None) -> list[TreeNode]:
        dropped = partial[1] if partial is not None else 0
        for i in range(len(path) - 1, -1, -1):
            if path[i].snapshot is not None:
                self._truncated += dropped
                return path[: i + 1]
            dropped += len(path[i].key)
        self._truncated += dropped
        return []
