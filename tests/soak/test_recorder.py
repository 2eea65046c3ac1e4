"""The driver's per-call state stays the same size however many calls a soak makes: a 12-hour
soak must not slow its own driver down (or let it grow into the engine's memory)."""

import asyncio

from replay import Call, MaterializeConfig, Materializer
from rundir.writer import RunStore
from soak.client import CallResult
from soak.profiler import Profiler, Profiles
from soak.recorder import RateWindow, Recorder, limit_in


def _result(t, status="ok"):
    return CallResult(
        t_send=t,
        t_first_token=t + 0.1,
        t_first_content=t + 0.1,
        t_last_token=t + 1.0,
        prompt_tokens=100,
        cached_tokens=50,
        output_tokens=20,
        reasoning_tokens=None,
        status=status,
        error="HTTP 400: context length 4096" if status == "refused" else None,
        num_token_chunks=20,
    )


def test_recording_many_calls_keeps_only_one_window_and_the_rows_of_one_flush(tmp_path):
    store = RunStore(tmp_path / "run")
    recorder = Recorder(store)
    t = 1_000_000.0
    for i in range(20_000):
        t += 0.05
        recorder.call(f"s#{i}", "s", None, None, _result(t, "refused" if i % 1000 == 0 else "ok"), 0, 1.0)
        if i % 2_000 == 0:
            store.flush()
    assert recorder.num_calls == 20_000 and recorder.num_failed == 20
    assert len(recorder.recent) <= 30 / 0.05 + 1  # the last 30 s of calls, not all of them
    assert sum(len(rows) for rows in store._rows.values()) < 2_000  # written out at each flush
    store.close()


def test_the_live_rate_counts_the_last_window_only():
    window = RateWindow(10.0)
    for t in range(100):
        window.add(float(t), 5)
    assert len(window) == 11 and window.rate(99.0) == 5.5
    assert window.rate(200.0) == 0.0 and len(window) == 0


def test_a_refusal_names_its_limit_not_the_length_asked_for():
    assert (
        limit_in(
            "HTTP 400: This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens (4000 in the messages, 1000 in the completion)."
        )
        == 4096
    )
    assert (
        limit_in("HTTP 400: The input (5000 tokens) is longer than the model's context length (4096 tokens).") == 4096
    )
    assert limit_in("HTTP 400: the request exceeds the available context size (2048 tokens), try increasing it") == 2048
    assert (
        limit_in("HTTP 400: request probe-1: input of 3000 tokens exceeds the engine's context of 2048 tokens") == 2048
    )
    assert limit_in("HTTP 400: prompt too long") is None
    assert limit_in(None) is None


def test_the_materializer_forgets_every_ended_conversation():
    materializer = Materializer(MaterializeConfig(block_size=4))
    for loop in range(200):
        for session in range(5):
            key = f"s{session}@{loop}"
            for turn in range(3):
                call = Call(
                    t=0.0,
                    session=f"s{session}",
                    turn=turn,
                    hash_ids=tuple(range(turn + 2)),
                    input_tokens=8 * (turn + 1),
                    output_tokens=2,
                )
                materializer(call, loop=loop, session_key=key)
            materializer.forget(key)
    assert materializer._last == {}


def test_profile_tasks_that_are_done_are_not_kept(tmp_path):
    class Quick(Profiler):
        async def record(self, pid, reason, label):
            return None

    async def go():
        profiles = Profiles(Quick(tmp_path, 1.0, enabled=True), tmp_path, lambda *a, **k: None, 0.3)
        profiles.profiler.disabled_reason = None
        for i in range(500):
            profiles.take("start", 1, 0)
            await asyncio.sleep(0)
        await profiles.wait()
        profiles.take("end", 1, 0)
        return len(profiles._tasks)

    assert asyncio.run(go()) <= 2
