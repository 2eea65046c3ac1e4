"""What the engine keeps in host memory stays bounded however many requests it serves: finished
requests leave nothing behind, the prefix cache's index holds what it caches and no more, and
the allocator's event queue keeps its length. (The eviction heaps' bound is tested in
tests/engine/test_radix.py, the step history's in tests/engine/server/test_runner.py.)"""

import random

import pytest

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from engine.sampling import SamplingParams

KV_TOKENS = 512
SHORT = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)


@pytest.fixture
def engine(tiny_checkpoint):
    return Engine(EngineConfig(model=tiny_checkpoint, kv_tokens=KV_TOKENS, chunked_prefill_size=32))


def serve(engine: Engine, num_requests: int, seed: int = 0) -> None:
    """Agent-like traffic: sessions whose prompts extend a shared system prompt and their own
    previous turn, new sessions with fresh content, and every tenth request aborted midway."""
    rng = random.Random(seed)
    system = [rng.randrange(256) for _ in range(24)]
    sessions = [list(system) for _ in range(3)]
    for i in range(num_requests):
        s = rng.randrange(len(sessions))
        if len(sessions[s]) > 200:
            sessions[s] = list(system)  # a new session: the old one's turns are left to eviction
        sessions[s] += [rng.randrange(256) for _ in range(rng.randint(8, 40))]
        request = engine.add_request(sessions[s], SHORT)
        if i % 10 == 9:
            engine.step()
            engine.abort(request.request_id)
        while engine.has_work():
            engine.step()
        engine.take_updates()


def test_finished_and_aborted_requests_leave_nothing_behind(engine):
    serve(engine, 150)
    report = engine.memory_report()
    assert (report.num_requests, report.num_pending_updates) == (0, 0)
    assert engine.cache_report().evicted_tokens > KV_TOKENS  # the cache turned over several times
    engine.check_integrity()


def test_radix_index_holds_exactly_what_it_caches(engine):
    serve(engine, 150)
    report = engine.memory_report()
    assert 0 < report.cached_tokens <= KV_TOKENS
    assert report.radix_nodes <= report.cached_tokens
    # 8 bytes of token id and 8 of KV slot per cached token: evicted tokens' arrays are gone,
    # split nodes included
    assert report.radix_index_bytes == 16 * report.cached_tokens


def test_allocator_event_queue_keeps_its_length_and_counts_what_it_dropped(engine):
    serve(engine, 20)
    assert engine.memory_report().allocator_events == 0  # none queued unless enabled
    engine.enable_allocator_events(maxlen=16)
    serve(engine, 20, seed=1)
    assert engine.memory_report().allocator_events == 16
    assert engine.kv_allocator.num_events_dropped > 0
