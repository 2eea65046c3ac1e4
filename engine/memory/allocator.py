"""SlotAllocator: which slots of a pool (KV token slots, or linear-attention state slots) are free.

Slots come in whole pages: slot = page * page_size + offset, so with `page_size=4`

    page:   0           1           2
    slot:   0  1  2  3  4  5  6  7  8  9 10 11

A request asks for `num_tokens` and gets every slot of ceil(num_tokens / page_size) pages; it
fills the first `num_tokens` and keeps the rest of its last page for the tokens it decodes next.
With `page_size=1` (the default, and always for state slots) a page is a slot.

Free pages sit in a free list taken from the front. Freed pages go to a "released" list and are
merged back, sorted by address, only when the front runs short (as SGLang's allocator does), so
alloc and free are O(pages moved) and the sort is amortised over every page the front held.

Only the tensor-free bookkeeping lives here; the tensors are `KVPool` and `StatePool`.
Slot ids are int64 CPU tensors: the model runner moves them to its device in one copy per step.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch

from engine.errors import EngineError

logger = logging.getLogger(__name__)

SlotIds = torch.Tensor | np.ndarray | Sequence[int]


class IntegrityError(RuntimeError):
    """An engine data structure disagrees with itself; the message holds the actual numbers."""


class AllocEvent(NamedTuple):
    seq: int  # event number since the allocator was built, so a reader sees gaps from drops
    kind: str  # "alloc" or "free"
    num_slots: int
    runs: tuple[tuple[int, int], ...]  # (first slot, number of slots) of each contiguous run
    num_free: int  # free slots after the operation


class AllocatorSummary(NamedTuple):
    num_slots: int
    num_free: int
    num_free_runs: int  # maximal runs of contiguous free slots
    largest_free_run: int  # slots
    fragmentation: float  # 1 - largest_free_run / num_free; 0.0 when nothing is free


class SlotAllocator:
    """Hands out slots of a pool in whole pages and takes them back.

    `summary()` is a vectorised pass over one byte per page (about 0.3 ms for 256K pages); the
    alloc/free path never computes runs. Events are recorded only after `enable_events()`.
    Not thread-safe: call it from the engine thread.
    """

    def __init__(self, num_slots: int, page_size: int = 1, name: str = "kv", scatter_seed: int | None = None) -> None:
        if page_size < 1:
            raise EngineError(f"{name} allocator: page_size must be >= 1, found {page_size}")
        if num_slots < page_size or num_slots % page_size:
            raise EngineError(
                f"{name} allocator: num_slots must be a positive multiple of page_size ({page_size}), found {num_slots}"
            )
        self.name = name
        self.num_slots = num_slots
        self.page_size = page_size
        self.num_pages = num_slots // page_size
        self._is_free = np.ones(self.num_pages, dtype=bool)  # [P]
        self._free = np.arange(self.num_pages, dtype=np.int64)  # [P] pages, taken from _head on
        self._head = 0
        self._released: list[np.ndarray] = []
        self._num_free_pages = self.num_pages
        self._offsets = np.arange(page_size, dtype=np.int64)  # [page_size]
        # None = tracing off: one branch per call. Entries are (seq, kind, pages, num_free); runs
        # are computed when drained, off the hot path (`pages` arrays are never mutated later).
        self._events: deque[tuple[int, str, np.ndarray, int]] | None = None
        self._seq = 0
        self.num_events_dropped = 0
        # kv-scatter fault (engine.runtime.faults): None = off. Else freed pages are shuffled as
        # they come back, and a merge shuffles the whole free list instead of sorting it.
        self._scatter = np.random.default_rng(scatter_seed) if scatter_seed is not None else None

    # --- public API -------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Free slots (whole free pages × page_size)."""
        return self._num_free_pages * self.page_size

    @property
    def num_used(self) -> int:
        return self.num_slots - self.num_free

    @property
    def num_released_runs(self) -> int:
        """Freed page arrays waiting to be merged into the free list: at most one per free
        since the last merge, and never more than the pages they hold."""
        return len(self._released)

    def pages_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.page_size)

    def can_alloc(self, num_tokens: int) -> bool:
        return self.pages_for(num_tokens) <= self._num_free_pages

    def alloc(self, num_tokens: int) -> torch.Tensor | None:
        """Slots of ceil(num_tokens / page_size) whole pages, int64 [pages * page_size];
        None when not enough pages are free (nothing is taken then)."""
        num_pages = self.pages_for(num_tokens)
        if num_pages > self._num_free_pages:
            return None
        if len(self._free) - self._head < num_pages:
            self._merge_released()
        pages = self._free[self._head : self._head + num_pages]  # [n]
        self._head += num_pages
        self._is_free[pages] = False
        self._num_free_pages -= num_pages
        if self.page_size == 1:
            slots = pages.copy()
        else:
            slots = (pages[:, None] * self.page_size + self._offsets).reshape(-1)  # [n * page_size]
        if self._events is not None:
            self._record("alloc", pages)
        return torch.from_numpy(slots)

    def free(self, slot_ids: SlotIds) -> None:
        """Give back the slots of whole pages (any order). Raises on a partial page, a slot out
        of range or a slot already free. A duplicate within one call is caught by
        `check_integrity()`, not here (the hot path checks only what is O(1) per page)."""
        pages = self._pages_of(slot_ids)
        if len(pages) == 0:
            return
        if pages.min() < 0 or pages.max() >= self.num_pages:
            raise EngineError(
                f"{self.name} allocator: free of slots outside [0, {self.num_slots}): "
                f"min {int(pages.min()) * self.page_size}, "
                f"max {int(pages.max()) * self.page_size}"
            )
        already = self._is_free[pages]
        if already.any():
            bad = (pages[already][:8] * self.page_size).tolist()
            raise IntegrityError(
                f"{self.name} allocator: double free of {int(already.sum())} page(s), first slots {bad}"
            )
        self._is_free[pages] = True
        pages = pages.copy()  # the caller's tensor may share this memory
        if self._scatter is not None:
            self._scatter.shuffle(pages)
        self._released.append(pages)
        self._num_free_pages += len(pages)
        if self._events is not None:
            self._record("free", pages)

    def is_free(self, slot_ids: SlotIds) -> np.ndarray:
        """Per slot: is its page free? bool [N]. For integrity checks, not the hot path."""
        slots = _as_numpy(slot_ids)
        free: np.ndarray = self._is_free[slots // self.page_size]
        return free

    def summary(self) -> AllocatorSummary:
        """Free slots and their runs. One vectorised pass over the page bitmap: O(num_pages)."""
        num_free = self.num_free
        if self._num_free_pages == 0:
            return AllocatorSummary(
                num_slots=self.num_slots, num_free=0, num_free_runs=0, largest_free_run=0, fragmentation=0.0
            )
        edges = np.diff(self._is_free.astype(np.int8), prepend=0, append=0)  # [P + 1]
        starts = np.flatnonzero(edges == 1)  # [R] first page of each free run
        ends = np.flatnonzero(edges == -1)  # [R] one past its last page
        largest = int((ends - starts).max()) * self.page_size
        return AllocatorSummary(
            num_slots=self.num_slots,
            num_free=num_free,
            num_free_runs=len(starts),
            largest_free_run=largest,
            fragmentation=1.0 - largest / num_free,
        )

    def free_list_disorder(self) -> float:
        """Share of adjacent entries of the free list, in the order alloc will hand them out, that
        are not adjacent pages: 0.0 when the next allocations come out contiguous, near 1.0 when
        they come out scattered. O(free pages); for hooks, not the hot path."""
        return disorder(np.concatenate([self._free[self._head :], *self._released]))

    # --- events (the tracer is None when unused) -------------------------------------------

    def enable_events(self, maxlen: int = 65536) -> None:
        """Record alloc/free events into a bounded queue; the oldest are dropped (and counted)."""
        if maxlen < 1:
            raise EngineError(f"{self.name} allocator: events maxlen must be >= 1, found {maxlen}")
        self._events = deque(self._events or (), maxlen=maxlen)

    def disable_events(self) -> None:
        self._events = None

    @property
    def events_enabled(self) -> bool:
        return self._events is not None

    @property
    def num_events_queued(self) -> int:
        """Events waiting for `take_events()`: at most the queue's maxlen, 0 with events off."""
        return len(self._events) if self._events is not None else 0

    def take_events(self) -> list[AllocEvent]:
        """Drain the queued events, oldest first ([] when events are off)."""
        if not self._events:
            return []
        out = [
            AllocEvent(
                seq=seq,
                kind=kind,
                num_slots=len(pages) * self.page_size,
                runs=_runs(pages, self.page_size),
                num_free=num_free,
            )
            for seq, kind, pages, num_free in self._events
        ]
        self._events.clear()
        return out

    # --- integrity (off the hot path) ------------------------------------------------------

    def check_integrity(self) -> None:
        """Free list, released list, bitmap and counter agree; raises with the numbers."""
        listed = np.concatenate([self._free[self._head :], *self._released])
        n_bitmap = int(self._is_free.sum())
        if len(listed) != self._num_free_pages or n_bitmap != self._num_free_pages:
            raise IntegrityError(
                f"{self.name} allocator: free pages counted {self._num_free_pages}, listed "
                f"{len(listed)}, marked free {n_bitmap} (num_pages {self.num_pages})"
            )
        if len(np.unique(listed)) != len(listed):
            raise IntegrityError(
                f"{self.name} allocator: free list holds {len(listed) - len(np.unique(listed))} duplicate page(s)"
            )
        if len(listed) and not self._is_free[listed].all():
            raise IntegrityError(
                f"{self.name} allocator: {int((~self._is_free[listed]).sum())} listed page(s) marked used"
            )

    # --- private ---------------------------------------------------------------------------

    def _merge_released(self) -> None:
        merged = np.concatenate([self._free[self._head :], *self._released])
        if self._scatter is None:
            self._free = np.sort(merged)
        else:  # kv-scatter: the whole free list in scattered order, as a hash-ordered free pool hands it out
            self._scatter.shuffle(merged)
            self._free = merged
        self._head = 0
        self._released = []

    def _pages_of(self, slot_ids: SlotIds) -> np.ndarray:
        slots = _as_numpy(slot_ids)
        if self.page_size == 1:
            return slots
        rows = slots.reshape(-1, self.page_size) if len(slots) % self.page_size == 0 else None
        if rows is None or not (rows == rows[:, :1] + self._offsets).all() or (rows[:, 0] % self.page_size).any():
            raise EngineError(
                f"{self.name} allocator: free needs whole pages of {self.page_size} "
                f"slots, found {len(slots)} slots starting {slots[:8].tolist()}"
            )
        return rows[:, 0] // self.page_size

    def _record(self, kind: str, pages: np.ndarray) -> None:
        assert self._events is not None
        if len(self._events) == self._events.maxlen:
            self.num_events_dropped += 1
        self._seq += 1
        self._events.append((self._seq, kind, pages, self.num_free))


def disorder(order: SlotIds) -> float:
    """Share of adjacent entries that are not consecutive slots (pages): 0.0 for a contiguous run
    (or fewer than two entries), near 1.0 for scattered ones."""
    order = _as_numpy(order)
    if len(order) < 2:
        return 0.0
    return float(np.count_nonzero(np.diff(order) != 1)) / (len(order) - 1)


def _as_numpy(slot_ids: SlotIds) -> np.ndarray:
    if isinstance(slot_ids, torch.Tensor):
        return slot_ids.detach().to("cpu", torch.int64).numpy().reshape(-1)
    return np.asarray(slot_ids, dtype=np.int64).reshape(-1)


def _runs(pages: np.ndarray, page_size: int) -> tuple[tuple[int, int], ...]:
    """(first slot, length) of each run of consecutive pages, in address order."""
    p = np.sort(pages)
    breaks = np.flatnonzero(np.diff(p) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [len(p)]))
    return tuple((int(p[s]) * page_size, int(e - s) * page_size) for s, e in zip(starts, ends))


