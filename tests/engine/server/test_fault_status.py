"""/v1/cache/status carries the fault signals and GC figures, and the soak's hook sampler turns
them into snapshot columns."""

import gc
from types import SimpleNamespace

import httpx

from engine.runtime.faults import FaultStats
from engine.runtime.gcstats import GcStats
from soak.samplers import EngineHooks
from tests.engine.server.conftest import engine_config, running_server, status


def test_status_has_fault_stats_and_gc_and_the_sampler_keeps_them(tiny_checkpoint):
    with running_server(engine_config(tiny_checkpoint, faults=("kv-scatter", "gc-pressure"))) as server:
        r = httpx.post(server.v1 + "/completions", json={"prompt": [5] * 40, "max_tokens": 4}, timeout=60)
        r.raise_for_status()
        body = status(server)
    faults = body["fault_stats"]
    assert set(faults) == set(FaultStats._fields)
    assert faults["faults"] == ["kv-scatter", "gc-pressure"]
    assert faults["retained_requests"] == 1 and faults["retained_objects"] > 40
    assert set(body["gc"]) == set(GcStats._fields) and body["gc"]["gen2_collections"] >= 1
    assert body["config"]["faults"] == ["kv-scatter", "gc-pressure"]

    row = EngineHooks(target=SimpleNamespace(life=0)).row(body)
    assert row["retained_objects"] == faults["retained_objects"]
    assert row["kv_free_list_disorder"] == faults["kv_free_list_disorder"]
    assert row["gc_full_pause_s_total"] == body["gc"]["full_pause_s_total"] > 0
    assert "faults" not in row  # only numbers become columns
    gc.unfreeze()  # gc-pressure froze this test process's startup heap
