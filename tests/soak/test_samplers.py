"""Samplers: the built-in hooks mapping, the process, the GPU, an external engine's log."""

import pytest

from tests.soak.fakes import FakeTarget, engine_step


def test_hooks_row_maps_the_cache_status_json_and_turns_gc_totals_into_pauses():
    from engine.server.wire import CacheStatus
    from soak.samplers import EngineHooks

    hooks = EngineHooks(FakeTarget())
    status = {
        "engine_age_s": 12.5,
        "cache_report": {"num_nodes": 7, "cached_tokens": 300, "evictable_tokens": 200, "locked_tokens": 100},
        "mamba_stats": {"num_slots": 32, "num_free": 30, "num_snapshots": 1},
        "allocator_summary": {"num_free": 50, "num_free_runs": 3, "largest_free_run": 40, "fragmentation": 0.2},
        "expert_cache_stats": {"hits": 90, "misses": 10, "evictions": 4},
        "gc": {"gen2_collections": 2, "pause_s_total": 0.5},
    }
    first = hooks.row(CacheStatus.from_json(status))
    assert first["radix_nodes"] == 7 and first["radix_locked_tokens"] == 100
    assert first["mamba_slots_used"] == 2 and first["kv_largest_free_run"] == 40
    assert first["gc_gen2_collections"] == 2 and "gc_pause_s" not in first and "expert_miss_rate" not in first
    assert "heap_kept_bytes" not in first  # an engine that does not say what its malloc keeps
    status["gc"] = {"gen2_collections": 3, "pause_s_total": 0.75}
    status["expert_cache_stats"] = {"hits": 120, "misses": 20, "evictions": 9}
    second = hooks.row(CacheStatus.from_json(status))
    assert second["gc_pause_s"] == 0.25 and second["expert_miss_rate"] == 0.25


def test_process_sampler_reads_a_live_process_and_nothing_for_a_missing_one():
    import os

    from soak.samplers import ProcessSampler

    row = ProcessSampler().sample(os.getpid())
    assert row["rss_bytes"] > 1e6 and row["num_threads"] >= 1 and row["num_fds"] >= 3
    assert ProcessSampler().sample(None) == {}
    assert ProcessSampler().sample(2**22 + 12345) == {}  # no such pid


def test_no_gpu_is_not_an_error():
    from soak.samplers import GpuSampler

    gpu = GpuSampler()
    row = gpu.sample()
    assert row == {} if not gpu.handles else set(row) == {"gpu_mem_bytes", "gpu_util"}


def test_log_tailer_copies_new_lines_and_parses_engine_lines_in_local_time(tmp_path):
    import time

    from soak.external import LogTailer

    log = tmp_path / "ft.log"
    log.write_text("[2026-01-01|00:00:00] INFO     old line before the soak\n")
    tailer = LogTailer(FakeTarget(), log, tmp_path / "copy.log")
    now = time.time()
    stamp = time.strftime("%Y-%m-%d|%H:%M:%S", time.localtime(now))
    with open(log, "a") as f:
        f.write(
            f"[{stamp}] INFO     Decode batch, #running-req: 2, #token: 900, token usage: 0.31, "
            f"gen throughput (token/s): 38.16, #queue-req: 0\n[{stamp}] INFO     Decode bat"
        )  # torn last line
    rows = tailer.sample()
    assert len(rows) == 1 and rows[0]["gen_tps"] == 38.16 and rows[0]["num_running_reqs"] == 2
    assert abs(rows[0]["t"] - now) < 2
    assert (tmp_path / "copy.log").read_text().count("\n") == 1  # the torn line waits for its end


def test_log_tailer_hands_the_figures_a_log_states_to_the_snapshot_and_forwards_a_faults_turning_on(tmp_path):
    """vLLM's log with tokdrift's step-cost fault in it: the fault's state lines become the next
    snapshot's figures (the latest of each), its turning on an event of the run."""
    import time

    from soak.external import LogTailer

    target = FakeTarget()
    log = tmp_path / "vllm.log"
    log.write_text("")
    tailer = LogTailer(target, log, tmp_path / "copy.log")
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
    said = f"(EngineCore pid=9) WARNING {stamp} [fault.py:101] tokdrift fault step-cost:after=2,entries=8,limit=99"
    with open(log, "a") as f:
        f.write(f"{said}: on from this request (pid 9)\n")
        f.write(f"{said}: 8 entries held, 0.001 s spent walking them (pid 9)\n")
        f.write(f"{said}: 16 entries held, 0.004 s spent walking them (pid 9)\n")
    assert tailer.sample() == []
    assert tailer.take_figures() == {"fault_entries": 16.0, "fault_walk_s_total": 0.004}
    assert tailer.take_figures() == {}  # taken: the next snapshot states only what the log says anew
    (kind, fields), *_ = target.events
    assert kind == "fault_on" and fields["detail"] == "fault=step-cost, after=2, entries=8, limit=99"


