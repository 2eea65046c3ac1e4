"""The radix caches' invariants, checked by walking the tree (tests and `Engine.check_integrity`):
links and first-page keys, lock counts, the O(1) counters against what the tree holds, the
eviction policies' candidate sets, and the KV and state slots against their allocators."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from engine.cache.base import _EMPTY
from engine.memory.allocator import IntegrityError, SlotAllocator

if TYPE_CHECKING:  # the caches call this module
    from engine.cache.radix import RadixCache


def check_radix(cache: RadixCache, kv_in_use: int | None = None, state_in_use: int | None = None) -> None:
    """Raise IntegrityError naming the first invariant `cache` (a RadixCache) breaks."""
    nodes, leaves, kv_cand, snap_cand = [], 0, [], []
    evictable = locked = pinned = 0
    snapshots: list[int] = []
    stack = [cache.root]
    while stack:
        node = stack.pop()
        children_locks = 0
        for first, child in node.children.items():
            if child.parent is not node or not child.alive:
                raise IntegrityError(f"{child}: parent link or alive flag broken under {node}")
            if first != child.key[: cache.page_size].tobytes():
                raise IntegrityError(f"{child}: filed under a first page its key does not start with")
            children_locks += child.lock_ref
            stack.append(child)
        if node is cache.root:
            if node.snapshot is not None or node.lock_ref != 1:
                raise IntegrityError(f"root holds snapshot {node.snapshot}, lock_ref {node.lock_ref}")
            continue
        nodes.append(node)
        n = len(node.key)
        if n == 0 or n % cache.page_size or len(node.value) != n:
            raise IntegrityError(f"{node}: key of {n} tokens, {len(node.value)} slots, page_size {cache.page_size}")
        if node.direct_locks < 0 or node.lock_ref != node.direct_locks + children_locks:
            raise IntegrityError(
                f"{node}: lock_ref {node.lock_ref} != direct {node.direct_locks} + children {children_locks}"
            )
        leaves += node.is_leaf
        if node.lock_ref:
            locked += n
        else:
            evictable += n
        if cache._is_evictable_leaf(node):
            kv_cand.append(node)
        if node.snapshot is not None:
            if not cache.keeps_snapshots:
                raise IntegrityError(f"{node}: a {cache.cache_type} cache holds a snapshot")
            snapshots.append(node.snapshot)
            pinned += node.direct_locks > 0
            if cache._is_evictable_snapshot(node):
                snap_cand.append(node)
    counted = (
        cache._num_nodes,
        cache._num_leaves,
        cache._evictable,
        cache._locked,
        cache._num_snapshots,
        cache._num_pinned,
    )
    found = (len(nodes), leaves, evictable, locked, len(snapshots), pinned)
    if counted != found:
        raise IntegrityError(
            f"counters (nodes, leaves, evictable, locked, snapshots, pinned) {counted} != tree {found}"
        )
    cache._kv_policy.check(kv_cand)
    cache._snapshot_policy.check(snap_cand)
    kv = torch.cat([n.value for n in nodes]) if nodes else _EMPTY
    check_slots("KV", cache.kv_allocator, kv.numpy(), kv_in_use)
    if cache.state_allocator is not None:
        # leaked slots (snapshot-leak fault) are held, by nobody: counted, never free
        held = np.array(snapshots + cache._leaked, np.int64)
        check_slots("state", cache.state_allocator, held, state_in_use)


def check_slots(what: str, allocator: SlotAllocator, held: np.ndarray, in_use: int | None) -> None:
    """The slots a cache holds are distinct, none is free, and free + held (+ in use) add up."""
    if len(np.unique(held)) != len(held):
        raise IntegrityError(f"{what}: the cache holds {len(held) - len(np.unique(held))} slot(s) twice")
    if len(held) and allocator.is_free(held).any():
        raise IntegrityError(
            f"{what}: {int(allocator.is_free(held).sum())} cached slot(s) are marked free in the allocator"
        )
    free, total = allocator.num_free, allocator.num_slots
    if in_use is None:
        if free + len(held) > total:
            raise IntegrityError(f"{what}: free({free}) + cached({len(held)}) > total({total})")
    elif free + len(held) + in_use != total:
        raise IntegrityError(f"{what}: free({free}) + cached({len(held)}) + in_use({in_use}) != total({total})")
