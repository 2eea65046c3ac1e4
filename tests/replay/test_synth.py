import pytest

from replay import TraceError
from replay.stats import trace_stats
from replay.synth import SynthConfig, synthesize
from replay.trace import Trace


def _by_session(calls):
    out = {}
    for c in calls:
        out.setdefault(c.session, []).append(c)
    return out


def test_same_seed_same_trace_other_seed_other_trace():
    cfg = SynthConfig(seed=3, sessions=3, calls_min=10, calls_max=20)
    assert synthesize(cfg) == synthesize(SynthConfig(seed=3, sessions=3, calls_min=10, calls_max=20))
    assert synthesize(cfg)[1] != synthesize(SynthConfig(seed=4, sessions=3, calls_min=10, calls_max=20))[1]


def test_agentic_sessions_share_a_large_fixed_prefix_and_grow_by_appends():
    cfg = SynthConfig(sessions=4, calls_min=30, calls_max=40, overlong_fraction=0.0)
    header, calls = synthesize(cfg)
    sessions = _by_session(calls)
    assert len(sessions) == 4
    prefix_blocks = cfg.prefix_tokens // cfg.block_size
    firsts = [s[0] for s in sessions.values()]
    assert len({f.hash_ids[:prefix_blocks] for f in firsts}) == 1  # one shared system prompt + tools
    assert len({f.hash_ids[prefix_blocks + 1] for f in firsts}) == 4  # then each its own
    for s in sessions.values():
        assert 0.8 * cfg.context_min <= s[0].input_tokens <= 1.2 * cfg.context_min
        for prev, cur in zip(s, s[1:]):
            if cur.kind == "turn" and prev.kind == "turn":
                full = prev.input_tokens // cfg.block_size
                assert cur.hash_ids[:full] == prev.hash_ids[:full]  # appended onto the cached prefix
                assert cur.input_tokens >= prev.input_tokens + prev.output_tokens
                assert cur.think_time > 0 and cur.t > prev.t
    stats = trace_stats(Trace(header, calls, 0, []))
    assert stats.prefix_reuse > 0.9


def test_compaction_replaces_history_with_prefix_and_summary():
    cfg = SynthConfig(
        sessions=2,
        calls_min=60,
        calls_max=60,
        context_min=10_000,
        context_max=60_000,
        compaction_at=50_000,
        summary_tokens=2_000,
        overlong_fraction=0.0,
    )
    _, calls = synthesize(cfg)
    compactions = [c for c in calls if c.kind == "compaction"]
    assert compactions
    for session in _by_session(calls).values():
        for prev, cur in zip(session, session[1:]):
            assert cur.input_tokens <= cfg.compaction_at + cfg.append_max
            if prev.kind == "compaction":
                assert prev.output_tokens == cfg.summary_tokens
                assert cur.input_tokens < prev.input_tokens
                # what remains: the fixed prefix, the summary, one new append
                assert cur.input_tokens <= cfg.prefix_tokens + cfg.summary_tokens + cfg.append_max
                blocks = cfg.prefix_tokens // cfg.block_size
                assert cur.hash_ids[:blocks] == prev.hash_ids[:blocks]


def test_over_long_calls_pass_context_max_and_are_followed_by_compaction():
    cfg = SynthConfig(
        sessions=3, calls_min=40, calls_max=40, overlong_fraction=0.1, context_max=100_000, compaction_at=90_000
    )
    header, calls = synthesize(cfg)
    over = [c for c in calls if c.input_tokens > cfg.context_max]
    assert 3 <= len(over) <= 25
    for session in _by_session(calls).values():
        for prev, cur in zip(session, session[1:]):
            if prev.input_tokens > cfg.context_max:
                assert cur.kind == "compaction" and cur.input_tokens <= cfg.context_max
    assert header.meta["max_context"] == 100_000


def test_concurrency_bounds_sessions_running_at_once():
    cfg = SynthConfig(sessions=9, concurrency=3, calls_min=5, calls_max=8)
    _, calls = synthesize(cfg)
    spans = [(s[0].t, s[-1].t) for s in _by_session(calls).values()]
    for t in sorted({a for a, _ in spans}):
        assert sum(1 for a, b in spans if a <= t <= b) <= 3


def test_duration_stops_sending():
    _, calls = synthesize(SynthConfig(sessions=20, concurrency=2, duration=600.0))
    assert calls and max(c.t for c in calls) <= 600.0


def test_chat_and_rag_profiles():
    _, chat = synthesize(SynthConfig.for_profile("chat", seed=1))
    assert max(c.input_tokens for c in chat) < 16_000
    assert all(1 <= len(s) <= 10 for s in _by_session(chat).values())
    assert all(c.reasoning_tokens == 0 for c in chat)
    cfg = SynthConfig.for_profile("rag", seed=1, sessions=10)
    _, rag = synthesize(cfg)
    assert len(_by_session(rag)) == 10
    blocks = cfg.prefix_tokens // cfg.block_size
    assert len({c.hash_ids[:blocks] for c in rag}) == 1  # one system prompt, many users


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(profile="code"), "profile: expected one of agentic, chat, rag, found 'code'"),
        (dict(prefix_tokens=20_000), "prefix_tokens: expected 0 <= prefix_tokens < context_min (10000), found 20000"),
        (dict(compaction_at=300_000), "compaction_at: expected <= context_max (230000), found 300000"),
        (dict(overlong_fraction=1.5), "overlong_fraction: expected a fraction in [0, 1], found 1.5"),
        (dict(sessions=0), "sessions: expected an integer >= 1, found 0"),
    ],
)
def test_bad_options_name_field_constraint_and_value(kwargs, message):
    with pytest.raises(TraceError) as info:
        SynthConfig(**kwargs)
    assert str(info.value) == message
