"""Closed-loop replay: order within a session, think times, loops with fresh ids, the concurrency cap,
the gate, and the position a resume starts from."""

import asyncio
import time

from replay import MaterializeConfig, Materializer, read_trace
from soak.replayer import Position, Replayer, position_from, sessions_of
from tests.soak.conftest import write_trace


def _run(trace_path, deadline_s, concurrency=2, speed=1.0, position=None, call_s=0.02, **materialize):
    trace = read_trace(trace_path)
    sent = []  # (sid, turn, start, end)
    live = {"now": 0, "max": 0}

    async def send(sid, call, prompt):
        live["now"] += 1
        live["max"] = max(live["max"], live["now"])
        start = time.time()
        await asyncio.sleep(call_s)
        live["now"] -= 1
        sent.append((sid, call.turn, start, time.time(), prompt.num_input_tokens))

    async def go():
        mat = Materializer(MaterializeConfig(block_size=trace.header.block_size, **{"scale": 0.5, **materialize}))
        replayer = Replayer(sessions_of(trace), mat, send, concurrency, speed)
        await replayer.run(time.time() + deadline_s, position)
        return replayer

    replayer = asyncio.run(go())
    return sent, live["max"], replayer


def test_each_call_waits_for_the_previous_one_and_its_think_time(tmp_path):
    sent, _, _ = _run(write_trace(tmp_path / "t.jsonl", sessions=2, turns=3, think=0.1), deadline_s=1.5)
    by_session = {}
    for sid, turn, start, end, _ in sorted(sent, key=lambda r: r[2]):
        by_session.setdefault(sid, []).append((turn, start, end))
    for calls in by_session.values():
        turns = [t for t, _, _ in calls]
        assert turns == sorted(turns)
        for (_, _, prev_end), (_, start, _) in zip(calls, calls[1:]):
            assert start - prev_end >= 0.09  # think time 0.1 s at speed 1


def test_the_trace_loops_with_fresh_session_ids_until_the_deadline(tmp_path):
    sent, _, replayer = _run(
        write_trace(tmp_path / "t.jsonl", sessions=2, turns=2, think=0.0), deadline_s=2.0, speed=4.0
    )
    loops = {sid.rpartition("@")[2] for sid, *_ in sent}
    assert {"0", "1", "2"} <= loops
    assert all(end <= time.time() for *_, end, _ in sent)
    assert len({(sid, turn) for sid, turn, *_ in sent}) == len(sent)  # nothing sent twice


def test_concurrency_caps_sessions_in_flight(tmp_path):
    _, max_live, _ = _run(
        write_trace(tmp_path / "t.jsonl", sessions=6, turns=2, gap=0.0, think=0.0),
        deadline_s=1.0,
        concurrency=2,
        call_s=0.05,
    )
    assert max_live == 2


def test_scale_shrinks_prompts(tmp_path):
    sent, _, _ = _run(write_trace(tmp_path / "t.jsonl", sessions=1, turns=1), deadline_s=0.5)
    assert sent[0][4] == 10  # 5 blocks of 4 tokens, scale 0.5


def test_position_from_written_rows_resumes_each_session_after_its_last_done_turn():
    rows = [
        {"session": "s0@1", "turn": 0, "status": "ok"},
        {"session": "s0@1", "turn": 1, "status": "error"},
        {"session": "s1@1", "turn": 0, "status": "aborted"},
        {"session": "s0@0", "turn": 3, "status": "ok"},
        {"session": None, "turn": None, "status": "ok", "kind": "probe"},
    ]
    assert position_from(rows) == Position(1, {"s0": 2})


def test_a_resumed_replay_skips_done_turns(tmp_path):
    sent, _, _ = _run(
        write_trace(tmp_path / "t.jsonl", sessions=2, turns=3, think=0.0),
        deadline_s=0.6,
        position=Position(0, {"s0": 2, "s1": 3}),
        speed=0.5,
    )
    assert [(sid, turn) for sid, turn, *_ in sent if sid.endswith("@0")] == [("s0@0", 2)]


def test_max_context_drop_skips_the_over_long_call_and_the_session_goes_on(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", sessions=1, turns=4, overlong=True, think=0.0)
    sent, _, replayer = _run(trace, deadline_s=1.0, scale=1.0, max_context=200, over_limit="drop")
    assert [turn for sid, turn, *rest in sent if sid.endswith("@0")] == [0, 1, 2]  # turn 3 asks 5000 tokens
    assert replayer.materialize.num_dropped >= 1


def test_a_finished_conversation_is_forgotten_by_the_materializer(tmp_path):
    trace = read_trace(write_trace(tmp_path / "t.jsonl", sessions=3, turns=3, think=0.0))
    mat = Materializer(MaterializeConfig(block_size=trace.header.block_size))
    sids = set()

    async def send(sid, call, prompt):
        sids.add(sid)

    async def go():
        replayer = Replayer(sessions_of(trace), mat, send, 2, 10.0)
        await replayer.run(time.time() + 0.5)
        return replayer

    replayer = asyncio.run(go())
    assert replayer.num_sessions_done >= 3 and len(sids) >= 3
    assert not mat._last  # every conversation that ended left nothing behind


def test_a_call_woken_by_the_gate_waits_again_when_it_was_closed_before_it_ran():
    import asyncio

    from soak.replayer import Gate

    async def go():
        gate, passed = Gate(), []

        async def call():
            await gate.wait()
            passed.append(gate.is_open)

        with gate.closed():
            waiter = asyncio.create_task(call())
            await asyncio.sleep(0)
        with gate.closed():  # opened and closed again before the waiter ran
            await asyncio.sleep(0.01)
            assert passed == []
        await asyncio.wait_for(waiter, 1.0)
        return passed

    assert asyncio.run(go()) == [True]
