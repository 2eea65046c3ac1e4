"""OffloadExperts: right weights, LRU with step protection, a staging slot for a step larger than the
cache, counts and bytes against a reference."""

import random

import pytest
import torch

from engine.errors import EngineError
from engine.model.experts import ExpertWeights, ResidentExperts
from engine.moe.expert_cache import OffloadExperts
from engine.moe.provider import make_expert_provider

H, I = 4, 3  # hidden, expert intermediate: tiny
EXPERT_BYTES = (2 * I * H + H * I) * 4  # float32


def loaded(num_slots, layers=(0, 1), experts=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    cache = OffloadExperts(num_slots)
    host = {}
    for layer in layers:
        for e in range(experts):
            w = ExpertWeights(torch.randn(2 * I, H, generator=g), torch.randn(H, I, generator=g))
            host[(layer, e)] = ExpertWeights(w.gate_up.clone(), w.down.clone())
            cache.load(layer, e, w)
    return cache, host


class NaiveLRU:
    """Reference: a list in LRU order; the victim is the first entry not used in this step. When
    every entry was, the first entry's slot becomes the step's staging slot (its expert evicted,
    counted as forced) and the step's further misses go through it uncached; the next step gets
    the slot back."""

    def __init__(self, cap):
        self.cap, self.order, self.used, self.step, self.forced, self.staged = cap, [], {}, 0, 0, 0
        self.staging = False
        self.counts = {}  # layer -> [hits, misses, evictions]

    def begin_step(self):
        self.step += 1
        self.staging = False

    def get(self, key):
        c = self.counts.setdefault(key[0], [0, 0, 0])
        self.used[key] = self.step
        if key in self.order:
            self.order.remove(key)
            self.order.append(key)
            c[0] += 1
            return
        c[1] += 1
        if len(self.order) + self.staging < self.cap:
            self.order.append(key)
        elif self.staging:
            self.staged += 1
        else:
            free = [k for k in self.order if self.used[k] != self.step]
            victim = free[0] if free else self.order[0]
            self.order.remove(victim)
            self.counts.setdefault(victim[0], [0, 0, 0])[2] += 1
            if free:
                self.order.append(key)
            else:
                self.forced += 1
                self.staged += 1
                self.staging = True


def test_get_returns_the_experts_weights_from_a_slot():
    cache, host = loaded(3)
    for key in [(0, 1), (1, 3), (0, 1), (1, 0), (0, 2), (1, 3)]:
        w = cache.get(*key)
        assert torch.equal(w.gate_up, host[key].gate_up) and torch.equal(w.down, host[key].down)
        assert w.gate_up.data_ptr() != cache._host[key].gate_up.data_ptr()  # a copy, not the host tensor
    cache.check_integrity(check_contents=True)


def test_scripted_sequence_counts_and_bytes():
    cache, _ = loaded(2, layers=(0, 1), experts=3)
    steps = [[(0, 0), (0, 1)], [(0, 0), (1, 2)], [(0, 1), (0, 1), (1, 2)], [(0, 2), (0, 0), (1, 1)]]
    for step in steps:
        cache.begin_step()
        for key in step:
            cache.get(*key)
    st = cache.stats()
    # step 1: miss, miss. step 2: hit, miss (evicts (0,1)). step 3: miss (evicts (0,0)), hit, hit (layer 1).
    # step 4: miss (evicts (0,1)), miss (evicts (1,2)), miss (all protected: (0,2)'s slot becomes
    # the staging slot, forced; (1,1) is copied there and not cached).
    assert (st.hits, st.misses, st.evictions, st.forced_evictions, st.staged_misses) == (3, 7, 5, 1, 1)
    assert [tuple(x[:4]) for x in st.per_layer] == [(0, 2, 5, 4), (1, 1, 2, 1)]
    assert st.bytes_copied == 7 * EXPERT_BYTES
    assert [x.bytes_copied for x in st.per_layer] == [5 * EXPERT_BYTES, 2 * EXPERT_BYTES]
    assert (st.num_slots, st.num_used, st.num_experts, st.leaked_slots) == (2, 1, 6, 0)
    assert (st.slot_bytes, st.host_bytes) == (2 * EXPERT_BYTES, 6 * EXPERT_BYTES)
    cache.check_integrity(check_contents=True)
    cache.begin_step()
    cache.get(1, 1)  # the staging slot is back: (1,1) is cached beside (0,0), nothing evicted
    assert (cache.stats().num_used, cache.stats().evictions) == (2, 5)
    cache.check_integrity(check_contents=True)


def test_experts_used_in_this_step_are_kept_while_an_older_one_exists():
    cache, _ = loaded(3, layers=(0,), experts=4)
    cache.begin_step()
    for e in (0, 1, 2):
        cache.get(0, e)
    cache.begin_step()
    cache.get(0, 2)
    cache.get(0, 1)
    cache.get(0, 3)  # 0 is the only expert not used in this step
    assert set(cache._resident) == {(0, 1), (0, 2), (0, 3)}
    assert cache.stats().forced_evictions == 0


def test_a_step_larger_than_the_cache_goes_through_one_staging_slot_and_stays_correct():
    cache, host = loaded(3, layers=(0,), experts=5)
    cache.begin_step()
    for e in range(5):
        w = cache.get(0, e)
        assert torch.equal(w.down, host[(0, e)].down)
        cache.check_integrity()
    st = cache.stats()
    # 0, 1, 2 fill the slots; 3 takes 0's slot as the staging slot; 4 reuses it
    assert (st.forced_evictions, st.evictions, st.staged_misses, st.num_used) == (1, 1, 2, 2)
    assert set(cache._resident) == {(0, 1), (0, 2)}  # what the cache held survives the overflow
    cache.begin_step()
    cache.get(0, 3)  # a free slot again: no eviction
    assert cache.stats().evictions == 1 and cache.stats().leaked_slots == 0
    cache.check_integrity(check_contents=True)


@pytest.mark.parametrize("num_slots", [1, 3, 5])
def test_random_steps_against_the_naive_lru(num_slots):
    rng = random.Random(num_slots)
    cache, host = loaded(num_slots, layers=(0, 2, 3), experts=4, seed=num_slots)
    ref = NaiveLRU(num_slots)
    keys = list(host)
    for _ in range(300):
        cache.begin_step()
        ref.begin_step()
        for _ in range(rng.randint(1, 4)):
            key = rng.choice(keys[:6]) if rng.random() < 0.7 else rng.choice(keys)  # a hot set
            w = cache.get(*key)
            ref.get(key)
            assert torch.equal(w.gate_up, host[key].gate_up)
        cache.check_integrity(check_contents=True)
        assert list(cache._resident) == ref.order
    st = cache.stats()
    assert {x.layer: [x.hits, x.misses, x.evictions] for x in st.per_layer} == ref.counts
    assert (st.forced_evictions, st.staged_misses) == (ref.forced, ref.staged)
    assert st.bytes_copied == st.misses * EXPERT_BYTES and st.hits > 0 and st.evictions > 0


def test_slots_are_capped_at_the_number_of_experts_and_loading_stops_after_allocation():
    cache, _ = loaded(100, layers=(0,), experts=2)
    cache.allocate()
    assert cache.stats().num_slots == 2
    with pytest.raises(EngineError, match="after the slots"):
        cache.load(0, 5, ExpertWeights(torch.zeros(2 * I, H), torch.zeros(H, I)))


def test_bad_use_is_a_clear_error():
    cache, _ = loaded(2)
    with pytest.raises(EngineError, match=r"\(7, 0\).*never loaded"):
        cache.get(7, 0)
    other = OffloadExperts(2)
    other.load(0, 0, ExpertWeights(torch.zeros(2, 2), torch.zeros(2, 1)))
    with pytest.raises(EngineError, match=r"\(0, 1\) has shapes \[\(4, 2\), \(2, 2\)\]"):
        other.load(0, 1, ExpertWeights(torch.zeros(4, 2), torch.zeros(2, 2)))
    with pytest.raises(EngineError, match="moe_cache_size must be >= 1"):
        OffloadExperts(0)


def test_make_expert_provider():
    assert isinstance(make_expert_provider("resident"), ResidentExperts)
    assert isinstance(make_expert_provider("offload", 4), OffloadExperts)
    with pytest.raises(EngineError, match="needs moe_cache_size"):
        make_expert_provider("offload")
    with pytest.raises(EngineError, match="resident, offload; got 'gpu'"):
        make_expert_provider("gpu")