# --- sizing ------------------------------------------------------------------------------------


def available_memory_bytes(device: torch.device | str) -> int:
    """Memory the KV pool may draw on: free device memory on CUDA, available host RAM otherwise."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def kv_tokens_for_memory(
    available_bytes: int, memory_ratio: float, bytes_per_token: int, page_size: int = 1, max_tokens: int | None = None
) -> int:
    """KV pool size in tokens: `memory_ratio` of `available_bytes` at `bytes_per_token`, rounded
    down to whole pages and capped at `max_tokens`. A pure function; raises when not even one
    page fits."""
    if not 0.0 < memory_ratio <= 1.0:
        raise EngineError(f"memory_ratio must be in (0, 1], found {memory_ratio!r}")
    if bytes_per_token <= 0 or page_size < 1:
        raise EngineError(f"bytes_per_token and page_size must be positive, found {bytes_per_token} and {page_size}")
    tokens = int(available_bytes * memory_ratio) // bytes_per_token
    if max_tokens is not None:
        tokens = min(tokens, max_tokens)
    tokens -= tokens % page_size
    if tokens < page_size:
        raise EngineError(
            f"memory_ratio={memory_ratio} of {available_bytes / 2**30:.2f} GiB available gives "
            f"{tokens} KV tokens at {bytes_per_token} bytes per token; need at least one page of "
            f"{page_size}: raise memory_ratio or set kv_tokens"
        )
    return tokens
