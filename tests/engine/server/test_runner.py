"""The engine thread: what a request streams is what the engine generates, aborts free memory,
the step history pages without loss, and a failed engine fails its requests instead of hanging."""

import queue
import threading

import pytest

from engine.runtime.engine import Engine, RequestRejected
from engine.sampling import SamplingParams
from engine.server.errors import EngineUnavailable
from engine.server.runner import EngineRunner
from tests.engine.server.conftest import engine_config, wait_until

GREEDY = SamplingParams(max_tokens=30, temperature=0, ignore_eos=True)
PROMPTS = [list(range(40, 40 + n)) for n in (12, 30, 55)]


@pytest.fixture
def runner(tiny_checkpoint):
    r = EngineRunner(Engine(engine_config(tiny_checkpoint)), step_history=8)
    r.start()
    yield r
    r.stop()


def run_to_end(runner, request_id, ids, params=GREEDY):
    deltas = queue.Queue()
    runner.submit(request_id, ids, params, deltas.put).result(timeout=10)
    out = []
    while not out or not out[-1].finished:
        out.append(deltas.get(timeout=20))
    return out


def test_streamed_tokens_and_text_match_a_direct_engine_run(runner, tiny_checkpoint):
    direct = Engine(engine_config(tiny_checkpoint))
    requests = [direct.add_request(p, GREEDY) for p in PROMPTS]
    while direct.has_work():
        direct.step()
    for i, (prompt, request) in enumerate(zip(PROMPTS, requests)):
        deltas = run_to_end(runner, f"r{i}", prompt)
        assert [t for d in deltas for t in d.token_ids] == request.output_ids
        assert "".join(d.text for d in deltas) == direct.output_text(request)
        last = deltas[-1]
        assert (last.finish_reason, last.num_prompt_tokens, last.num_output_tokens) == ("length", len(prompt), 30)


def test_rejected_request_raises_on_its_future(runner):
    with pytest.raises(RequestRejected, match="exceeds the engine's context"):
        runner.submit("long", [1] * 5000, GREEDY, lambda d: None).result(timeout=10)
    assert run_to_end(runner, "after", PROMPTS[0])[-1].finish_reason == "length"


def test_abort_frees_the_request_memory(runner):
    deltas = queue.Queue()
    runner.submit("a", PROMPTS[1], SamplingParams(max_tokens=1500, ignore_eos=True), deltas.put).result(10)
    deltas.get(timeout=10)
    runner.abort("a")
    last = wait_until(lambda: (d := deltas.get(timeout=10)).finished and d, what="the abort")
    assert last.finish_reason == "abort" and last.num_output_tokens < 1500
    report = runner.call(lambda e: (len(e.scheduler.running), e.cache_report().locked_tokens)).result(10)
    assert report == (0, 0)
    runner.call(lambda e: e.check_integrity()).result(10)


def test_step_history_pages_in_order_and_counts_what_fell_out(runner):
    run_to_end(runner, "s", PROMPTS[0], SamplingParams(max_tokens=20, temperature=0, ignore_eos=True))
    page = runner.steps_after(0, limit=100)
    assert page.last_step >= 20
    assert len(page.steps) == 8 and page.first_step == page.last_step - 7  # the history holds 8
    assert [s.step for s in page.steps] == list(range(page.first_step, page.last_step + 1))
    later = runner.steps_after(page.last_step - 3, limit=2)
    assert [s.step for s in later.steps] == [page.last_step - 2, page.last_step - 1]
    assert runner.steps_after(page.last_step, limit=5).steps == []


def test_finished_aborted_and_refused_requests_leave_nothing_on_the_engine_thread(runner):
    sinks = {}
    for i in range(24):
        sinks[f"m{i}"] = deltas = queue.Queue()
        runner.submit(f"m{i}", PROMPTS[i % 3], GREEDY, deltas.put).result(timeout=10)
        if i % 4 == 3:
            runner.abort(f"m{i}")
    with pytest.raises(RequestRejected):
        runner.submit("long", [1] * 5000, GREEDY, lambda d: None).result(timeout=10)
    for deltas in sinks.values():
        wait_until(lambda: deltas.get(timeout=20).finished, what="the last delta")
    assert runner.num_live == 0
    assert runner.call(lambda engine: engine.memory_report().num_requests).result(timeout=10) == 0
    assert runner.num_steps_held == 8  # the history's length, however many steps ran


def test_failed_engine_fails_live_and_new_requests(runner):
    deltas = queue.Queue()
    runner.submit("x", PROMPTS[0], SamplingParams(max_tokens=1500, ignore_eos=True), deltas.put).result(10)

    def broken_step():
        raise RuntimeError("device lost")

    runner.call(lambda e: setattr(e, "step", broken_step)).result(10)
    last = wait_until(lambda: (d := deltas.get(timeout=10)).finished and d, what="the failure")
    assert "device lost" in last.error
    assert not runner.alive and "device lost" in runner.error
    with pytest.raises(EngineUnavailable):
        runner.submit("y", PROMPTS[0], GREEDY, lambda d: None).result(10)


def test_idle_engine_thread_sleeps_instead_of_spinning(runner):
    import psutil

    run_to_end(runner, "warm", PROMPTS[0])
    tid = runner._thread.native_id

    def cpu_s():
        return next(t.user_time + t.system_time for t in psutil.Process().threads() if t.id == tid)

    before = cpu_s()
    threading.Event().wait(1.0)
    assert cpu_s() - before < 0.1  # a polling loop would burn most of that second
