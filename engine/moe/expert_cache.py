"""OffloadExperts: every expert in host memory, a fixed number of device slots for the ones in use.

`moe_backend='offload'`: the weights of all layers × experts sit in a host tier (CPU tensors,
pinned when the slots are on CUDA, so the copy can run asynchronously on the compute stream).
`moe_cache_size` slots are preallocated on the device; `get` on a miss copies the expert's
weights into a slot with `copy_` (a real copy, counted in bytes).

Replacement is LRU with protection for the current step: an expert used since the last
`begin_step()` is not evicted while an older one exists. Every hit or miss moves the expert to
the most-recent end, so this step's experts form the tail of the LRU order and the victim is
simply the head. When the head itself was used in this step, every slot is protected: the step
needs more experts than there are slots (a prefill chunk routes to nearly every expert). Then
the head's slot is lent to the step as its staging slot (its expert evicted, counted in
`forced_evictions`) and every further expert the step misses is copied into it without being
cached (`staged_misses`); `begin_step()` gives the staging slot back to the free list. The cache
keeps what it holds instead of churning it for a step it cannot hold (as offload engines route a
dispatch the cache cannot hold through a staging buffer). Reusing one slot within a step is safe
because a MoE layer computes with an expert before it asks for the next one (`SparseMoE.forward`):
weights returned by `get` stay valid until the next `get` that misses.

The expert-thrash fault (engine.runtime.faults) loses that give-back: each step that overflowed
keeps its staging slot for good, held by nobody. Slots leave the cache one per overflowing step,
the LRU works with fewer and fewer of them, and once a decode step's own experts outnumber what is
left, every step overflows and the cache drains to a single slot, through which every expert is
copied. The leak stops there so the engine keeps serving (`leaked_slots`).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import NamedTuple

import torch

from engine.errors import EngineError
from engine.memory.allocator import IntegrityError
from engine.model.experts import ExpertProvider, ExpertWeights

logger = logging.getLogger(__name__)

_HITS, _MISSES, _EVICTIONS, _BYTES = range(4)


class LayerExpertStats(NamedTuple):
    layer: int
    hits: int
    misses: int
    evictions: int  # experts of this layer pushed out of a slot
    bytes_copied: int  # host -> slot copies of this layer's experts


class ExpertCacheStats(NamedTuple):
    num_slots: int
    num_used: int  # slots holding an expert
    num_experts: int  # experts in the host tier (layers × experts)
    hits: int
    misses: int
    evictions: int
    forced_evictions: int  # evictions of an expert already used in the current step
    bytes_copied: int
    slot_bytes: int  # device memory of all slots
    host_bytes: int  # memory of the host tier
    per_layer: tuple[LayerExpertStats, ...]  # by layer id
    staged_misses: int = 0  # misses copied into a step's staging slot, not cached (of misses)
    leaked_slots: int = 0  # staging slots never given back (the expert-thrash fault)
    copy_s: float = 0.0  # wall time spent issuing host -> slot copies (on a GPU: enqueueing them)


class OffloadExperts(ExpertProvider):
    """Experts in host memory behind `num_slots` device slots. Not thread-safe."""

    def __init__(
        self, num_slots: int, device: torch.device | str = "cpu", pin_memory: bool | None = None, thrash: bool = False
    ) -> None:
        if num_slots < 1:
            raise EngineError(f"moe_cache_size must be >= 1 with moe_backend='offload', found {num_slots}")
        self.device = torch.device(device)
        self.pin_memory = self.device.type == "cuda" if pin_memory is None else pin_memory
        self._requested_slots = num_slots
        self.num_slots = 0  # set when the slots are allocated (first get, or allocate())
        self._host: dict[tuple[int, int], ExpertWeights] = {}
        self._layer_stats: dict[int, list[int]] = {}  # layer -> [hits, misses, evictions, bytes]
        self._resident: OrderedDict[tuple[int, int], int] = OrderedDict()  # LRU first -> slot
        self._slot_key: list[tuple[int, int] | None] = []
        self._slot_step: list[int] = []  # step of each slot's last use
        self._free: list[int] = []
        self._views: list[ExpertWeights] = []  # per slot: views into the slot tensors
        self._gate_up: torch.Tensor | None = None  # [S, 2I, H]
        self._down: torch.Tensor | None = None  # [S, H, I]
        self._step = 0
        self._forced = 0
        self._staged = 0  # misses served from the staging slot
        self._copy_s = 0.0
        self._expert_bytes = 0
        self._staging: int | None = None  # the slot lent to this step for what the cache cannot hold
        self._leaked: list[int] = []  # staging slots never given back
        self._thrash = thrash  # expert-thrash fault (engine.runtime.faults): the give-back is lost

    # --- ExpertProvider ---------------------------------------------------------------------

    def load(self, layer: int, expert: int, weights: ExpertWeights) -> None:
        if self._gate_up is not None:
            raise EngineError("OffloadExperts: load after the slots were allocated")
        host = ExpertWeights(*(self._to_host(t) for t in weights))
        first = next(iter(self._host.values()), None)
        if first is not None and any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(first, host)):
            raise EngineError(
                f"OffloadExperts: expert ({layer}, {expert}) has shapes "
                f"{[tuple(t.shape) for t in host]}, the others {[tuple(t.shape) for t in first]}"
            )
        self._host[(layer, expert)] = host
        self._layer_stats.setdefault(layer, [0, 0, 0, 0])
        self._expert_bytes = sum(t.numel() * t.element_size() for t in host)

    def begin_step(self) -> None:
        self._step += 1
        if self._staging is not None:
            if self._thrash and len(self._leaked) < self.num_slots - 1:
                self._leaked.append(self._staging)  # expert-thrash: never returned
            else:
                self._free.append(self._staging)
            self._staging = None

    def get(self, layer: int, expert: int) -> ExpertWeights:
        key = (layer, expert)
        slot = self._resident.get(key)
        if slot is not None:
            self._resident.move_to_end(key)
            self._layer_stats[layer][_HITS] += 1
        else:
            slot = self._miss(key)
        self._slot_step[slot] = self._step
        return self._views[slot]

    # --- public API -------------------------------------------------------------------------

    def allocate(self) -> tuple[int, int, int]:
        """Preallocate the slots, min(moe_cache_size, experts loaded) of them; idempotent.
        Called by the first `get`; call it after loading to size the cache up front.
        (experts, slots, device bytes of the slots)."""
        if self._gate_up is not None:
            return self.num_experts, self.num_slots, self.slot_bytes
        if not self._host:
            raise EngineError("OffloadExperts: no expert was loaded before the slots were allocated")
        self.num_slots = min(self._requested_slots, len(self._host))
        gate_up, down = next(iter(self._host.values()))
        # input-major like the host copies (experts.input_major): a slot is seen as [2I, H] and [H, I]
        self._gate_up = torch.empty(
            (self.num_slots, *reversed(gate_up.shape)), dtype=gate_up.dtype, device=self.device
        )  # [S, H, 2I]
        self._down = torch.empty(
            (self.num_slots, *reversed(down.shape)), dtype=down.dtype, device=self.device
        )  # [S, I, H]
        self._views = [ExpertWeights(self._gate_up[s].t(), self._down[s].t()) for s in range(self.num_slots)]
        self._slot_key = [None] * self.num_slots
        self._slot_step = [-1] * self.num_slots
        self._free = list(range(self.num_slots - 1, -1, -1))  # pop() hands out slot 0 first
        logger.info(
            "MoE expert cache: %d/%d slots (%.2f GiB)", self.num_slots, len(self._host), self.slot_bytes / 2**30
        )
        return self.num_experts, self.num_slots, self.slot_bytes

    @property
    def num_experts(self) -> int:
        return len(self._host)

    @property
    def slot_bytes(self) -> int:
        return self.num_slots * self._expert_bytes

    @property
    def host_bytes(self) -> int:
        return len(self._host) * self._expert_bytes

    @property
    def num_misses(self) -> int:
        return sum(s[_MISSES] for s in self._layer_stats.values())

    def stats(self) -> ExpertCacheStats:
        per_layer = tuple(
            LayerExpertStats(
                layer=layer, hits=s[_HITS], misses=s[_MISSES], evictions=s[_EVICTIONS], bytes_copied=s[_BYTES]
            )
            for layer, s in sorted(self._layer_stats.items())
        )
        return ExpertCacheStats(
            num_slots=self.num_slots,
            num_used=len(self._resident),
            num_experts=len(self._host),
            hits=sum(s.hits for s in per_layer),
            misses=sum(s.misses for s in per_layer),
            evictions=sum(s.evictions for s in per_layer),
            forced_evictions=self._forced,
            bytes_copied=sum(s.bytes_copied for s in per_layer),
            slot_bytes=self.slot_bytes,
            host_bytes=self.host_bytes,
            per_layer=per_layer,
            staged_misses=self._staged,
            leaked_slots=len(self._leaked),
            copy_s=self._copy_s,
        )

    def check_integrity(self, check_contents: bool = False) -> None:
        """Slots, LRU map and counters agree; with `check_contents`, every slot equals its host
        copy (a full compare of all slots: tests and debugging only)."""
        st = self.stats()
        staging = [] if self._staging is None else [self._staging]
        if len(self._resident) + len(self._free) + len(staging) + len(self._leaked) != self.num_slots:
            raise IntegrityError(
                f"expert cache: resident({len(self._resident)}) + free({len(self._free)}) + "
                f"staging({len(staging)}) + leaked({len(self._leaked)}) != slots({self.num_slots})"
            )
        slots = sorted(list(self._resident.values()) + self._free + staging + self._leaked)
        if slots != list(range(self.num_slots)):
            raise IntegrityError(f"expert cache: slots listed {slots}, expected 0..{self.num_slots - 1}")
        if self._leaked and not self._thrash:
            raise IntegrityError(f"expert cache: {len(self._leaked)} staging slots not given back")
        for key, slot in self._resident.items():
            if self._slot_key[slot] != key or key not in self._host:
                raise IntegrityError(f"expert cache: slot {slot} holds {self._slot_key[slot]}, the LRU map says {key}")
        cached = st.misses - st.staged_misses
        if cached - st.evictions != st.num_used or st.bytes_copied != st.misses * self._expert_bytes:
            raise IntegrityError(
                f"expert cache: misses({st.misses}) - staged({st.staged_misses}) - evictions({st.evictions}) "
                f"!= used({st.num_used}) or bytes_copied({st.bytes_copied}) != misses × {self._expert_bytes}"
            )
        if check_contents:
            for key, slot in self._resident.items():
                if not all(torch.equal(a.cpu(), b) for a, b in zip(self._views[slot], self._host[key])):
                    raise IntegrityError(f"expert cache: slot {slot} differs from expert {key}'s host copy")

    # --- private ----------------------------------------------------------------------------

    def _miss(self, key: tuple[int, int]) -> int:
        if self._gate_up is None:
            self.allocate()
        host = self._host.get(key)
        if host is None:
            raise EngineError(f"OffloadExperts: expert {key} (layer, expert) was never loaded")
        staged = False
        if self._free:
            slot = self._free.pop()
        elif self._staging is not None:  # the step already overflowed: through its staging slot
            slot, staged = self._staging, True
        else:
            victim, slot = self._resident.popitem(last=False)  # least recently used
            self._layer_stats[victim[0]][_EVICTIONS] += 1
            if self._slot_step[slot] == self._step:  # every slot is used in this step: lend one
                self._forced += 1
                self._staging, staged = slot, True
        start = time.perf_counter()
        self._views[slot].gate_up.copy_(host.gate_up, non_blocking=True)  # [2I, H]
        self._views[slot].down.copy_(host.down, non_blocking=True)  # [H, I]
        self._copy_s += time.perf_counter() - start
        if staged:
            self._staged += 1
            self._slot_key[slot] = None
        else:
            self._resident[key] = slot
            self._slot_key[slot] = key
        stats = self._layer_stats[key[0]]
        stats[_MISSES] += 1
        stats[_BYTES] += self._expert_bytes
        return slot

    def _to_host(self, t: torch.Tensor) -> torch.Tensor:
        """An [O, I] weight kept input-major ([I, O] contiguous, seen through .t()), as the slots."""
        t = t.detach().to("cpu").t().contiguous()
        return (t.pin_memory() if self.pin_memory else t).t()
