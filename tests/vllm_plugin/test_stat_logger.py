"""The stat-logger entry point as vLLM builds and calls it: `StepRecord(vllm_config, engine_index)`,
then `record(scheduler_stats=..., iteration_stats=..., mm_cache_stats=..., engine_idx=...)`."""

import json
import os

import pytest

from tests.vllm_plugin import decode_step, vllm_config
from vllm_plugin.fault import FaultSpecError
from vllm_plugin.stat_logger import StepRecord


def test_unset_it_records_nothing(monkeypatch, tmp_path):
    monkeypatch.delenv("TOKDRIFT_VLLM_STEPS", raising=False)
    monkeypatch.chdir(tmp_path)
    logger = StepRecord(vllm_config(), 0)
    sched, it = decode_step(1.0, batch=2, step_s=0.02)
    logger.record(scheduler_stats=sched, iteration_stats=it, mm_cache_stats=None, engine_idx=0)
    logger.log_engine_initialized()
    logger.log()
    assert logger.writer is None and list(tmp_path.iterdir()) == []


def test_set_it_appends_a_start_line_and_each_step(monkeypatch, tmp_path):
    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv("TOKDRIFT_VLLM_STEPS", str(path))
    monkeypatch.delenv("TOKDRIFT_VLLM_FAULT", raising=False)
    logger = StepRecord(vllm_config(), 0)
    for k in range(3):
        sched, it = decode_step(1.0 + k, batch=2, step_s=0.02)
        logger.record(scheduler_stats=sched, iteration_stats=it, mm_cache_stats=None, engine_idx=0)
    logger.log()  # vLLM's periodic log call writes what is pending
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["engine_start", "step", "step", "step"]
    assert rows[0]["vllm_version"] is None  # no vLLM here to ask
    logger.writer.close()


def test_a_path_it_cannot_open_stops_the_engine_with_the_path(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKDRIFT_VLLM_STEPS", str(tmp_path / "missing" / "steps.jsonl"))
    with pytest.raises(OSError, match="missing/steps.jsonl"):
        StepRecord(vllm_config(), 0)


def test_a_bad_fault_setting_stops_it_too(monkeypatch, tmp_path):
    monkeypatch.setenv("TOKDRIFT_VLLM_STEPS", str(tmp_path / "steps.jsonl"))
    monkeypatch.setenv("TOKDRIFT_VLLM_FAULT", "step-cost:after=x")
    with pytest.raises(FaultSpecError):
        StepRecord(vllm_config(), 0)


def test_every_period_the_record_says_the_hosts_cpu_beside_this_vllm(monkeypatch, tmp_path):
    """The CPU this process spends is vLLM's own: what is left of the host's busy time is the
    neighbours' (host_other_cpu_percent), the figure diag reads as contention."""
    import time

    from vllm_plugin import stat_logger

    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv("TOKDRIFT_VLLM_STEPS", str(path))
    monkeypatch.delenv("TOKDRIFT_VLLM_FAULT", raising=False)
    monkeypatch.delenv("TOKDRIFT_VLLM_ROOT", raising=False)
    monkeypatch.setattr(stat_logger, "HOST_S", 0.0)
    logger = StepRecord(vllm_config(), 0)
    start = time.process_time()
    while time.process_time() - start < 0.3:  # this process's own work: vLLM's, not a neighbour's
        pass
    sched, it = decode_step(1.0, batch=2, step_s=0.02)
    logger.record(scheduler_stats=sched, iteration_stats=it, mm_cache_stats=None, engine_idx=0)
    logger.writer.close()
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    (figures,) = [r for r in rows if r["kind"] == "figures"]
    assert set(figures) == {"kind", "t", "pid", "root", "host_cpu_percent", "host_other_cpu_percent"}
    assert figures["pid"] == figures["root"] == os.getpid()  # the API server is its vLLM's first process
    own = figures["host_cpu_percent"] - figures["host_other_cpu_percent"]
    assert own > 0 and figures["host_other_cpu_percent"] >= 0
