"""Eviction policies: which KV leaf, or which snapshot, goes first. Chosen by name.

`lru` keeps a heap of (last_access, node id, node) entries up to date as nodes are touched,
with lazy invalidation: an entry whose node has since been touched, locked, grown a child or
been evicted is skipped when popped, and the heap is compacted once stale entries outnumber
live ones. A pop costs O(log n) amortised, whatever the size of the tree.

`lru_scan` finds the same victim by walking the whole tree on every pop: O(nodes) per
eviction. It is kept as the reference the tests compare `lru` against.

`lru_page_scan` (the eviction-scan fault) evicts one page per pop, as a block-level evictor
does, and finds it by scanning every page no lock holds: O(evictable pages) per page evicted.
It mirrors vLLM's `LRUEvictor` before vllm-project/vllm#5411, #7193 and #7209: the free table
held every cached block with no reference, and `evict()` looped over all of it for the oldest
block (last access), ties to the deepest (most hashed tokens), once for every block an
allocation needed. Here the table is derived from the tree on each scan: each page is
(last_access of its node, depth in tokens of its end). A node is never older than its
descendants (a touch covers the whole path from the root), so the winner is always the tail
page of the least recently used evictable leaf; the cache cuts that page off the leaf.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator

from engine.cache.tree import TreeNode
from engine.errors import EngineError
from engine.memory.allocator import IntegrityError

IsCandidate = Callable[[TreeNode], bool]


class EvictionPolicy:
    """Finds the least recently used node among those `is_candidate` accepts."""

    name = ""
    evicts_pages = False  # True: the caller evicts one page, the tail of the node `pop` returns

    def __init__(self, is_candidate: IsCandidate, root: TreeNode, page_size: int = 1) -> None:
        self.is_candidate = is_candidate
        self.root = root
        self.page_size = page_size
        self.num_visited = 0  # heap entries popped, nodes walked or pages scanned by `pop`: the work done

    def touch(self, node: TreeNode) -> None:
        """`node` was accessed, or may have just become a candidate."""

    def pop(self) -> TreeNode | None:
        """The least recently used candidate, or None. The caller evicts it before popping again."""
        raise NotImplementedError

    def check(self, candidates: Iterable[TreeNode]) -> None:
        """Raise `IntegrityError` if some candidate could not be found by `pop`."""

    @property
    def num_entries(self) -> int:
        """Entries the policy holds (a heap's, stale ones included); 0 for a policy that scans."""
        return 0


class LRUHeapPolicy(EvictionPolicy):
    name = "lru"

    def __init__(self, is_candidate: IsCandidate, root: TreeNode, page_size: int = 1) -> None:
        super().__init__(is_candidate, root, page_size)
        self._heap: list[tuple[int, int, int, TreeNode]] = []  # (last_access, id, push no., node)
        self._pushes = 0  # makes entries unique, so the heap never compares two nodes
        self._compact_at = 1024

    def touch(self, node: TreeNode) -> None:
        if self.is_candidate(node):
            self._pushes += 1
            heapq.heappush(self._heap, (node.last_access, node.id, self._pushes, node))
            if len(self._heap) > self._compact_at:
                self._compact()

    def pop(self) -> TreeNode | None:
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
            raise IntegrityError(
                f"eviction policy {self.name}: {len(missing)} candidate(s) not in "
                f"the heap ({len(self._heap)} entries), first {missing[0]}"
            )

    def __len__(self) -> int:
        return len(self._heap)

    @property
    def num_entries(self) -> int:
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

    def pop(self) -> TreeNode | None:
        best: TreeNode | None = None
        stack = [self.root]
        while stack:
            node = stack.pop()
            self.num_visited += 1
            stack.extend(node.children.values())
            if self.is_candidate(node) and (best is None or (node.last_access, node.id) < (best.last_access, best.id)):
                best = node
        return best


class PageScanPolicy(EvictionPolicy):
    """One page per pop, found by scanning every unlocked page of the tree (the free table).

    `pop` returns the node holding the victim page, which is always that node's tail page; the
    cache cuts it off. `is_candidate` (evictable leaf) only vets the winner."""

    name = "lru_page_scan"
    evicts_pages = True

    def pop(self) -> TreeNode | None:
        best = min(self._free_table(), default=None)
        if best is None:
            return None
        node = best[3]
        if not self.is_candidate(node):  # a node older than its descendants: a broken tree
            raise IntegrityError(
                f"eviction policy {self.name}: the least recently used page ends {node}, which is not an evictable leaf"
            )
        return node

    def _free_table(self) -> Iterator[tuple[int, int, int, TreeNode]]:
        """(last_access, -depth, node id, node) for every page no lock holds, page by page:
        the oldest sorts first, and of two as old the deeper (depth: tokens from the root to
        the page's end). Counts each page in `num_visited`."""
        ps = self.page_size
        stack = [(child, 0) for child in self.root.children.values()]
        while stack:
            node, start = stack.pop()
            end = start + len(node.key)
            stack.extend((child, end) for child in node.children.values())
            if node.lock_ref or not node.alive:
                continue
            last_access, node_id = node.last_access, node.id
            self.num_visited += (end - start) // ps
            for depth in range(start + ps, end + 1, ps):
                yield last_access, -depth, node_id, node


EVICTION_POLICIES: dict[str, type[EvictionPolicy]] = {p.name: p for p in (LRUHeapPolicy, ScanPolicy, PageScanPolicy)}


def make_eviction_policy(name: str, is_candidate: IsCandidate, root: TreeNode, page_size: int = 1) -> EvictionPolicy:
    try:
        cls = EVICTION_POLICIES[name]
    except KeyError:
        raise EngineError(f"eviction policy must be one of {', '.join(EVICTION_POLICIES)}; got {name!r}") from None
    return cls(is_candidate, root, page_size)
