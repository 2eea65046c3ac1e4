"""The served engine's warm-up: the model's largest forwards run once, and nothing a request or a
step can see is changed by them."""

import logging

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from engine.runtime.warmup import warm_up
from engine.sampling import SamplingParams
from tests.engine.runtime.test_engine import prompts, run


def make(tiny_checkpoint, **kw) -> Engine:
    kw.setdefault("kv_tokens", 512)
    kw.setdefault("chunked_prefill_size", 64)
    return Engine(EngineConfig(model=tiny_checkpoint, **kw))


def test_warm_up_runs_full_chunks_and_leaves_no_trace(tiny_checkpoint, caplog):
    engine = make(tiny_checkpoint, page_size=16)
    free_before = engine.kv_allocator.summary()
    with caplog.at_level(logging.INFO, logger="engine"):
        done = warm_up(engine, 2)
    assert done is not None and (done.num_tokens, done.num_chunks) == (128, 2)
    assert done.duration_s > 0
    assert any(r.getMessage().startswith("Warm-up: 128 prompt tokens in 2 chunks") for r in caplog.records)
    assert engine.num_steps == 0 and not engine.has_work()
    assert engine.kv_allocator.summary() == free_before
    assert engine.state_allocator.num_used == 0
    assert engine.cache.evictable_tokens == 0
    engine.check_integrity()


def test_same_tokens_after_a_warm_up(tiny_checkpoint):
    """The warm-up leaves garbage in KV slots no request held and zeroes the state slot it used:
    every request must still read only what it wrote."""
    ps = prompts(5, seed=11, lo=30, hi=120)
    _, cold = run(make(tiny_checkpoint, page_size=16), ps)
    warm = make(tiny_checkpoint, page_size=16)
    assert warm_up(warm, 3) is not None
    _, after = run(warm, ps)
    assert after == cold


def test_warm_up_is_cut_to_the_pool_and_skipped_when_not_safe(tiny_checkpoint):
    small = warm_up(make(tiny_checkpoint, kv_tokens=96), 2)
    assert small is not None and (small.num_tokens, small.num_chunks) == (95, 2)  # the context is 96
    assert warm_up(make(tiny_checkpoint), 0) is None
    busy = make(tiny_checkpoint)
    busy.add_request(prompts(1)[0], SamplingParams(max_tokens=4, temperature=0))
    busy.step()  # the request holds slots now: the warm-up must not write them
    assert warm_up(busy, 2) is None
