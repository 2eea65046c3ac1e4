"""Degradation faults: each one's own signal grows with engine age against the fault-off control
on the same workload, greedy tokens stay the same, and each costs real work (counted, not timed)."""

import gc
import random

import numpy as np
import pytest
import torch

from engine.cache import make_prefix_cache
from engine.memory.allocator import SlotAllocator, disorder
from engine.model.experts import ExpertWeights
from engine.moe.expert_cache import OffloadExperts
from engine.runtime.config import EngineConfig, EngineConfigError
from engine.runtime.engine import Engine
from engine.runtime.faults import FAULTS
from engine.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)


class Run:
    """A few agentic sessions, turn by turn, on a small KV pool: every turn appends to its
    session, so the cache fills, evicts and reuses. Hook readings after every turn, and mid-turn."""

    def __init__(self, engine, num_sessions=6, turns=8, seed=0):
        rng = random.Random(seed)
        convs = [[rng.randrange(256) for _ in range(rng.randint(40, 80))] for _ in range(num_sessions)]
        self.engine, self.outputs, self.after_turn, self.mid_turn = engine, [], [], []
        self.evict_s = 0.0  # sum of StepStats.evict_s
        for _ in range(turns):
            reqs = [engine.add_request(list(c), GREEDY) for c in convs]
            steps = 0
            while engine.has_work():
                stats = engine.step()
                self.evict_s += stats.evict_s if stats is not None else 0.0
                engine.check_integrity()
                steps += 1
                if steps == 3:
                    self.mid_turn.append(engine.fault_stats())
                assert steps < 5000, "engine made no progress"
            engine.take_updates()
            self.outputs.append([r.output_ids for r in reqs])
            convs = [
                c + r.output_ids + [rng.randrange(256) for _ in range(rng.randint(10, 40))] for c, r in zip(convs, reqs)
            ]
            self.after_turn.append(engine.fault_stats())

    @property
    def last(self):
        return self.after_turn[-1]


@pytest.fixture
def make(tiny_checkpoint):
    def _make(**kw):
        kw.setdefault("kv_tokens", 1024)
        kw.setdefault("mamba_slots", 16)
        return Engine(EngineConfig(model=tiny_checkpoint, **kw))

    return _make


@pytest.fixture(scope="module")
def control(tiny_checkpoint):
    return Run(Engine(EngineConfig(model=tiny_checkpoint, kv_tokens=1024, mamba_slots=16)))


# --- config ----------------------------------------------------------------------------------


def test_unknown_fault_lists_the_known_ones():
    with pytest.raises(
        EngineConfigError,
        match="unknown fault 'slow'; known: eviction-scan, snapshot-leak, "
        "kv-scatter, expert-thrash, gc-pressure, output-buffer",
    ):
        EngineConfig(faults=("slow",))


def test_expert_thrash_requires_the_offload_backend():
    with pytest.raises(EngineConfigError, match="requires moe_backend='offload'.*got moe_backend='resident'"):
        EngineConfig(faults=("expert-thrash",))
    assert EngineConfig(faults=["expert-thrash"], moe_backend="offload", moe_cache_size=8).faults == ("expert-thrash",)


def test_faults_are_off_by_default_and_named_once():
    assert EngineConfig().faults == ()
    with pytest.raises(EngineConfigError, match="each fault at most once"):
        EngineConfig(faults=("kv-scatter", "kv-scatter"))
    with pytest.raises(EngineConfigError, match="tuple of fault names"):
        EngineConfig(faults="kv-scatter")
    # Each fault's own signal (the first figure its description names) is one the fault matrix
    # accepts as the mechanism found and named: the registry and the matrix cannot drift apart.
    import re

    from tokdrift.cli.fault_matrix import EXPECTED_SUSPECTS

    assert set(FAULTS) == set(EXPECTED_SUSPECTS)
    for name, fault in FAULTS.items():
        own = re.findall(r"[a-z0-9]+(?:_[a-z0-9]+)+", fault.signal)
        assert own and own[0] in EXPECTED_SUSPECTS[name], (name, fault.signal)


def test_the_control_leaves_every_fault_signal_at_rest(control):
    last = control.last
    assert last.faults == () and last.state_slots_leaked == 0 and last.retained_objects == 0
    assert last.expert_miss_rate is None and last.expert_copy_s_total is None  # resident experts
    # the torch backend on a CPU times its gathers, and they only grow
    gathers = [s.kv_gather_s_total for s in control.after_turn]
    assert 0 < gathers[0] <= gathers[-1]
    assert last.eviction_calls_total > 0  # the workload does evict: the faults have something to act on


