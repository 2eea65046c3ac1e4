"""OffloadExperts: every expert in host memory, a fixed number of device slots for the ones in use.

`moe_backend='offload'`: the weights of all layers × experts sit in a host tier (CPU tensors,
pinned when the slots are on CUDA, so the copy can run asynchronously on the compute stream).
`moe_cache_size` slots are preallocated on the device; `get` on a miss copies the expert's
weights into a slot with `copy_` (a real copy, counted in bytes).

Replacement is LRU with protection for the current step: an expert used since the last
`begin_step()` is not evicted while an older one exists. Every hit or miss moves the expert to
the most-recent end, so this step's experts form the tail of the LRU order and the victim is
simply the head; when the head itself was used in this step, every slot is protected, and the
head is evicted anyway and counted in `forced_evictions` (a cache smaller than one step's
working set thrashes, and that count says so). This is safe because a MoE layer computes with
an expert before it asks for the next one (`SparseMoE.forward`): weights returned by `get` stay
valid until the next `get` that misses.
"""

from __future__ import annotations

import logging
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


class OffloadExperts(ExpertProvider):
    """Experts in host memory behind `num_slots` device slots. Not thread-safe."""

    def __init__(self, num_slots: int, device: torch.device | str = "cpu",
                 pin_memory: bool | None = None, thrash: bool = False) -> None:
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
        self._expert_bytes = 0
        # expert-thrash fault (engine.runtime.faults): False = off. Else the victim is the expert
        # with the most lifetime uses among those not used in this step: heat protection with its
        # comparison turned around, so the hottest experts are the ones pushed out.
        self._thrash = thrash
        self._uses: dict[tuple[int, int], int] = {}

    # --- ExpertProvider ---------------------------------------------------------------------

    def load(self, layer: int, expert: int, weights: ExpertWeights) -> None:
        if self._gate_up is not None:
            raise EngineError("OffloadExperts: load after the slots were allocated")
        host = ExpertWeights(*(self._to_host(t) for t in weights))
        first = next(iter(self._host.values()), None)
        if first is not None and any(a.shape != b.shape or a.dtype != b.dtype
                                     for a, b in zip(first, host)):
            raise EngineError(f"OffloadExperts: expert ({layer}, {expert}) has shapes "
                              f"{[tuple(t.shape) for t in host]}, the others {[tuple(t.shape) for t in first]}")
        self._host[(layer, expert)] = host
        self._layer_stats.setdefault(layer, [0, 0, 0, 0])
        self._expert_bytes = sum(t.numel() * t.element_size() for t in host)

    def begin_step(self) -> None:
        self._step += 1

    def get(self, layer: int, expert: int) -> ExpertWeights:
        key = (layer, expert)
        slot = self._resident.get(key)
        if slot is not None:
            self._resident.move_to_end(key)
            self._layer_stats[layer][_HITS] += 1
        else:
            slot = self._miss(key)
        self._slot_step[slot] = self._step
        if self._thrash:
            self._uses[key] = self._uses.get(key, 0) + 1
        return self._views[slot]

    # --- public API -------------------------------------------------------------------------

    def allocate(self) -> None:
        """Preallocate the slots, min(moe_cache_size, experts loaded) of them; idempotent.
        Called by the first `get`; call it after loading to size the cache up front."""
        if self._gate_up is not None:
            return
        if not self._host:
            raise EngineError("OffloadExperts: no expert was loaded before the slots were allocated")
        self.num_slots = min(self._requested_slots, len(self._host))
        gate_up, down = next(iter(self._host.values()))
        self._gate_up = torch.empty((self.num_slots, *gate_up.shape), dtype=gate_up.dtype,
                                    device=self.device)  # [S, 2I, H]
        self._down = torch.empty((self.num_slots, *down.shape), dtype=down.dtype,
                                 device=self.device)  # [S, H, I]
        self._views = [ExpertWeights(self._gate_up[s], self._down[s]) for s in range(self.num_slots)]
        self._slot_key = [None] * self.num_slots
        self._slot_step = [-1] * self.num_slots
        self._free = list(range(self.num_slots - 1, -1, -1))  # pop() hands out slot 0 first
        logger.info("MoE expert cache: %d/%d slots (%.2f GiB)", self.num_slots, len(self._host),
                    self.slot_bytes / 2**30)

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
        per_layer = tuple(LayerExpertStats(layer, *s) for layer, s in sorted(self._layer_stats.items()))
        return ExpertCacheStats(
            self.num_slots, len(self._resident), len(self._host),
            sum(s.hits for s in per_layer), sum(s.misses for s in per_layer),
            sum(s.evictions for s in per_layer), self._forced,
            sum(s.bytes_copied for s in per_layer), self.slot_bytes, self.host_bytes, per_layer)

    def check_integrity(self, check_contents: bool = False) -> None:
        """Slots, LRU map and counters agree; with `check_contents`, every slot equals its host
        copy (a full compare of all slots: tests and debugging only)."""
        st = self.stats()
        if len(self._resident) + len(self._free) != self.num_slots:
            raise IntegrityError(f"expert cache: resident({len(self._resident)}) + "
                                 f"free({len(self._free)}) != slots({self.num_slots})")
        slots = sorted(list(self._resident.values()) + self._free)
        if slots != list(range(self.num_slots)):
            raise IntegrityError(f"expert cache: slots listed {slots}, expected 0..{self.num_slots - 1}")
        for key, slot in self._resident.items():
            if self._slot_key[slot] != key or key not in self._host:
                raise IntegrityError(f"expert cache: slot {slot} holds {self._slot_key[slot]}, "
                                     f"the LRU map says {key}")
        if st.misses - st.evictions != st.num_used or st.bytes_copied != st.misses * self._expert_bytes:
            raise IntegrityError(
                f"expert cache: misses({st.misses}) - evictions({st.evictions}) != used({st.num_used}) "
                f"or bytes_copied({st.bytes_copied}) != misses × {self._expert_bytes}")
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
        if self._free:
            slot = self._free.pop()
        else:
            if self._thrash:
                victim = self._hottest_unprotected()
                slot = self._resident.pop(victim)
            else:
                victim, slot = self._resident.popitem(last=False)  # least recently used
            if self._slot_step[slot] == self._step:
                self._forced += 1  # every slot was used in this step
            self._layer_stats[victim[0]][_EVICTIONS] += 1
        self._views[slot].gate_up.copy_(host.gate_up, non_blocking=True)  # [2I, H]
        self._views[slot].down.copy_(host.down, non_blocking=True)  # [H, I]
        self._resident[key] = slot
        self._slot_key[slot] = key
        stats = self._layer_stats[key[0]]
        stats[_MISSES] += 1
        stats[_BYTES] += self._expert_bytes
        return slot

    def _hottest_unprotected(self) -> tuple[int, int]:
        """expert-thrash: the resident expert with the most lifetime uses that was not used in
        this step (the LRU head when every one was). O(slots) per miss."""
        best, best_uses = None, -1
        for key, slot in self._resident.items():
            if self._slot_step[slot] != self._step and self._uses.get(key, 0) > best_uses:
                best, best_uses = key, self._uses.get(key, 0)
        return best if best is not None else next(iter(self._resident))

    def _to_host(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().to("cpu").contiguous()
        return t.pin_memory() if self.pin_memory else t
