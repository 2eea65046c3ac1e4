"""The eviction-scan fault's policy, `lru_page_scan`, at the cache level: one page per victim, the
least recently used leaf's tail first, each found by scanning every unlocked page.

The engine-level test (same greedy tokens with and without the fault) is in test_faults.py."""

import numpy as np
import pytest

from engine.cache import make_prefix_cache
from engine.memory.allocator import SlotAllocator
from tests.engine.test_radix_random import World, drive


def _insert(cache, kv, tokens, snapshot=None):
    res = cache.insert(tokens, kv.alloc(len(tokens)), snapshot)
    kv.free(res.dup_kv_slot_ids)
    return res


def test_evicts_exactly_the_pages_asked_for_from_the_lru_leafs_tail():
    kv = SlotAllocator(64, page_size=2)
    cache = make_prefix_cache("radix", kv, eviction_policy="lru_page_scan")
    old = list(range(10))  # 5 pages
    new = [50] + list(range(1, 10))
    _insert(cache, kv, old)
    _insert(cache, kv, new)
    old_slots = cache.match_prefix(old[:9]).kv_slot_ids.tolist()  # [8]: touches old, now the newer
    _insert(cache, kv, new)  # new is the most recent again; old is the LRU leaf

    assert cache.evict(3) == 4  # 3 tokens: two whole pages, not the whole leaf
    assert kv.num_free == 64 - 20 + 4
    m = cache.match_prefix(old)
    assert (m.cached_len, m.kv_slot_ids.tolist()) == (6, old_slots[:6])  # the still-cached prefix
    assert cache.cache_report().cached_tokens == 16  # the other leaf untouched
    cache.check_integrity(kv_in_use=0)

    # old was just touched by the match: new is the LRU leaf now, cut from its tail
    assert cache.evict(1) == 2
    assert cache.match_prefix(new).cached_len == 8 and cache.match_prefix(old).cached_len == 6
    # more than a leaf holds: the leaf goes page by page, then the next LRU leaf's tail
    assert cache.evict(18) == 14  # all 14 cached tokens; asked for more, nothing else to free
    rep = cache.cache_report()
    assert (rep.cached_tokens, rep.num_nodes, rep.evicted_tokens) == (0, 0, 20)
    cache.check_integrity(kv_in_use=0)


def test_locked_pages_are_never_cut():
    kv = SlotAllocator(32)
    cache = make_prefix_cache("radix", kv, eviction_policy="lru_page_scan")
    _insert(cache, kv, [1, 2, 3, 4])
    res = _insert(cache, kv, [1, 2, 3, 4, 5, 6])
    cache.inc_lock(res.node)
    assert cache.evict(4) == 0 and cache.cache_report().cached_tokens == 6
    cache.dec_lock(res.node)
    assert cache.evict(3) == 3
    assert cache.match_prefix([1, 2, 3, 4, 5, 6, 7]).cached_len == 3
    cache.check_integrity(kv_in_use=0)


@pytest.mark.parametrize("page_size", [1, 4])
def test_pages_scanned_per_eviction_grow_with_the_cached_pages(page_size):
    """The scan visits every unlocked page once per page evicted (the heap: a few entries)."""
    per_eviction = {}
    for policy in ("lru", "lru_page_scan"):
        kv = SlotAllocator(20_000 * page_size, page_size)
        cache = make_prefix_cache("radix", kv, eviction_policy=policy)
        rng = np.random.default_rng(0)
        for size in (50, 400):  # leaves of 8 pages under distinct first pages
            while cache.cache_report().num_leaves < size:
                _insert(cache, kv, rng.integers(0, 1 << 20, 8 * page_size))
            pages = cache.evictable_tokens // page_size
            before = cache.eviction_counters().num_visited
            assert cache.evict(page_size) >= page_size
            per_eviction[policy, size] = cache.eviction_counters().num_visited - before
            if policy == "lru_page_scan":
                assert per_eviction[policy, size] == pages  # the whole free table, once
            cache.check_integrity(kv_in_use=0)
    assert per_eviction["lru_page_scan", 400] > 7 * per_eviction["lru_page_scan", 50]
    assert per_eviction["lru", 400] < 3 and per_eviction["lru", 50] < 3


def test_a_snapshot_cut_away_is_dropped_and_the_match_ends_at_the_one_still_cached():
    kv, state = SlotAllocator(32), SlotAllocator(4, name="state")
    cache = make_prefix_cache("hybrid_radix", kv, state, "lru_page_scan")
    short, long = [7, 8, 9, 10], [7, 8, 9, 10, 11, 12]
    _insert(cache, kv, long, int(state.alloc(1)[0]))
    _insert(cache, kv, short, int(state.alloc(1)[0]))  # splits long: a snapshot at each end
    assert state.num_free == 2 and cache.match_prefix(long + [0]).cached_len == 6

    assert cache.evict(1) == 1  # the tail page of the leaf, where its snapshot sits
    stats = cache.mamba_stats()
    assert (stats.num_snapshots, stats.num_freed_with_kv, state.num_free) == (1, 1, 3)
    m = cache.match_prefix(long + [0])
    assert (m.cached_len, m.state_slot) == (4, cache.match_prefix(short + [0]).state_slot)
    assert cache.cache_report().cached_tokens == 5  # the leaf's KV past the snapshot stays until cut
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_a_snapshot_cut_away_leaks_under_the_snapshot_leak_fault():
    kv, state = SlotAllocator(32), SlotAllocator(4, name="state")
    cache = make_prefix_cache("hybrid_radix", kv, state, "lru_page_scan", leak_snapshots_limit=1)
    for first in (1, 2):
        _insert(cache, kv, [first, 5, 6], int(state.alloc(1)[0]))
    assert cache.evict(1) == 1 and cache.evict(3) == 3  # both leaves' snapshots cut away
    assert cache.mamba_stats().num_leaked == 1 and state.num_free == 3  # one kept, one freed
    cache.check_integrity(kv_in_use=0, state_in_use=0)


class PageWorld(World):
    """The random-operations world of test_radix_random, with the page-granular policy: any LRU
    victim is accepted by the reference, and eviction must free exactly the whole pages asked for
    and keep every snapshot it does not drop where it was (a snapshot never moves to a cut end)."""

    def evict(self, n):
        evictable = len(self.ref_kv) - len(self.locked_prefixes())
        snapshots = dict(self.ref_snap)
        out = super().evict(n)
        if self.cache_type != "none":
            assert out[1] == min(self.kv.pages_for(n) * self.page_size, evictable)
            assert self.ref_snap.items() <= snapshots.items()
        return out


@pytest.mark.parametrize(
    "cache_type, page_size", [("radix", 1), ("radix", 2), ("hybrid_radix", 1), ("hybrid_radix", 3)]
)
def test_random_operations_keep_integrity_and_match_the_reference(cache_type, page_size):
    world = PageWorld(cache_type, page_size, "lru_page_scan", kv_slots=60 * page_size, state_slots=8)
    drive([world], seed=page_size * 11 + len(cache_type), steps=2500)  # check_integrity after each
    rep = world.cache.cache_report()
    assert rep.evicted_tokens > 0 and rep.matched_tokens > 0
    if cache_type == "hybrid_radix":
        assert world.cache.mamba_stats().num_freed_with_kv > 0


def test_tiny_pools_many_seeds():
    for seed in range(6):
        cache_type = ("radix", "hybrid_radix")[seed % 2]
        world = PageWorld(cache_type, 1 + seed % 3, "lru_page_scan", kv_slots=8 * (1 + seed % 3), state_slots=3)
        drive([world], seed=200 + seed, steps=300, alphabet=2, max_len=10)