# --- eviction-scan ---------------------------------------------------------------------------


def test_eviction_scan_evicts_page_by_page_scanning_the_cache_and_keeps_tokens(make, control):
    engine = make(faults=("eviction-scan",))
    run = Run(engine)
    assert run.outputs == control.outputs  # a page cut away is recomputed: same greedy tokens
    # exactly the pages asked for, so a full pool evicts on every step that needs a slot (decodes
    # too), where the healthy cache frees a whole leaf and is done for a while
    assert run.last.eviction_calls_total > 2 * control.last.eviction_calls_total
    evicted = engine.cache.cache_report().evicted_tokens  # pages: page_size 1
    # every page evicted scanned the whole free table: hundreds of pages of the 1024-slot pool
    assert run.last.eviction_nodes_visited_total / evicted > 200
    assert control.last.eviction_nodes_visited_total / control.last.eviction_calls_total < 10
    assert run.evict_s == pytest.approx(run.last.eviction_s_total) and run.evict_s > 0  # per step, all of it


@pytest.mark.parametrize("policy", ["lru", "lru_scan"])
def test_nodes_visited_per_eviction_grow_with_the_tree_only_for_the_scan(policy):
    kv = SlotAllocator(20_000)
    cache = make_prefix_cache("radix", kv, eviction_policy=policy)
    rng = np.random.default_rng(0)
    per_eviction = []
    for size in (50, 400):  # distinct 8-token branches under a shared root page
        while cache.cache_report().num_leaves < size:
            tokens = rng.integers(0, 256, 8)
            slots = kv.alloc(8)
            res = cache.insert(tokens, slots)
            kv.free(res.dup_kv_slot_ids)
        before = cache.eviction_counters().num_visited
        for _ in range(10):
            cache.evict(1)
        per_eviction.append((cache.eviction_counters().num_visited - before) / 10)
        cache.check_integrity()
    small, large = per_eviction
    if policy == "lru_scan":
        assert large > 5 * small  # the walk is O(nodes)
    else:
        assert large < 3 and small < 3  # one heap entry per victim, however big the tree


# --- snapshot-leak ---------------------------------------------------------------------------


def test_snapshot_leak_fills_state_slots_truncates_matches_and_keeps_tokens(make, control):
    engine = make(faults=("snapshot-leak",))
    run = Run(engine)
    assert run.outputs == control.outputs  # recomputing gives the same greedy tokens
    leaked = [s.state_slots_leaked for s in run.after_turn]
    assert leaked == sorted(leaked) and leaked[-1] > 0  # grows with engine age, never given back
    limit = engine.config.mamba_slots - engine.config.max_running_requests
    assert leaked[-1] <= limit  # running requests can always get a slot: the engine keeps serving
    assert run.last.match_truncated_tokens_total > control.last.match_truncated_tokens_total
    stats = engine.mamba_stats()
    assert stats.num_leaked == leaked[-1]
    assert stats.num_slots - stats.num_free == stats.num_snapshots + stats.num_leaked  # integrity counts them


def test_leaked_slots_are_counted_by_check_integrity_not_lost():
    kv, state = SlotAllocator(64), SlotAllocator(4)
    cache = make_prefix_cache("hybrid_radix", kv, state, leak_snapshots_limit=2)
    for i in range(3):
        tokens = [i] * 4
        cache.insert(tokens, kv.alloc(4), int(state.alloc(1)[0]))
    assert cache.evict(12) == 12
    assert cache.mamba_stats().num_leaked == 2 and state.num_free == 2  # 2 leaked, the third freed
    cache.check_integrity(kv_in_use=0, state_in_use=0)


def test_snapshot_leak_sets_in_at_its_onset_request(make, control):
    engine = make(faults=("snapshot-leak",), fault_leak_after=18)  # 6 sessions a turn: the third turn's end
    run = Run(engine)
    assert run.outputs == control.outputs
    leaked = [s.state_slots_leaked for s in run.after_turn]
    assert leaked[:3] == [0, 0, 0] and leaked[-1] > 0  # none before the onset, then it leaks
    assert [s.match_truncated_tokens_total for s in run.after_turn[:3]] == [
        s.match_truncated_tokens_total for s in control.after_turn[:3]
    ]  # before it, the engine is the healthy one


