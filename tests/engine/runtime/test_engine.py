"""The batched engine: same greedy tokens whatever the cache, chunking and memory pressure."""

import logging
import random

import pytest

from engine.errors import EngineError
from engine.runtime.config import EngineConfig, EngineConfigError
from engine.runtime.engine import Engine, RequestRejected
from engine.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)


def run(engine: Engine, prompts, params=GREEDY, check=True):
    """Run prompts to completion; {request id: generated ids}."""
    requests = [engine.add_request(p, params) for p in prompts]
    steps = 0
    while engine.has_work():
        engine.step()
        steps += 1
        if check:
            engine.check_integrity()
        assert steps < 10_000, "engine made no progress"
    engine.take_updates()
    return requests, [r.output_ids for r in requests]


def prompts(n, seed=0, lo=20, hi=90, vocab=256):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@pytest.fixture
def make(tiny_checkpoint):
    def _make(**kw):
        kw.setdefault("kv_tokens", 2048)
        return Engine(EngineConfig(model=tiny_checkpoint, **kw))

    return _make


def test_greedy_same_with_and_without_cache_chunking_and_batching(make):
    ps = prompts(6)
    alone = [run(make(cache_type="none", max_running_requests=1), [p])[1][0] for p in ps]
    _, cached = run(make(cache_type="hybrid_radix"), ps)
    _, chunked = run(make(chunked_prefill_size=16), ps)
    _, mixed = run(make(chunked_prefill_size=16, mixed_chunk=True), ps)
    assert cached == alone
    assert chunked == alone
    assert mixed == alone


def test_second_turn_reuses_previous_context(make):
    engine = make()
    first = prompts(1, seed=3)[0]
    (req1,), (out1,) = run(engine, [first])
    second = first + out1 + prompts(1, seed=4, lo=10, hi=10)[0]
    (req2,), (out2,) = run(engine, [second])
    # All of turn one but its last sampled token (never run through the model) is cached.
    assert req2.num_cached_tokens == len(first) + len(out1) - 1
    # and the answer is the one a cold engine gives
    _, (cold,) = run(make(cache_type="none"), [second])
    assert out2 == cold


def test_next_turn_sharing_only_the_prompt_reuses_all_of_it(make):
    # An agent's next prompt often holds the previous prompt but not the output as generated
    # (re-rendered history, stripped reasoning): the prompt-end snapshot serves it.
    engine = make()
    first = prompts(1, seed=15, lo=70, hi=70)[0]
    run(engine, [first])
    (req,), (out,) = run(engine, [first + [9, 9, 9, 9]])
    assert req.num_cached_tokens == len(first)
    _, (cold,) = run(make(cache_type="none"), [first + [9, 9, 9, 9]])
    assert out == cold


def test_shared_prefix_cached_through_chunk_anchors(make):
    engine = make(chunked_prefill_size=32)
    base = prompts(1, seed=5, lo=100, hi=100)[0]
    run(engine, [base + [1, 2, 3]])
    (req,), _ = run(engine, [base + [4, 5, 6]])
    # Snapshots were anchored at chunk boundaries 32, 64 and 96 of the first request.
    assert req.num_cached_tokens == 96
    assert engine.mamba_stats().num_anchored >= 3


def test_over_long_request_refused_while_others_go_on(make, caplog):
    engine = make(kv_tokens=256)
    ok = engine.add_request(prompts(1)[0], GREEDY)
    with caplog.at_level(logging.WARNING, logger="engine"):
        with pytest.raises(RequestRejected, match="exceeds"):
            engine.add_request(list(range(200)) * 2, GREEDY)
    assert "Input sequence length 400 exceeds 256, request 1 is dropped." in caplog.text
    while engine.has_work():
        engine.step()
    assert ok.finish_reason == "length" and len(ok.output_ids) == GREEDY.max_tokens


def test_kv_pressure_retracts_and_still_gives_the_same_tokens(make, caplog):
    ps = prompts(4, seed=7, lo=60, hi=60)
    long = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)
    _, roomy = run(make(kv_tokens=2048), ps, long)
    tight = make(kv_tokens=256, cache_type="none")
    with caplog.at_level(logging.WARNING, logger="engine"):
        _, squeezed = run(tight, ps, long)
    assert tight.scheduler.num_retractions > 0
    assert "KV cache pool is full. Retract requests. #retracted_reqs: 1" in caplog.text
    assert squeezed == roomy


def test_state_slot_exhaustion_evicts_snapshots_and_never_crashes(make):
    engine = make(mamba_slots=2, max_running_requests=2)
    _, outs = run(engine, prompts(6, seed=8))
    assert all(len(o) == GREEDY.max_tokens for o in outs)
    assert engine.mamba_stats().num_snapshots <= 2


def test_radix_cache_refused_for_hybrid_model(make):
    with pytest.raises(EngineConfigError, match="linear-attention"):
        make(cache_type="radix")


