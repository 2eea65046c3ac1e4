"""Continuous batching: the waiting and running queues, admission, chunked prefill, retraction.

The scheduler owns every memory decision: which requests run this step and with how many
new tokens, which KV and state slots they hold, what the prefix cache keeps. It never runs
the model; the engine loop runs the batch it returns and reports back what finished.

Policy (SGLang's default, prefill first):
- a step is a prefill step while a request is prefilling or one can be admitted, else a
  decode step of every running request (with `mixed_chunk`, decodes ride along a prefill);
- at most one request is mid-prefill (the chunked request); the others are admitted only
  when their whole remaining prompt fits in the step's `chunked_prefill_size` budget;
- admission needs a state slot and KV for the first chunk, evicting cache entries first;
- a decode that finds no KV even after eviction retracts the newest running request: its
  memory is freed and it goes back to the front of the queue, to be prefilled again later.
"""

from __future__ import annotations

import collections
import logging
from typing import NamedTuple

import torch

from engine.cache import PrefixCache
from engine.memory.allocator import SlotAllocator
from engine.memory.state_pool import StatePool
from engine.runtime.request import Request, RequestStatus
from engine.runtime.stats import Phase

logger = logging.getLogger(__name__)


class Scheduled(NamedTuple):
    request: Request
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        """The chunk reaches the last token, so the forward's logits give the next token."""
        return self.request.num_computed + self.num_new_tokens == self.request.num_tokens

    @property
    def is_decode(self) -> bool:
        """One token after an output token (read before the forward): a decode, not a prefill."""
        return self.num_new_tokens == 1 and self.request.num_pending == 1 and bool(self.request.output_ids)


class ScheduledBatch(NamedTuple):
    items: list[Scheduled]
    phase: Phase
    num_new_seqs: int  # requests admitted this step
    num_cached_tokens: int  # prompt tokens those admissions got from the prefix cache
    retracted: list[Request]