def test_the_leak_onset_is_a_whole_number():
    with pytest.raises(EngineConfigError, match="fault_leak_after"):
        EngineConfig(fault_leak_after=-1)


# --- kv-scatter ------------------------------------------------------------------------------


def test_kv_scatter_scrambles_reused_slots_and_keeps_tokens(make, control):
    run = Run(make(faults=("kv-scatter",)))
    assert run.outputs == control.outputs
    assert run.last.kv_free_list_disorder > 0.5 > control.last.kv_free_list_disorder
    breaks = [s.kv_gather_breaks for s in run.mid_turn]
    assert breaks[0] < 0.05  # a fresh pool hands out contiguous slots
    # once the pool has cycled (turn 6 of 8 here), running requests read scattered KV
    assert breaks[-1] > 0.9 > 0.3 > max(s.kv_gather_breaks for s in control.mid_turn)


def test_the_kv_gather_is_timed_only_where_it_runs_when_called():
    from engine.model.attention_backend import TorchAttention

    assert TorchAttention("cpu").gather_s == 0.0
    assert TorchAttention("cuda").gather_s is None  # the call only enqueues it there


def test_scattered_allocator_hands_out_scattered_runs_after_one_cycle():
    def cycle(alloc):
        held = [alloc.alloc(64) for _ in range(16)]  # the whole pool, in order
        for h in held[::2] + held[1::2]:
            alloc.free(h)
        return [disorder(alloc.alloc(64)) for _ in range(16)], alloc.summary()

    healthy, h_sum = cycle(SlotAllocator(1024))
    scattered, s_sum = cycle(SlotAllocator(1024, scatter_seed=0))
    assert max(healthy) < 0.05  # merged in address order: contiguous again
    assert min(scattered) > 0.8
    assert s_sum.num_free == h_sum.num_free == 0


def test_scattered_slots_make_the_gather_touch_more_runs():
    """The real work: the attention gather reads a request's KV rows by slot; scattered slots
    turn one contiguous read into one read per token (counted as runs, not timed)."""
    alloc = SlotAllocator(4096, scatter_seed=0)
    first = alloc.alloc(4096)
    alloc.free(first)
    slots = alloc.alloc(1024).numpy()
    runs = 1 + np.count_nonzero(np.diff(slots) != 1)
    assert runs > 900
    k = torch.randn(4096, 2, 16)
    assert torch.equal(k[torch.from_numpy(slots)], torch.stack([k[s] for s in slots]))  # same values


# --- expert-thrash ---------------------------------------------------------------------------


def _experts(num_slots, thrash=False, layers=2, experts=8):
    cache = OffloadExperts(num_slots, thrash=thrash)
    g = torch.Generator().manual_seed(0)
    host = {}
    for layer in range(layers):
        for e in range(experts):
            host[(layer, e)] = ExpertWeights(torch.randn(6, 4, generator=g), torch.randn(4, 3, generator=g))
            cache.load(layer, e, ExpertWeights(*(t.clone() for t in host[(layer, e)])))
    return cache, host


def _mixed_steps(num_steps=300, seed=0):
    """Serving, as the cache sees it: decode steps ask each layer for 1-3 experts; every 20th step
    is a prefill chunk, which routes to every expert of every layer."""
    rng = random.Random(seed)
    return [
        [
            (layer, e)
            for layer in range(2)
            for e in (range(8) if i % 20 == 10 else rng.sample(range(8), rng.randint(1, 3)))
        ]
        for i in range(num_steps)
    ]


def test_expert_thrash_leaks_staging_slots_so_the_miss_rate_climbs_with_age():
    windows, leaked = {}, {}
    for thrash in (False, True):
        cache, host = _experts(14, thrash=thrash)
        lookups, leaks = [], []
        for keys in _mixed_steps():
            cache.begin_step()
            for key in keys:
                w = cache.get(*key)
                assert torch.equal(w.gate_up, host[key].gate_up) and torch.equal(w.down, host[key].down)
            cache.check_integrity(check_contents=True)
            st = cache.stats()
            lookups.append((st.hits + st.misses, st.misses))
            leaks.append(st.leaked_slots)
        rate = lambda a, b: (lookups[b][1] - lookups[a][1]) / (lookups[b][0] - lookups[a][0])  # noqa: E731
        windows[thrash] = rate(9, 59), rate(249, 299)  # young (after the first fill), old
        leaked[thrash] = leaks
    healthy, thrash = windows[False], windows[True]
    assert abs(healthy[1] - healthy[0]) < 0.1  # LRU: the same miss rate young and old
    assert thrash[0] < healthy[0] + 0.15  # young, the faulty cache is close to healthy
    assert thrash[1] > 0.9 > healthy[1] + 0.3  # old, nearly every lookup copies
    assert leaked[False][-1] == 0
    assert leaked[True] == sorted(leaked[True]) and leaked[True][-1] == 13  # drained to the last slot


