from replay import Call, TraceHeader
from replay.stats import trace_stats
from replay.trace import Trace


def test_stats_of_a_small_hand_made_trace():
    header = TraceHeader(block_size=10, source="test", meta={"max_context": 100})
    calls = [
        Call(t=0.0, session="a", turn=0, hash_ids=(1, 2, 3), input_tokens=25, output_tokens=5),
        Call(t=2.0, session="a", turn=1, hash_ids=(1, 2, 4, 5), input_tokens=40, output_tokens=5),  # append of 20
        Call(t=3.0, session="b", turn=0, hash_ids=(1, 6), input_tokens=20, output_tokens=90),  # over-long
        Call(
            t=9.0, session="a", turn=2, hash_ids=(1, 2, 4, 5, 7), input_tokens=45, output_tokens=30, kind="compaction"
        ),
        Call(t=12.0, session="a", turn=3, hash_ids=(1, 8), input_tokens=15, output_tokens=5),  # after compaction
    ]
    s = trace_stats(Trace(header, calls, 2, []))
    assert (s.num_sessions, s.num_calls, s.duration) == (2, 5, 12.0)
    assert s.calls_by_kind == {"turn": 4, "compaction": 1}
    # blocks sent: 3 + 4 + 2 + 5 + 2 = 16; seen before: 0 + 2 + 1 + 4 + 1 = 8
    assert s.prefix_reuse == 8 / 16
    assert s.num_appends == 1 and s.append_tokens.max == 20
    assert s.num_compactions == 1
    assert (s.max_context, s.num_over_long) == (100, 1)
    assert s.input_tokens.max == 45 and s.session_peak_input.count == 2
    assert s.num_skipped_lines == 2
    assert trace_stats(Trace(header, calls, 0, []), max_context=40).num_over_long == 3  # 45, 110, 75
