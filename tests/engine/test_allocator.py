"""SlotAllocator: whole pages, free runs and fragmentation, events, integrity, sizing."""

import random

import numpy as np
import pytest
import torch

from engine.errors import EngineError
from engine.memory.allocator import AllocatorSummary, IntegrityError, SlotAllocator, kv_tokens_for_memory


def test_alloc_gives_whole_pages_and_refuses_when_full():
    a = SlotAllocator(12, page_size=4)
    s = a.alloc(5)  # two pages
    assert s.dtype == torch.int64 and len(s) == 8
    assert s.reshape(2, 4).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert a.num_free == 4 and a.can_alloc(4) and not a.can_alloc(5)
    assert a.alloc(5) is None and a.num_free == 4  # nothing taken on refusal
    a.free(s)
    assert a.num_free == 12
    a.check_integrity()


def test_free_rejects_partial_pages_double_free_and_out_of_range():
    a = SlotAllocator(8, page_size=4)
    s = a.alloc(4)
    with pytest.raises(EngineError, match="whole pages"):
        a.free(s[:3])
    with pytest.raises(EngineError, match="whole pages"):
        a.free(torch.tensor([1, 2, 3, 4]))
    a.free(s)
    with pytest.raises(IntegrityError, match="double free"):
        a.free(s)
    b = SlotAllocator(4)
    with pytest.raises(EngineError, match="outside"):
        b.free([-1])
    with pytest.raises(EngineError, match="outside"):
        b.free([4])


def test_summary_counts_free_runs_and_fragmentation():
    a = SlotAllocator(10)
    assert a.summary() == AllocatorSummary(
        num_slots=10, num_free=10, num_free_runs=1, largest_free_run=10, fragmentation=0.0
    )
    s = a.alloc(10)
    assert a.summary() == AllocatorSummary(
        num_slots=10, num_free=0, num_free_runs=0, largest_free_run=0, fragmentation=0.0
    )
    a.free(s[[1, 2, 3, 5, 8]])  # runs 1-3, 5, 8
    summ = a.summary()
    assert (summ.num_free, summ.num_free_runs, summ.largest_free_run) == (5, 3, 3)
    assert summ.fragmentation == pytest.approx(1 - 3 / 5)


def test_summary_in_slots_with_pages():
    a = SlotAllocator(16, page_size=4)
    s = a.alloc(16)
    a.free(s[4:8])
    a.free(s[12:16])
    assert a.summary() == AllocatorSummary(
        num_slots=16, num_free=8, num_free_runs=2, largest_free_run=4, fragmentation=0.5
    )


def test_freed_pages_are_reused_in_address_order_once_the_front_runs_short():
    a = SlotAllocator(6)
    first = a.alloc(4)  # 0..3
    a.free(first[[2, 0]])
    assert a.alloc(2).tolist() == [4, 5]  # the front still holds 4, 5
    assert a.alloc(2).tolist() == [0, 2]  # merged and sorted


def test_events_only_when_enabled_and_bounded():
    a = SlotAllocator(8, page_size=2)
    s = a.alloc(3)
    assert a.take_events() == []
    a.enable_events(maxlen=2)
    t = a.alloc(2)
    a.free(s)
    a.free(t)
    ev = a.take_events()
    assert [(e.kind, e.num_slots, e.runs, e.num_free) for e in ev] == [
        ("free", 4, ((0, 4),), 6),
        ("free", 2, ((4, 2),), 8),
    ]
    assert a.num_events_dropped == 1 and [e.seq for e in ev] == [2, 3]
    assert a.take_events() == []
    a.disable_events()
    a.alloc(2)
    assert a.take_events() == []


def test_event_runs_split_non_contiguous_frees():
    a = SlotAllocator(8)
    a.enable_events()
    s = a.alloc(8)
    a.free(s[[0, 1, 4, 6, 7]])
    ev = a.take_events()
    assert ev[0].runs == ((0, 8),)
    assert ev[1].runs == ((0, 2), (4, 1), (6, 2))


def test_free_does_not_alias_the_callers_tensor():
    a = SlotAllocator(4)
    s = a.alloc(2)
    a.free(s)
    s[:] = 3  # the caller reuses its buffer
    a.check_integrity()
    assert sorted(a.alloc(4).tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("page_size", [1, 3])
def test_random_alloc_free_against_a_set(page_size):
    rng = random.Random(page_size)
    a = SlotAllocator(30 * page_size, page_size=page_size)
    held: list[torch.Tensor] = []
    used: set[int] = set()
    for _ in range(2000):
        if held and rng.random() < 0.45:
            s = held.pop(rng.randrange(len(held)))
            a.free(s)
            used -= set(s.tolist())
        else:
            n = rng.randint(1, 5 * page_size)
            s = a.alloc(n)
            need = -(-n // page_size) * page_size
            if s is None:
                assert a.num_free < need
                continue
            assert len(s) == need and not used & set(s.tolist())
            used |= set(s.tolist())
            held.append(s)
        a.check_integrity()
        assert a.num_free == a.num_slots - len(used)
        free_mask = np.ones(a.num_slots, bool)
        free_mask[list(used)] = False
        summ = a.summary()
        runs = [len(r) for r in "".join("1" if f else "0" for f in free_mask).split("0") if r]
        assert summ.num_free_runs == len(runs)
        assert summ.largest_free_run == max(runs, default=0)


def test_check_integrity_catches_a_corrupted_free_list():
    a = SlotAllocator(4)
    a.alloc(1)
    a._released.append(np.array([1]))  # page 1 listed free while in use
    a._num_free_pages += 1
    with pytest.raises(IntegrityError, match=r"counted 4, listed 4, marked free 3"):
        a.check_integrity()


def test_kv_tokens_for_memory():
    gib = 2**30
    assert kv_tokens_for_memory(10 * gib, 0.5, 1024) == 5 * 2**20
    assert kv_tokens_for_memory(10 * gib, 0.5, 1000, page_size=16) % 16 == 0
    assert kv_tokens_for_memory(10 * gib, 0.5, 1024, max_tokens=1000, page_size=16) == 992
    with pytest.raises(EngineError, match="at least one page"):
        kv_tokens_for_memory(1000, 0.1, 1024)
    with pytest.raises(EngineError, match="memory_ratio"):
        kv_tokens_for_memory(gib, 0.0, 1024)
