"""Eviction policies: which KV leaf, or which snapshot, goes first. Chosen by name.

`lru` keeps a heap of (last_access, node id, node) entries up to date as nodes are touched,
with lazy invalidation: an entry whose node has since been touched, locked, grown a child or
been evicted is skipped when popped, and the heap is compacted once stale entries outnumber
live ones. A pop costs O(log n) amortised, whatever the size of the tree.

`lru_scan` finds the same victim by walking the whole tree on every pop: O(nodes) per
eviction. That walk is a known cause of a slowdown that grows with uptime (the tree grows,
every eviction gets slower, and evictions happen when the cache is fullest); it is kept as the
reference the tests compare `lru` against, and for reproducing that slowdown on purpose.
"""

from __future__ import annotations

import heapq
from typing import Callable, Iterable, Optional

from engine.cache.tree import TreeNode
from engine.errors import EngineError
from engine.memory.allocator import IntegrityError

IsCandidate = Callable[[TreeNode], bool]


class EvictionPolicy:
    """Finds the least recently used node among those `is_candidate` accepts."""

    name = ""

    def __init__(self, is_candidate: IsCandidate, root: TreeNode) -> None:
        self.is_candidate = is_candidate
        self.root = root
        self.num_visited = 0  # heap entries popped or tree nodes walked by `pop`: the work eviction did

    def touch(self, node: TreeNode) -> None:
        """`node` was accessed, or may have just become a candidate."""

    def pop(self) -> Optional[TreeNode]:
        """The least recently used candidate, or None. The caller evicts it before popping again."""
        raise NotImplementedError

    def check(self, candidates: Iterable[TreeNode]) -> None:
        """Raise `IntegrityError` if some candidate could not be found by `pop`."""


class LRUHeapPolicy(EvictionPolicy):
    name = "lru"

    def __init__(self, is_candidate: IsCandidate, root: TreeNode) -> None:
        super().__init__(is_candidate, root)
        self._heap: list[tuple[int, int, int, TreeNode]] = []  # (last_access, id, push no., node)
        self._pushes = 0  # makes entries unique, so the heap never compares two nodes
        self._compact_at = 1024

    def touch(self, node: TreeNode) -> None:
        if self.is_candidate(node):
            self._pushes += 1
            heapq.heappush(self._heap, (node.last_access, node.id, self._pushes, node))
            if len(self._heap) > self._compact_at:
                self._compact()

    def pop(self) -> Optional[TreeNode]:
        while self._heap:
            entry = heapq.heappop(self._heap)
            self.num_visited += 1
            if self._valid(entry):
                return entry[3]
        return None

    def check(self, candidates: Iterable[TreeNode]) -> None:
        held = {(e[1], e[0]) for e in self._heap if self._valid(e)}
        missing = [n for n in candidates if (n.id, n.last_access) not in held]
        if missing:
            raise IntegrityError(f"eviction policy {self.name}: {len(missing)} candidate(s) not in "
                                 f"the heap ({len(self._heap)} entries), first {missing[0]}")

    def __len__(self) -> int:
        return len(self._heap)

    def _valid(self, entry: tuple[int, int, int, TreeNode]) -> bool:
        node = entry[3]
        return node.last_access == entry[0] and self.is_candidate(node)

    def _compact(self) -> None:
        seen: set[int] = set()
        live = []
        for entry in self._heap:
            if entry[1] not in seen and self._valid(entry):
                seen.add(entry[1])
                live.append(entry)
        heapq.heapify(live)
        self._heap = live
        self._compact_at = max(1024, 2 * len(live))


class ScanPolicy(EvictionPolicy):
    name = "lru_scan"

    def pop(self) -> Optional[TreeNode]:
        best: Optional[TreeNode] = None
        stack = [self.root]
        while stack:
            node = stack.pop()
            self.num_visited += 1
            stack.extend(node.children.values())
            if self.is_candidate(node) and (best is None or (node.last_access, node.id) < (best.last_access, best.id)):
                best = node
        return best


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {p.name: p for p in (LRUHeapPolicy, ScanPolicy)}


def make_eviction_policy(name: str, is_candidate: IsCandidate, root: TreeNode) -> EvictionPolicy:
    try:
        cls = EVICTION_POLICIES[name]
    except KeyError:
        raise EngineError(f"eviction policy must be one of {', '.join(EVICTION_POLICIES)}; "
                          f"got {name!r}") from None
    return cls(is_candidate, root)