def test_expert_thrash_climbs_with_engine_age_and_keeps_tokens(make):
    kw = dict(moe_backend="offload", moe_cache_size=22)  # of 3 MoE layers x 8 experts: a prefill overflows
    healthy_engine, thrash_engine = make(**kw), make(faults=("expert-thrash",), **kw)
    healthy, thrash = Run(healthy_engine), Run(thrash_engine)
    assert thrash.outputs == healthy.outputs  # a cache only moves weights

    def per_turn(run):  # bytes copied in each turn: the same lookups in both engines
        copied = [s.expert_bytes_copied_total for s in run.after_turn]
        return [copied[0]] + [b - a for a, b in zip(copied, copied[1:])]

    h, t = per_turn(healthy), per_turn(thrash)
    assert t[0] < 1.5 * h[0]  # young: close to healthy
    assert sum(t[-2:]) > 3 * sum(h[-2:])  # old: several times the copies for the same tokens
    assert sum(h[-2:]) < 1.2 * sum(h[:2])  # the healthy cache does not age
    rates = [s.expert_miss_rate for s in thrash.after_turn]
    assert rates[-1] > rates[0] + 0.2 and rates[-1] > healthy.last.expert_miss_rate + 0.3
    assert thrash_engine.expert_cache_stats().leaked_slots > 10 == 10 + healthy_engine.expert_cache_stats().leaked_slots
    # the copies take time, counted where they happen (more copies, at least as much time)
    assert 0 < healthy.last.expert_copy_s_total and thrash.last.expert_copy_s_total > 0


# --- gc-pressure -----------------------------------------------------------------------------


@pytest.fixture
def unfreeze():
    yield
    gc.unfreeze()


def test_gc_pressure_retains_requests_and_collects_a_growing_heap(make, control, unfreeze):
    engine = make(faults=("gc-pressure",))
    gen2_before = engine.gc_stats().gen2_collections
    run = Run(engine)
    assert run.outputs == control.outputs
    retained = [s.retained_objects for s in run.after_turn]
    assert retained == sorted(retained) and retained[0] > 0  # the heap grows with every turn
    assert run.last.retained_requests == 48  # every finished request, kept for good
    gc_stats = engine.gc_stats()
    assert gc_stats.gen2_collections - gen2_before >= engine.num_steps  # a full collection every step
    assert gc_stats.last_full_pause_s is not None and gc_stats.full_pause_s_total > 0


# --- output-buffer ---------------------------------------------------------------------------


def test_output_buffer_grows_at_the_chosen_request_and_every_step_clears_it(make, control):
    engine = make(faults=("output-buffer",), fault_buffer_rows=512, fault_after=20)
    vocab = engine.model_config.vocab_size
    run = Run(engine)
    assert run.outputs == control.outputs  # the logits pass through the buffer unchanged
    sizes = [s.output_buffer_bytes for s in run.after_turn]  # six requests finish a turn
    assert sizes[0] == sizes[2] <= engine.config.max_running_requests * vocab * 4  # the widest step's logits
    assert sizes[3:] == [512 * vocab * 4] * 5  # the 20th finished request grew it, for good
    assert control.last.output_buffer_bytes == 0
    buffer = engine._output_buffer.buffer
    buffer.fill_(7.0)
    engine.add_request([1, 2, 3], GREEDY)
    while engine.has_work():
        engine.step()
    assert float(buffer[100:].abs().max()) == 0.0  # rows no step wrote, cleared all the same


def test_gc_monitor_counts_collections():
    from engine.runtime.gcstats import gc_monitor

    before = gc_monitor().stats()
    gc.collect()
    after = gc_monitor().stats()
    assert after.gen2_collections == before.gen2_collections + 1
    assert after.pause_s_total >= before.pause_s_total
