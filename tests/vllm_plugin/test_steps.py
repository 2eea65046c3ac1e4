"""The step record's writer: vLLM's stats objects (stand-ins) -> the lines logformats.vllm_steps reads."""

import json
from types import SimpleNamespace

from tests.vllm_plugin import IterationDetails, SchedulerStats, decode_step, prefill_end, vllm_config
from vllm_plugin.fault import StepCostSpec
from vllm_plugin.steps import StepWriter, engine_header, engine_path, step_row


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_decode_step_says_its_batch_tokens_and_engine_time():
    row = step_row(*decode_step(100.0, batch=3, step_s=0.021, usage=0.25))
    assert row == {
        "kind": "step",
        "t": 100.0,
        "running": 3,
        "waiting": 0,
        "deferred": 0,
        "kv_usage": 0.25,
        "prefix_queries": 0,
        "prefix_hits": 0,
        "gen_tokens": 3,
        "first_tokens": 0,
        "decode_reqs": 3,
        "prompt_tokens": 0,
        "computed_tokens": 0,
        "cached_tokens": 0,
        "preempted": 0,
        "finished": 0,
        "itl_s": 0.021,
    }


def test_a_015_iteration_says_its_prompt_tokens_without_the_split():
    """vLLM 0.15.1's IterationStats counts the prompt tokens of the prefills that ended
    (num_prompt_tokens) and not which of them were computed or cached (no prompt_token_stats)."""
    sched, it = prefill_end(5.0, prompt=1000, cached=600, decoding=2)
    old = SimpleNamespace(**{k: v for k, v in vars(it).items() if k != "prompt_token_stats"}, num_prompt_tokens=1000)
    row = step_row(sched, old)
    assert row["prompt_tokens"] == 1000 and "computed_tokens" not in row and "cached_tokens" not in row
    assert (row["first_tokens"], row["decode_reqs"], row["itl_s"]) == (1, 2, 0.05)


def test_a_prefill_that_ended_says_its_tokens_and_cache_hits():
    row = step_row(*prefill_end(5.0, prompt=1000, cached=600, decoding=2))
    assert (row["first_tokens"], row["decode_reqs"], row["computed_tokens"], row["cached_tokens"]) == (1, 2, 400, 600)
    assert (row["prefix_queries"], row["prefix_hits"]) == (1000, 600)


def test_iteration_details_add_what_the_step_scheduled():
    sched, it = decode_step(1.0, batch=2, step_s=0.02)
    sched.iteration_details = IterationDetails(1, 512, 2, 2, elapsed_ms=35.5)
    row = step_row(sched, it)
    assert (row["sched_prompt_reqs"], row["sched_prompt_tokens"], row["sched_gen_tokens"]) == (1, 512, 2)
    assert row["elapsed_s"] == 0.0355


def test_a_step_with_scheduler_stats_alone_is_still_a_step(monkeypatch):
    monkeypatch.setattr("time.time", lambda: 42.0)
    row = step_row(SchedulerStats(num_running_reqs=1, kv_cache_usage=0.5), None)
    assert row["t"] == 42.0 and row["running"] == 1 and "gen_tokens" not in row
    assert step_row(None, None) is None


def test_lines_reach_the_file_in_whole_blocks(tmp_path):
    path = tmp_path / "steps.jsonl"
    writer = StepWriter(str(path), flush_s=3600)
    writer.start(engine_header(vllm_config(), 0, "0.32.0"))
    assert [r["kind"] for r in lines(path)] == ["engine_start"]  # the start line at once
    for k in range(5):
        writer.step(*decode_step(10.0 + k, batch=2, step_s=0.02))
    assert len(lines(path)) == 1  # steps wait for the next write
    writer.flush()
    assert [r["kind"] for r in lines(path)] == ["engine_start"] + ["step"] * 5
    writer.close()


def test_the_start_line_says_the_engine(tmp_path):
    header = engine_header(vllm_config(num_blocks=1000, block_size=16), 0, "0.32.0")
    assert header["vllm_version"] == "0.32.0"
    assert (header["model"], header["served_model_name"], header["dtype"]) == ("/models/Qwen3-8B", "qwen3", "bfloat16")
    assert header["kv_capacity_tokens"] == 16000
    assert header["fault"] is None


def test_the_fault_on_line_comes_once_at_the_after_th_finished_request(tmp_path):
    path = tmp_path / "steps.jsonl"
    writer = StepWriter(str(path), fault=StepCostSpec(after=3))
    for k, finished in enumerate([1, 0, 1, 2, 1]):
        writer.step(*decode_step(float(k), batch=3, step_s=0.02, finished=finished))
    writer.close()
    kinds = [(r["kind"], r["t"]) for r in lines(path)]
    assert [k for k in kinds if k[0] == "fault_on"] == [("fault_on", 3.0)]
    assert lines(path)[4]["fault"] == "step-cost:after=3,entries=2048,limit=20000000"


def test_data_parallel_engines_write_files_of_their_own():
    assert engine_path("/r/steps.jsonl", 0) == "/r/steps.jsonl"
    assert engine_path("/r/steps.jsonl", 2) == "/r/steps.engine2.jsonl"
    assert engine_path("/r.d/steps", 1) == "/r.d/steps.engine1"
