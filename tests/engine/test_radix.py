"""Radix and hybrid radix caches, case by case: what a scheduler would notice."""

import pytest
import torch

from engine.cache import make_prefix_cache
from engine.cache.eviction import LRUHeapPolicy
from engine.errors import EngineError
from engine.memory.allocator import IntegrityError, SlotAllocator


def build(cache_type="radix", kv_slots=64, page_size=1, state_slots=8, policy="lru"):
    kv = SlotAllocator(kv_slots, page_size)
    state = SlotAllocator(state_slots, name="state")
    return make_prefix_cache(cache_type, kv, state, policy), kv, state


def put(cache, kv, state, tokens, snapshot=False):
    """A finished request: its own slots for every token, inserted; returns the InsertResult."""
    slots = kv.alloc(len(tokens))
    snap = int(state.alloc(1)[0]) if snapshot else None
    res = cache.insert(tokens, slots, snap)
    kv.free(res.dup_kv_slot_ids)
    kv.free(slots[res.cached_len :])
    if res.unused_snapshot_slot is not None:
        state.free([res.unused_snapshot_slot])
    return res, slots


def test_match_reuses_the_slots_of_the_longest_cached_prefix():
    cache, kv, state = build()
    _, slots = put(cache, kv, state, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3, 9, 9])
    assert m.cached_len == 3 and m.kv_slot_ids.tolist() == slots[:3].tolist()
    assert m.state_slot is None
    rep = cache.cache_report()
    assert (rep.num_nodes, rep.num_leaves, rep.max_depth, rep.cached_tokens) == (2, 1, 2, 4)
    cache.check_integrity(kv_in_use=0)


def test_matching_is_page_granular():
    cache, kv, state = build(page_size=4)
    res, slots = put(cache, kv, state, list(range(10)))  # 2 whole pages cached, 2 tokens not
    assert res.cached_len == 8
    assert cache.match_prefix(list(range(10))).cached_len == 8
    assert cache.match_prefix([0, 1, 2, 3, 4, 5, 6, 99]).cached_len == 4  # page 2 differs
    assert cache.match_prefix([0, 1, 2, 99]).cached_len == 0
    cache.check_integrity(kv_in_use=0)


def test_duplicate_slots_go_back_to_the_caller_and_the_cache_keeps_its_own():
    cache, kv, state = build()
    _, first = put(cache, kv, state, [5, 6, 7])
    second = kv.alloc(4)
    res = cache.insert([5, 6, 7, 8], second)
    assert (res.prefix_len, res.cached_len) == (3, 4)
    assert res.dup_kv_slot_ids.tolist() == second[:3].tolist()
    assert cache.path_kv_slot_ids(res.node).tolist() == first.tolist() + [int(second[3])]
    kv.free(res.dup_kv_slot_ids)
    cache.check_integrity(kv_in_use=0)


def test_locked_prefix_survives_eviction_and_unlocking_makes_it_evictable():
    cache, kv, state = build(kv_slots=16)
    put(cache, kv, state, [1, 2, 3, 4])
    put(cache, kv, state, [1, 2, 7, 8])
    m = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock(m.node)
    assert cache.cache_report().locked_tokens == 4 and cache.evictable_tokens == 2
    assert cache.evict(100) == 2  # only the [7, 8] leaf
    assert cache.match_prefix([1, 2, 3, 4]).cached_len == 4
    cache.dec_lock(m.node)
    assert cache.evict(100) == 4 and kv.num_free == 16
    cache.check_integrity(kv_in_use=0)
    with pytest.raises(IntegrityError, match="without a matching inc_lock"):
        cache.dec_lock(m.node)


def test_eviction_takes_the_least_recently_used_leaf_first():
    cache, kv, state = build()
    put(cache, kv, state, [1, 1])
    put(cache, kv, state, [2, 2])
    put(cache, kv, state, [3, 3])
    cache.match_prefix([1, 1])  # [2, 2] is now the oldest
    assert cache.evict(1) == 2
    assert cache.match_prefix([2, 2]).cached_len == 0
    assert cache.match_prefix([1, 1]).cached_len == 2 and cache.match_prefix([3, 3]).cached_len == 2