def test_log_tailer_places_llama_server_stamps_at_the_engine_start_and_sees_a_new_process(tmp_path):
    import time

    from soak.external import LogTailer

    target = FakeTarget(started_at=time.time() - 100.0)  # the process started 100 s ago
    events = target.events
    timing = (
        "{stamp} I slot print_timing: id  3 | task {task} |        eval time =     878.75 ms /    64 tokens "
        "(   13.95 ms per token,    71.69 tokens per second)\n"
    )
    log = tmp_path / "llama-server.log"
    log.write_text("0.00.008.976 I srv  llama_server: initializing ...\n" * 5)
    tailer = LogTailer(target, log, tmp_path / "copy.log")
    with open(log, "a") as f:
        f.write(timing.format(stamp="1.30.000.000", task=1))  # 90 s after the start
    (row,) = tailer.sample()
    assert row["t"] == pytest.approx(target.started_at + 90.0) and row["engine_age_s"] == pytest.approx(90.0)
    assert row["gen_tps"] == 71.69 and events == []
    # llama-server started again (its --log-file starts over): stamps from 0 again, a new engine life.
    log.write_text("0.00.008.976 I srv  llama_server: initializing ...\n" + timing.format(stamp="0.02.000.000", task=1))
    (row,) = tailer.sample()
    assert [kind for kind, _ in events] == ["engine_start"] and target.life == 1
    assert target.started_at == pytest.approx(time.time() - 2.0, abs=1.0)
    assert row["engine_life"] == 1 and row["engine_age_s"] == pytest.approx(2.0, abs=1.0)
    # The KV cache without room for a batch (a real 0.3.1 server's line): an event of the run, on the stamp's clock.
    events.clear()
    with open(log, "a") as f:
        f.write(
            "0.11.504.391 W srv  update_slots: failed to find free space in the KV cache, retrying with smaller "
            "batch size - try increasing it via the context size or enable defragmentation, i = -1024, "
            "n_batch = 1024, ret = 1\n" + timing.format(stamp="0.12.000.000", task=2)
        )
    (row,) = tailer.sample()
    ((kind, fields),) = events
    assert kind == "kv_no_space" and fields["limit"] == 1024.0 and fields["engine_life"] == 1
    assert fields["t"] == pytest.approx(target.started_at + 11.504391)
    assert fields["detail"].startswith("failed to find free space in the KV cache")


def test_saved_scrapes_keep_what_diag_reads_and_drop_histogram_buckets():
    from soak.external import _keep_engine_samples

    page = (
        "# HELP vllm:generation_tokens Number of generation tokens.\n"
        "# TYPE vllm:generation_tokens counter\n"
        'vllm:generation_tokens_total{model_name="m"} 1234.0\n'
        "# TYPE vllm:inter_token_latency_seconds histogram\n"
        'vllm:inter_token_latency_seconds_bucket{le="0.01",model_name="m"} 5.0\n'
        'vllm:inter_token_latency_seconds_sum{model_name="m"} 2.5\n'
        'vllm:inter_token_latency_seconds_count{model_name="m"} 100.0\n'
        'python_gc_objects_collected_total{generation="0"} 10.0\n'
        "process_start_time_seconds 1.7e9\n"
    )
    kept = _keep_engine_samples(page).splitlines()
    assert kept == [
        'vllm:generation_tokens_total{model_name="m"} 1234.0',
        'vllm:inter_token_latency_seconds_sum{model_name="m"} 2.5',
        'vllm:inter_token_latency_seconds_count{model_name="m"} 100.0',
        "process_start_time_seconds 1.7e9",
    ]


def test_a_real_llama_server_page_keeps_every_llamacpp_sample():
    from pathlib import Path

    from soak.external import _keep_engine_samples

    page = (Path(__file__).parents[1] / "logformats" / "fixtures" / "metrics" / "llama-server-metrics.txt").read_text()
    kept = _keep_engine_samples(page).splitlines()
    assert len(kept) == 15 and all(line.startswith("llamacpp:") for line in kept)
    assert "llamacpp:tokens_predicted_total 715" in kept and "llamacpp:requests_processing 2" in kept