class Scheduler:
    def __init__(
        self,
        kv_allocator: SlotAllocator,
        state_allocator: SlotAllocator,
        state_pool: StatePool,
        cache: PrefixCache,
        max_running_requests: int,
        chunked_prefill_size: int,
        has_linear_layers: bool,
        mixed_chunk: bool = False,
    ) -> None:
        self.kv_allocator = kv_allocator
        self.state_allocator = state_allocator
        self.state_pool = state_pool
        self.cache = cache
        self.max_running_requests = max_running_requests
        self.chunked_prefill_size = chunked_prefill_size
        self.has_linear_layers = has_linear_layers
        self.mixed_chunk = mixed_chunk
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.num_retractions = 0

    # --- public API -------------------------------------------------------------------------

    def add(self, request: Request) -> None:
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> ScheduledBatch | None:
        """The next step's batch; None when there is nothing to run."""
        prefill, num_new, num_cached = self._schedule_prefill()
        retracted: list[Request] = []
        decode: list[Scheduled] = []
        if not prefill or self.mixed_chunk:
            decode = self._schedule_decode(retracted, skip={id(s.request) for s in prefill})
        items = prefill + decode
        if not items:
            # The mid-prefill request found no KV and no decode is left to free any: restart it
            # later rather than hold memory that nothing can use.
            stuck = [r for r in self.running if r.num_pending > 1]
            for request in stuck:
                self._retract(request)
            retracted += stuck
            if not retracted:
                return None
        phase = Phase.MIXED if prefill and decode else Phase.PREFILL if prefill else Phase.DECODE
        return ScheduledBatch(
            items=items, phase=phase, num_new_seqs=num_new, num_cached_tokens=num_cached, retracted=retracted
        )

    def chunk_done(self, request: Request, evict: bool = False) -> None:
        """After a forward that ran a prefill chunk of `request`: anchor a state snapshot at the
        chunk boundary so that a later request sharing this prefix can start from it. With
        `evict`, the least recently used snapshot may make room for it (the prompt's end)."""
        if not self.has_linear_layers or not self.cache.keeps_snapshots:
            return
        if request.num_computed % self.kv_allocator.page_size:
            return
        slot = self._alloc_state(evict=evict)
        if slot is None:
            return  # no spare slot: skip the anchor, never block a request for one
        assert request.state_slot is not None  # a running request holds its state slot
        self.state_pool.copy_slot(request.state_slot, slot)
        self._cache_prefix(request, slot)

    def finish(self, request: Request) -> None:
        """Release a finished or aborted request: its computed prefix and its state go to the cache."""
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
            snapshot, request.state_slot = request.state_slot, None
            self._cache_prefix(request, snapshot)
            self._release(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED

    def check_integrity(self) -> None:
        """Every KV and state slot is free, cached or held by exactly one running request."""
        own_kv = sum(len(r.kv_slots) - r.num_cache_owned for r in self.running)
        own_state = sum(1 for r in self.running if r.state_slot is not None)
        self.cache.check_integrity(kv_in_use=own_kv, state_in_use=own_state)
        self.kv_allocator.check_integrity()
        self.state_allocator.check_integrity()

    # --- prefill ----------------------------------------------------------------------------

    def _schedule_prefill(self) -> tuple[list[Scheduled], int, int]:
        budget = self.chunked_prefill_size
        items: list[Scheduled] = []
        chunked = next((r for r in self.running if r.num_pending > 1), None)
        if chunked is not None:
            n = min(chunked.num_pending, budget)
            if not self._reserve_kv(chunked, n):
                return [], 0, 0
            items.append(Scheduled(chunked, n))
            budget -= n
            if n < chunked.num_pending:
                return items, 0, 0
        num_new = num_cached = 0
        while self.waiting and budget > 0 and len(self.running) < self.max_running_requests:
            request = self.waiting[0]
            admitted = self._admit(request, budget, first=not items)
            if admitted is None:
                break
            self.waiting.popleft()
            self.running.append(request)
            request.status = RequestStatus.RUNNING
            items.append(Scheduled(request, admitted))
            num_new += 1
            num_cached += request.num_computed
            budget -= admitted
            if admitted < request.num_pending:
                break  # it is now the chunked request
        return items, num_new, num_cached

    def _admit(self, request: Request, budget: int, first: bool) -> int | None:
        """Give `request` its cached prefix, a state slot and KV for its first chunk; the chunk
        size, or None (nothing held) when it cannot start now."""
        match = self.cache.match_prefix(request.token_ids(0, request.num_tokens - 1))
        cached_len = match.cached_len
        node = match.node
        if self.has_linear_layers and cached_len and match.state_slot is None:
            cached_len, node = 0, None  # KV alone cannot restart a linear-attention layer
        pending = request.num_tokens - cached_len
        if pending > budget and not first:
            return None
        self.cache.inc_lock(node)
        slot = self._alloc_state(evict=True)
        if slot is None:
            self.cache.dec_lock(node)
            return None
        if cached_len and match.state_slot is not None:
            self.state_pool.copy_slot(match.state_slot, slot)
        else:  # an empty context, or a model with no linear-attention layers (a KV-only cache has no snapshot)
            self.state_pool.reset(slot)
        request.state_slot = slot
        request.lock_node = node
        request.kv_slots = match.kv_slot_ids[:cached_len]
        request.num_computed = request.num_cache_owned = cached_len
        n = min(pending, budget)
        if not self._reserve_kv(request, n):
            self._release(request)
            return None
        if request.num_cached_tokens is None:
            request.num_cached_tokens = min(cached_len, len(request.prompt_ids))
        return n

    # --- decode -----------------------------------------------------------------------------

    def _schedule_decode(self, retracted: list[Request], skip: set[int]) -> list[Scheduled]:
        items: list[Scheduled] = []
        for request in list(self.running):
            if id(request) in skip or request.num_pending != 1 or request not in self.running:
                continue
            while not self._reserve_kv(request, 1):
                victim = self._pick_victim(exclude=skip)
                if victim is None:
                    break
                self._retract(victim)
                retracted.append(victim)
                items = [s for s in items if s.request is not victim]
                if victim is request:
                    break
            else:
                items.append(Scheduled(request, 1))
        return items

    def _pick_victim(self, exclude: set[int]) -> Request | None:
        candidates = [r for r in self.running if id(r) not in exclude]
        return candidates[-1] if candidates else None  # the newest: the least work to redo

    def _retract(self, request: Request) -> None:
        self.running.remove(request)
        self._release(request)
        request.status = RequestStatus.WAITING
        request.num_retractions += 1
        self.num_retractions += 1
        self.waiting.appendleft(request)
        logger.debug(
            "Retract request %s: KV pool exhausted (%d tokens, %d output so far)",
            request.request_id,
            request.num_tokens,
            len(request.output_ids),
        )

    # --- memory -----------------------------------------------------------------------------

    def _reserve_kv(self, request: Request, num_new: int) -> bool:
        """Make sure `request` holds KV slots for `num_new` more tokens, evicting cache entries
        when the pool is short. False (and nothing taken) when even that is not enough."""
        need = request.num_computed + num_new - len(request.kv_slots)
        if need <= 0:
            return True
        if not self.kv_allocator.can_alloc(need):
            short = self.kv_allocator.pages_for(need) * self.kv_allocator.page_size - self.kv_allocator.num_free
            self.cache.evict(short)
        slots = self.kv_allocator.alloc(need)
        if slots is None:
            return False
        request.kv_slots = torch.cat([request.kv_slots, slots]) if len(request.kv_slots) else slots
        return True

    def _alloc_state(self, evict: bool) -> int | None:
        if self.state_allocator.num_free == 0:
            if not evict or self.cache.evict_snapshots(1) == 0:
                return None
        slots = self.state_allocator.alloc(1)
        return None if slots is None else int(slots[0])

    def _cache_prefix(self, request: Request, snapshot: int | None) -> None:
        """Insert the computed prefix (and `snapshot`, a state slot at its end) into the cache and
        move the request's lock to the new node."""
        n = request.num_computed
        result = self.cache.insert(request.token_ids(0, n), request.kv_slots[:n], snapshot)
        if len(result.dup_kv_slot_ids):
            # Another request cached the same tokens under other slots: use those, free ours.
            self.kv_allocator.free(result.dup_kv_slot_ids)
            path = self.cache.path_kv_slot_ids(result.node)  # [cached_len]
            request.kv_slots = torch.cat([path, request.kv_slots[result.cached_len :]])
        if result.unused_snapshot_slot is not None:
            self.state_allocator.free([result.unused_snapshot_slot])
        if result.node is not None:
            self.cache.inc_lock(result.node)
        self.cache.dec_lock(request.lock_node)
        request.lock_node = result.node
        request.num_cache_owned = result.cached_len if result.node is not None else 0

    def _release(self, request: Request) -> None:
        """Free what `request` holds of its own and drop its lock; computed work is forgotten."""
        own = request.kv_slots[request.num_cache_owned :]
        if len(own):
            self.kv_allocator.free(own)
        if request.state_slot is not None:
            self.state_allocator.free([request.state_slot])
        self.cache.dec_lock(request.lock_node)
        request.kv_slots = request.kv_slots[:0]
        request.lock_node = None
        request.state_slot = None
        request.num_computed = request.num_cache_owned = 0