def test_a_model_with_no_linear_attention_serves_prefix_hits_from_the_radix_cache(tmp_path):
    """The KV-only cache is the one for such a model: a request that hits a cached prefix gets the
    tokens it gets without the cache (a hit used to copy a state snapshot the cache never has)."""
    from tests.engine._reference import write_reference

    write_reference("moe_no_shared_tied", tmp_path, layer_types=["full_attention"] * 3)
    system = prompts(1, seed=21, lo=40, hi=40)[0]
    turns = [system + [5, 6, 7], system + [8, 9]]
    outs = {}
    for cache_type in ("radix", "none"):
        engine = Engine(EngineConfig(model=str(tmp_path), device="cpu", kv_tokens=512, cache_type=cache_type))
        requests = [run(engine, [turn])[0][0] for turn in turns]
        outs[cache_type] = [r.output_ids for r in requests]
        if cache_type == "radix":
            assert requests[1].num_cached_tokens == len(system)
    assert outs["radix"] == outs["none"]


def test_abort_frees_memory(make):
    engine = make()
    a, b = (
        engine.add_request(p, SamplingParams(max_tokens=50, temperature=0, ignore_eos=True)) for p in prompts(2, seed=9)
    )
    for _ in range(4):
        engine.step()
    assert engine.abort(a.request_id)
    engine.check_integrity()
    while engine.has_work():
        engine.step()
    assert a.finish_reason == "abort" and b.finish_reason == "length"
    assert engine.cache_report().locked_tokens == 0
    assert not engine.abort(a.request_id)


def test_random_operations_keep_integrity(make):
    rng = random.Random(11)
    engine = make(kv_tokens=512, page_size=4, chunked_prefill_size=48, mamba_slots=6)
    history = prompts(3, seed=12)
    live = []
    for _ in range(300):
        op = rng.random()
        if op < 0.15:
            base = rng.choice(history)
            prompt = base[: rng.randint(1, len(base))] + [rng.randrange(256) for _ in range(rng.randint(1, 40))]
            history.append(prompt)
            params = SamplingParams(max_tokens=rng.randint(1, 20), temperature=rng.choice([0, 0.8]), seed=1)
            live.append(engine.add_request(prompt, params))
        elif op < 0.2 and live:
            engine.abort(rng.choice(live).request_id)
        else:
            engine.step()
        engine.check_integrity()
    while engine.has_work():
        engine.step()
        engine.check_integrity()
    assert all(r.is_finished for r in live)
    assert engine.kv_allocator.num_free + engine.cache_report().cached_tokens == 512


def test_step_stats_and_hooks(make):
    engine = make()
    engine.enable_allocator_events()
    engine.add_request(prompts(1)[0], GREEDY)
    phases = []
    while engine.has_work():
        stats = engine.step()
        phases.append(stats.phase)
        assert stats.forward_s > 0 and stats.kv_total_tokens == 2048
    assert phases[0] == "prefill" and set(phases[1:]) == {"decode"}
    assert len(phases) == GREEDY.max_tokens
    events = engine.take_allocator_events()
    assert events and events[0].kind == "alloc"
    summary = engine.allocator_summary()
    assert summary.num_free + engine.cache_report().cached_tokens == 2048
    with pytest.raises(EngineError):
        engine.add_request([], GREEDY)


def test_offloaded_experts_give_the_same_tokens_and_count_misses(make):
    ps = prompts(3, seed=13)
    _, resident = run(make(), ps)
    engine = make(moe_backend="offload", moe_cache_size=6)  # 3 MoE layers x 8 experts = 24
    _, offloaded = run(engine, ps)
    assert offloaded == resident
    stats = engine.expert_cache_stats()
    assert stats.num_slots == 6 and stats.misses > 0 and stats.evictions > 0
    assert stats.bytes_copied == stats.misses * engine.experts.slot_bytes // stats.num_slots
    with pytest.raises(EngineConfigError, match="moe_cache_size"):
        EngineConfig(moe_backend="offload")


def test_llm_batches_and_reports_cached_tokens(tiny_checkpoint):
    from engine import LLM

    llm = LLM(tiny_checkpoint, max_model_len=512)
    ps = prompts(3, seed=14)
    together = llm.generate(ps, GREEDY)
    alone = [LLM(tiny_checkpoint, max_model_len=512, cache_type="none").generate([p], GREEDY)[0] for p in ps]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert all(o.finish_reason == "length" and o.num_cached_tokens == 0 for o in alone)
    follow = ps[0] + together[0].token_ids + [7, 8, 9]
    (turn2,) = llm.generate([follow], GREEDY)
    assert turn2.num_cached_tokens == len(ps[0]) + len(together[0].token_ids) - 1


def test_step_stats_count_each_expert_miss_once(make):
    engine = make(moe_backend="offload", moe_cache_size=6)
    for p in prompts(2, seed=16):
        engine.add_request(p, GREEDY)
    per_step = []
    while engine.has_work():
        per_step.append(engine.step().expert_misses)
    assert all(m is not None and m >= 0 for m in per_step)
    assert sum(per_step) == engine.expert_cache_stats().misses > 0
    assert make().step() is None  # nothing queued; and resident experts report no misses:
    resident = make()
    resident.add_request(prompts(1)[0], GREEDY)
    assert resident.step().expert_misses is None