def test_profiler_records_a_speedscope_profile_of_a_running_python_process(tmp_path):
    import asyncio
    import json
    import subprocess
    import sys

    from soak.profiler import Profiler

    busy = subprocess.Popen([sys.executable, "-c", "while True: sum(i * i for i in range(1000))"])
    try:
        profiler = Profiler(tmp_path, seconds=1.0)
        profile = asyncio.run(profiler.record(busy.pid, "start", "start"))
    finally:
        busy.kill()
        busy.wait()
    if profiler.disabled_reason:  # no py-spy here, or no ptrace permission: logged, not fatal
        assert profile is None
        pytest.skip(f"py-spy cannot profile here ({profiler.disabled_reason}); the soak goes on without profiles")
    data = json.loads(profile.path.read_text())
    assert data["$schema"].startswith("https://www.speedscope.app") and data["profiles"]
    assert any("genexpr" in frame["name"] for frame in data["shared"]["frames"])


def test_profiler_stops_trying_on_an_engine_that_is_not_python(tmp_path):
    # llama-server: py-spy fails on it at every profile point; the soak gives up once, saying why.
    import asyncio
    import subprocess

    from soak.profiler import Profiler

    native = subprocess.Popen(["sleep", "30"])
    try:
        profiler = Profiler(tmp_path, seconds=1.0)
        if profiler.disabled_reason:
            pytest.skip(f"py-spy cannot profile here ({profiler.disabled_reason})")
        assert asyncio.run(profiler.record(native.pid, "start", "start")) is None
    finally:
        native.kill()
        native.wait()
    if "permission" in (profiler.disabled_reason or ""):
        pytest.skip(profiler.disabled_reason)
    assert f"(pid {native.pid}, sleep) is not a Python process" in profiler.disabled_reason