def test_hybrid_match_stops_at_the_deepest_snapshot():
    cache, kv, state = build("hybrid_radix")
    res, slots = put(cache, kv, state, [1, 2, 3, 4], snapshot=True)
    snap = cache.match_prefix([1, 2, 3, 4, 5]).state_slot
    put(cache, kv, state, [1, 2, 3, 4, 5, 6, 7, 8])  # no snapshot at the longer prefix
    m = cache.match_prefix([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert (m.cached_len, m.state_slot) == (4, snap)
    assert m.kv_slot_ids.tolist() == slots.tolist()
    assert cache.match_prefix([1, 2, 3, 9]).cached_len == 0  # matched KV but no snapshot on the way
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_split_keeps_the_snapshot_with_the_node_whose_end_it_matches():
    cache, kv, state = build("hybrid_radix")
    put(cache, kv, state, [1, 2, 3, 4], snapshot=True)
    snap = cache.mamba_stats()
    put(cache, kv, state, [1, 2, 9], snapshot=True)  # splits [1 2 3 4] after 2 tokens
    assert cache.match_prefix([1, 2, 3, 4]).cached_len == 4
    assert cache.match_prefix([1, 2, 9]).cached_len == 3
    assert cache.match_prefix([1, 2, 5]).cached_len == 0  # the split point holds no snapshot
    assert cache.mamba_stats().num_snapshots == snap.num_snapshots + 1
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_hybrid_refuses_unaligned_and_second_snapshots():
    cache, kv, state = build("hybrid_radix", page_size=2)
    res, _ = put(cache, kv, state, [1, 2, 3], snapshot=True)  # state after 3 tokens: no page end
    assert res.unused_snapshot_slot is not None and cache.mamba_stats().num_snapshots == 0
    put(cache, kv, state, [1, 2], snapshot=True)
    res, _ = put(cache, kv, state, [1, 2], snapshot=True)
    assert res.unused_snapshot_slot is not None
    st = cache.mamba_stats()
    assert (st.num_snapshots, st.num_anchored, st.num_unused) == (1, 1, 2)
    assert state.num_free == 7
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_snapshot_eviction_is_lru_and_spares_the_pinned_one():
    cache, kv, state = build("hybrid_radix")
    for t in ([1], [2], [3]):
        put(cache, kv, state, t, snapshot=True)
    m = cache.match_prefix([1])  # [1] is now the most recent, [2] the oldest
    cache.inc_lock(m.node)
    assert cache.num_evictable_snapshots == 2
    assert cache.evict_snapshots(1) == 1
    assert cache.match_prefix([2]).cached_len == 0 and cache.match_prefix([3]).cached_len == 1
    assert cache.evict_snapshots(5) == 1  # [1] is pinned
    assert cache.match_prefix([1]).state_slot == m.state_slot
    cache.dec_lock(m.node)
    assert cache.evict_snapshots(5) == 1
    st = cache.mamba_stats()
    assert (st.num_snapshots, st.num_evicted) == (0, 3) and state.num_free == 8
    assert cache.cache_report().cached_tokens == 3  # KV stays; only the state went
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_evicting_a_kv_leaf_frees_its_snapshot():
    cache, kv, state = build("hybrid_radix")
    put(cache, kv, state, [1, 2], snapshot=True)
    assert cache.evict(2) == 2
    assert state.num_free == 8 and cache.mamba_stats().num_freed_with_kv == 1


def test_none_cache_keeps_nothing():
    kv = SlotAllocator(8)
    cache = make_prefix_cache("none", kv, SlotAllocator(2))
    slots = kv.alloc(3)
    res = cache.insert([1, 2, 3], slots, 1)
    assert (res.prefix_len, res.cached_len, len(res.dup_kv_slot_ids), res.unused_snapshot_slot) == (0, 0, 0, 1)
    m = cache.match_prefix([1, 2, 3])
    assert (m.cached_len, m.node, m.state_slot) == (0, None, None)
    cache.inc_lock(m.node)
    cache.dec_lock(m.node)
    assert cache.evict(10) == 0 and cache.evict_snapshots(1) == 0
    assert cache.cache_report().cached_tokens == 0 and cache.cache_report().queried_tokens == 3


def test_unknown_names_list_the_known_ones():
    kv = SlotAllocator(8)
    with pytest.raises(EngineError, match="hybrid_radix, radix, none; got 'lru'"):
        make_prefix_cache("lru", kv)
    with pytest.raises(EngineError, match="lru, lru_scan, lru_page_scan; got 'fifo'"):
        make_prefix_cache("radix", kv, None, "fifo")
    with pytest.raises(EngineError, match="state-slot allocator"):
        make_prefix_cache("hybrid_radix", kv)


def test_check_integrity_reports_the_numbers():
    cache, kv, state = build(kv_slots=16)
    put(cache, kv, state, [1, 2, 3])
    with pytest.raises(IntegrityError, match=r"free\(13\) \+ cached\(3\) \+ in_use\(2\) != total\(16\)"):
        cache.check_integrity(kv_in_use=2)
    leaked = kv.alloc(1)  # a slot nobody accounts for
    with pytest.raises(IntegrityError, match=r"free\(12\) \+ cached\(3\) \+ in_use\(0\)"):
        cache.check_integrity(kv_in_use=0)
    kv.free(leaked)
    cache.match_prefix([1, 2, 3]).node.lock_ref += 1
    with pytest.raises(IntegrityError, match="lock_ref 1 != direct 0"):
        cache.check_integrity()


def test_cached_slot_freed_behind_the_caches_back_is_caught():
    cache, kv, state = build()
    _, slots = put(cache, kv, state, [1, 2])
    kv.free(slots[:1])
    with pytest.raises(IntegrityError, match="1 cached slot"):
        cache.check_integrity()


def test_heap_stays_bounded_under_many_matches():
    cache, kv, state = build()
    put(cache, kv, state, [1, 2, 3])
    for _ in range(10_000):
        cache.match_prefix([1, 2, 3])
    policy = cache._kv_policy
    assert isinstance(policy, LRUHeapPolicy) and len(policy) <= 1024 + 1
    assert cache.evict(3) == 3


@pytest.mark.parametrize("cache_type", ["radix", "hybrid_radix"])
def test_a_split_node_outlives_the_long_prompt_it_came_from_without_its_tokens(cache_type):
    cache, kv, state = build(cache_type, kv_slots=256)
    put(cache, kv, state, list(range(200)), snapshot=True)
    put(cache, kv, state, list(range(10)) + [99], snapshot=True)  # splits the first node after 10
    assert cache.evict(1) == 190  # the least recently used leaf: the long prompt's tail
    index = cache.index_memory()
    assert (index.num_nodes, cache.cache_report().cached_tokens) == (2, 11)
    assert index.nbytes == 16 * 11  # a token id and a KV slot, 8 bytes each, per cached token
    cache.check_integrity(kv_in_use=0)


def test_insert_copies_the_callers_slot_tensor():
    cache, kv, state = build()
    slots = kv.alloc(3)
    cache.insert([1, 2, 3], slots)
    slots[:] = 7  # the caller reuses its buffer
    assert cache.match_prefix([1, 2, 3]).kv_slot_ids.tolist() == [0, 1, 2]


def test_slot_ids_accept_tensors_and_lists():
    cache, kv, state = build()
    cache.insert(torch.tensor([4, 5]), [0, 1])
    kv.alloc(2)
    assert cache.match_prefix(torch.tensor([4, 5, 6])).kv_slot_ids.tolist() == [0, 1]
