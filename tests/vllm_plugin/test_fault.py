"""The step-cost fault: its setting, its growth with the requests served, and its wrap of the
per-step method, on a stand-in for vLLM's WorkerWrapperBase."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from vllm_plugin import fault
from vllm_plugin.fault import FaultSpecError, StepCost, StepCostSpec, parse


def test_parse_reads_the_name_alone_and_each_setting():
    assert parse("step-cost") == StepCostSpec()
    assert parse(" step-cost:after=20, entries=100,limit=5000 ") == StepCostSpec(after=20, entries=100, limit=5000)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("gc-pressure", "expected one of step-cost, found 'gc-pressure'"),
        ("step-cost:rows=5", "expected settings after=N, entries=N, limit=N, found 'rows=5'"),
        ("step-cost:after", "found 'after'"),
        ("step-cost:entries=many", "entries must be an integer, got 'many'"),
        ("step-cost:after=0", "after must be an integer >= 1, got 0"),
    ],
)
def test_a_bad_setting_names_what_was_expected_and_found(text, said):
    with pytest.raises(FaultSpecError, match="TOKDRIFT_VLLM_FAULT") as err:
        parse(text)
    assert said in str(err.value)


def test_each_finished_request_from_the_after_th_leaves_its_entries():
    cost = StepCost(StepCostSpec(after=3, entries=10))
    cost.on_step(["a", "b"], {})
    assert cost.retained == [] and not cost.switched_on
    cost.on_step(["c"], {})
    assert cost.switched_on and cost.retained == ["c"] * 10
    cost.on_step(["d", "e"], {"x": 1})
    assert len(cost.retained) == 30


def test_the_walk_visits_every_entry_every_step():
    cost = StepCost(StepCostSpec(entries=4))
    cost.on_step(["a", "b"], {})
    # A step that schedules `a` again (an id reused) finds its four entries, and the walk went over all eight.
    assert cost.on_step([], {"a": 1}) == 4
    assert cost.on_step([], {"c": 1}) == 0


def test_growth_stops_at_the_limit():
    cost = StepCost(StepCostSpec(entries=7, limit=10))
    cost.on_step(["a", "b", "c"], {})
    assert len(cost.retained) == 10


class Worker:
    """Stands in for vLLM's WorkerWrapperBase: the method each executor calls once an engine step."""

    def __init__(self):
        self.calls = []

    def execute_model(self, scheduler_output):
        self.calls.append(scheduler_output)
        return "output"


def test_the_wrap_charges_each_step_and_returns_the_models_output():
    cls = type("W", (Worker,), {})
    cost = fault.wrap(cls, StepCostSpec(entries=5))
    worker = cls()
    out = SimpleNamespace(finished_req_ids={"r1", "r2"}, num_scheduled_tokens={"r3": 1})
    assert worker.execute_model(out) == "output"
    assert worker.calls == [out]
    assert len(cost.retained) == 10
    # Wrapped once: a process forked from one that wrapped the class keeps that wrap and its cost.
    assert fault.wrap(cls, StepCostSpec(entries=99)) is cost
    worker.execute_model(SimpleNamespace(finished_req_ids=set(), num_scheduled_tokens={}))
    assert len(cost.retained) == 10


def test_unset_the_entry_point_does_nothing_and_imports_no_vllm():
    # vLLM calls it in every process: unset, it must cost nothing (vLLM is not even installed here).
    code = (
        "import os, sys; os.environ.pop('TOKDRIFT_VLLM_FAULT', None);"
        "from vllm_plugin import fault, stat_logger; fault.register();"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('vllm', 'torch', 'pandas', 'numpy')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_set_without_vllm_the_entry_point_says_it_needs_vllm(monkeypatch):
    monkeypatch.setenv("TOKDRIFT_VLLM_FAULT", "step-cost")
    with pytest.raises(ImportError):
        fault.register()


def test_once_on_the_fault_reports_what_it_holds_and_costs_in_the_log_and_the_record(tmp_path, caplog):
    record = tmp_path / "steps.jsonl"
    # 50,000 entries a request: a walk of 100,000 takes about a millisecond, which the state line's
    # microseconds show (6 entries walked in under half a microsecond and read 0.0)
    cost = fault.StepCost(fault.StepCostSpec(after=2, entries=50_000))
    report = fault.StateReport(cost, str(record), every_s=10.0)
    cost.on_step(["a"], {})
    report.maybe(100.0)  # not on yet: nothing said
    assert not record.exists()
    cost.on_step(["b", "c"], {"x": 1})
    with caplog.at_level("WARNING", logger="vllm.tokdrift_fault"):
        report.maybe(101.0)
        report.maybe(105.0)  # within the period: once
        cost.on_step([], {"x": 1})
        report.maybe(111.5)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [line["kind"] for line in lines] == ["figures", "figures"]
    assert [line["fault_entries"] for line in lines] == [100_000, 100_000]
    assert 0 < lines[0]["fault_walk_s_total"] <= lines[1]["fault_walk_s_total"]
    said = [r.getMessage() for r in caplog.records if "entries held" in r.getMessage()]
    assert len(said) == 2 and said[0].startswith("tokdrift fault step-cost:after=2,entries=50000,limit=")
    assert "100000 entries held" in said[0] and f"(pid {os.getpid()})" in said[0]