def test_host_sampler_measures_the_driver_the_control_and_what_other_tenants_use():
    import os
    import subprocess
    import sys

    from soak.samplers import HostSampler

    # The child says when its interpreter is up: sampled before that, its RSS is the exec's.
    busy = subprocess.Popen(
        [sys.executable, "-c", "print('up', flush=True)\nwhile True: pass"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert busy.stdout.readline().strip() == "up"
        host = HostSampler()
        first = host.sample(10.0, 123, busy.pid)
        assert first["driver_rss_bytes"] > 1e6 and first["host_cpu_percent"] >= 0
        if sys.platform.startswith("linux"):  # its own pages: fewer than all it has resident, but some
            assert 1e6 < first["driver_anon_bytes"] < first["driver_rss_bytes"]
        assert first["control_rss_bytes"] > 1e6
        assert "control_cpu_percent" not in first  # psutil's first reading of a process is no measurement
        assert "host_other_cpu_percent" not in first  # so neither is what is left over
        import time

        time.sleep(0.5)
        second = host.sample(10.0, 123, busy.pid)
        assert second["control_cpu_percent"] > 30  # a busy loop, in percent of one core
        assert second["host_cpu_percent"] <= 100 * os.cpu_count() + 1
        expected = second["host_cpu_percent"] - 10.0 - second["driver_cpu_percent"] - second["control_cpu_percent"]
        assert second["host_other_cpu_percent"] == max(0.0, expected)
        # An engine that is not a process of this machine (a remote URL target) counts for nothing.
        remote = host.sample(None, None, None)
        assert "control_rss_bytes" not in remote and remote["host_other_cpu_percent"] >= 0
    finally:
        busy.kill()
        busy.wait()


def test_engine_steps_pages_until_next_after_meets_last_step_whatever_the_page_size():
    import asyncio

    from soak.samplers import EngineSteps

    class PagedTarget(FakeTarget):  # the built-in server's reply shape, with pages of three steps
        def __init__(self, last: int) -> None:
            super().__init__()
            self.last, self.asked = last, []

        async def get_json(self, path: str):
            after = int(path.rsplit("=", 1)[1])
            self.asked.append(after)
            steps = [engine_step(step=n).to_json() for n in range(after + 1, min(after + 3, self.last) + 1)]
            return {
                "first_step": 1,
                "last_step": self.last,
                "next_after": steps[-1]["step"] if steps else after,
                "num_missed": 0,
                "steps": steps,
            }

    target = PagedTarget(last=8)
    steps = EngineSteps(target)
    rows = asyncio.run(steps.sample())
    assert len(rows) == 8 and target.asked == [0, 3, 6] and steps.after == 8
    target.last = 9  # one more step since: one request, one row
    assert len(asyncio.run(steps.sample())) == 1 and target.asked[-1] == 8
    assert asyncio.run(steps.sample()) == [] and target.asked[-1] == 9


def test_each_soaks_samplers_say_their_own_warnings(tmp_path, caplog):
    """`soak validate` runs several soaks in one process: a log that cannot be read is said once
    per soak's tailer, not once per process."""
    from soak.external import LogTailer

    missing = tmp_path / "gone" / "engine.log"
    first, second = (LogTailer(FakeTarget(), missing, tmp_path / f"copy{i}.log") for i in range(2))
    with caplog.at_level("WARNING", logger="soak.samplers"):
        for tailer in (first, first, second):
            assert tailer.sample() == []
    assert sum("not tailed" in r.getMessage() for r in caplog.records) == 2


def test_one_failing_sampler_skips_only_its_own_part_of_the_round(tmp_path, caplog):
    import asyncio

    from soak.watch import EngineWatch

    watch = EngineWatch(FakeTarget(is_builtin=True, age_s=1.0), tmp_path, None)

    class Broken:
        num_missed = 0

        async def sample(self):
            raise RuntimeError("a bad page")

    class Hooks:
        async def sample(self):
            return {"cache_hit_rate": 0.5}

    watch.steps, watch.hooks = Broken(), Hooks()
    with caplog.at_level("ERROR", logger="soak.watch"):
        steps, snap = asyncio.run(watch.sample())
    assert steps == [] and snap["cache_hit_rate"] == 0.5  # the hooks were still sampled
    assert any("sampling steps failed once" in r.getMessage() for r in caplog.records)


def test_each_engine_step_figure_lands_in_the_steps_column_the_declared_table_names():
    """rundir.schema.STEP_FROM_ENGINE is the one place a step figure's two names meet: every
    source is a StepStats field, every target a documented steps column, and step_row uses it."""
    from engine.runtime.stats import StepStats
    from rundir.schema import STEP_COLUMNS, STEP_FROM_ENGINE
    from soak.samplers import step_row

    assert set(STEP_FROM_ENGINE) <= set(StepStats._fields)
    assert set(STEP_FROM_ENGINE.values()) <= set(STEP_COLUMNS)
    step = {field: k + 1 for k, field in enumerate(STEP_FROM_ENGINE)}
    row = step_row(engine_step(**step), life=0)
    assert {column: row[column] for column in STEP_FROM_ENGINE.values()} == {
        column: step[field] for field, column in STEP_FROM_ENGINE.items()
    }
    assert set(row) <= set(STEP_COLUMNS)


def test_a_step_travels_as_the_engines_record_and_a_step_that_is_not_one_is_left_out_and_counted(caplog):
    """The wire carries engine.runtime.stats.StepStats: what the server writes reads back equal; a
    body's item that is not a step (a field missing, a word where a number goes, a phase no engine
    has) is left out with its reason, counted by the sampler and said once, and the rest are kept."""
    import asyncio

    from engine.runtime.stats import Phase, StepStats
    from engine.server.wire import StepsPage
    from rundir.schema import StepPhase
    from soak.samplers import EngineSteps

    step = engine_step(step=7, phase=Phase.MIXED, num_prefill_tokens=12, kv_usage=1, evict_s=None)
    assert StepStats.from_json(step.to_json()) == step
    assert isinstance(StepStats.from_json(step.to_json()).kv_usage, float)
    assert StepStats.from_json(step.to_json() | {"newer_figure": 3}) == step  # a newer server's extra
    assert {p.value for p in Phase} <= {p.value for p in StepPhase}  # the engine's phases are the table's
    bad = {
        "without": {k: v for k, v in step.to_json().items() if k != "forward_s"},
        "word": step.to_json() | {"batch_size": "four"},
        "bool": step.to_json() | {"num_decode_tokens": True},
        "phase": step.to_json() | {"phase": "warmup"},
    }
    page = StepsPage.from_json({"last_step": 9, "steps": [step.to_json(), *bad.values(), "junk"]})
    assert page.steps == [step] and len(page.unreadable) == 5
    assert "forward_s" in page.unreadable[0] and "'four'" in page.unreadable[1] and "warmup" in page.unreadable[3]
    assert (
        "unreadable" not in StepsPage(first_step=None, last_step=9, next_after=7, num_missed=0, steps=[step]).to_json()
    )

    class OneBadStep(FakeTarget):
        async def get_json(self, path: str):
            return {"first_step": 1, "last_step": 2, "next_after": 2, "steps": [step.to_json(), bad["word"]]}

    sampler = EngineSteps(OneBadStep())
    with caplog.at_level("WARNING", logger="soak.samplers"):
        rows = asyncio.run(sampler.sample()) + asyncio.run(sampler.sample())
    assert len(rows) == 2 and rows[0]["phase"] == "mixed" and rows[0]["new_tokens"] == 12
    assert sampler.num_unreadable == 2
    assert sum("left out" in r.getMessage() for r in caplog.records) == 1


# A server whose model runs in a grandchild, as vLLM 0.32's on a CPU: API server -> engine core (here
# idle, with 4 sleeping threads) -> worker (a busy loop). Each says when it is up.
ENGINE_TREE = """
import subprocess, sys, threading, time
if sys.argv[1:] == ["core"]:
    for _ in range(4):
        threading.Thread(target=time.sleep, args=(120,), daemon=True).start()
    worker = subprocess.Popen([sys.executable, "-c", "print('up', flush=True)\\nwhile True: pass"], stdout=subprocess.PIPE)
    worker.stdout.readline()
else:
    core = subprocess.Popen([sys.executable, __file__, "core"], stdout=subprocess.PIPE)
    core.stdout.readline()
print("up", flush=True)
time.sleep(120)
"""


def _engine_tree(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "tree.py"
    script.write_text(ENGINE_TREE)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline().strip() == "up"
    return proc


def _end(proc):
    import os
    import signal

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_the_busiest_descendant_is_the_engine_core_and_the_children_add_up(tmp_path):
    import time

    import psutil

    from soak.samplers import ChildSampler

    server = _engine_tree(tmp_path)
    try:
        time.sleep(0.3)  # the worker's loop is running
        sampler = ChildSampler()
        first = sampler.sample(server.pid)
        assert first.cpu_percent is None and "core_cpu_percent" not in first.core  # no reading yet
        time.sleep(0.5)
        second = sampler.sample(server.pid)
        core, worker = psutil.Process(server.pid).children()[0], psutil.Process(server.pid).children(recursive=True)
        assert len(worker) == 2
        # the worker, a grandchild with one thread, not the engine core between (five threads)
        assert second.core["core_num_threads"] == 1 and core.num_threads() >= 5
        assert second.core["core_cpu_percent"] > 30 and second.cpu_percent >= second.core["core_cpu_percent"]
        assert second.rss_bytes > second.core["core_rss_bytes"] > 1e6
        assert ChildSampler().sample(None) == ({}, None, 0)
    finally:
        _end(server)


def test_a_controls_cpu_and_memory_hold_its_child_processes(tmp_path):
    import time

    import psutil

    from soak.samplers import HostSampler

    control = _engine_tree(tmp_path)
    try:
        host = HostSampler()
        host.sample(None, None, control.pid)
        time.sleep(0.5)
        row = host.sample(None, None, control.pid)
        own = psutil.Process(control.pid).memory_info().rss
        assert row["control_cpu_percent"] > 30  # the worker's busy loop; the server itself sleeps
        assert row["control_rss_bytes"] > 2 * own
    finally:
        _end(control)


def test_a_log_that_starts_again_is_a_new_life_only_where_another_process_listens(tmp_path, fake_server):
    # vLLM's first lines come seconds after its process started (imports): the soak that restarted it,
    # and counted that start already, reads them after its own start; the process on the port is the
    # one it knows, so no second life. Another process on the port is a new one.
    import time

    from soak.external import LogTailer

    server = fake_server()
    stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
    start = f"(APIServer pid={server.proc.pid}) INFO {stamp} [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0\n"
    start += (
        f"(EngineCore pid=7) INFO {stamp} [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m'\n"
    )
    for pid, new_lives in ((server.proc.pid, 0), (1, 1)):
        target = FakeTarget(started_at=time.time() - 10.0, pid=pid, url=server.url)
        log = tmp_path / f"vllm-{pid}.log"
        log.write_text("")
        tailer = LogTailer(target, log, tmp_path / "copy.log")
        log.write_text(start)
        tailer.sample()
        assert [kind for kind, _ in target.events] == ["engine_start"] * new_lives
        assert target.pid == server.proc.pid  # the process on the port, from now on
