"""CPU affinity: the driver on the first allowed CPU, the engines on the rest, where there are two."""

import os
import subprocess
import sys

import pytest

from soak import affinity

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity here")


@needs_affinity
def test_plan_splits_the_allowed_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 7})
    plan = affinity.plan(None)
    assert plan.enabled and plan.driver == (2,) and plan.engine == (5, 7)
    assert plan.to_json() == {"driver": [2], "engine": [5, 7]}


@needs_affinity
def test_plan_is_off_with_a_reason_on_one_cpu_when_asked_not_to_and_for_a_url_target(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert affinity.plan(None).to_json() == {"why_off": "the soak may use 1 CPU; separate cores need at least 2"}
    assert affinity.plan(True).why_off.startswith("the soak may use 1 CPU")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert affinity.plan(False).to_json() == {"why_off": "--no-affinity"}
    assert "URL target" in affinity.plan(None, starts_engines=False).why_off


def test_plan_is_off_where_the_os_cannot_pin(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    assert affinity.plan(None).why_off == "this OS has no sched_setaffinity"


@needs_affinity
def test_the_driver_is_pinned_and_given_its_cpus_back():
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one CPU here")
    plan = affinity.plan(None)
    before = affinity.pin_driver(plan)
    try:
        assert os.sched_getaffinity(0) == set(plan.driver)
    finally:
        affinity.restore(before)
    assert os.sched_getaffinity(0) == allowed


@needs_affinity
def test_an_engine_started_on_its_cpus_sizes_its_threads_to_them():
    """`soak serve`'s default model threads follow the CPUs the process may use, all but one."""
    allowed = sorted(os.sched_getaffinity(0))
    code = "from engine.server.cli import serving_threads; import os; print(sorted(os.sched_getaffinity(0)), serving_threads())"
    for cpus in (allowed[-1:], allowed):
        out = subprocess.run(
            [sys.executable, "-c", code],
            preexec_fn=affinity.in_child(tuple(cpus)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("]")
        assert out[0] + "]" == str(list(cpus)) and int(out[1]) == max(1, len(cpus) - 1)
