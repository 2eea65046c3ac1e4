"""/v1/cache/status carries the fault signals and GC figures, and the soak's hook sampler turns
them into snapshot columns."""

import gc
from types import SimpleNamespace

import httpx

from engine.runtime.faults import FaultStats
from engine.runtime.gcstats import GcStats
from engine.server.wire import CacheStatus
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

    # The wire types read every figure the soak records from the server's own body: no name of
    # theirs is missing from it (a rename on one side fails here).
    wire = CacheStatus.from_json(body)
    for part, key in (
        (wire.cache, "cache_report"),
        (wire.state_slots, "mamba_stats"),
        (wire.kv_free_list, "allocator_summary"),
    ):
        assert set(part._fields) <= set(body[key]) and None not in part, key
    assert wire.experts is None and wire.gc.gen2_collections == body["gc"]["gen2_collections"]
    assert wire.faults.faults == ("kv-scatter", "gc-pressure") and wire.config["faults"] == [
        "kv-scatter",
        "gc-pressure",
    ]

    row, extra = EngineHooks(target=SimpleNamespace(life=0)).row(wire)  # the documented columns, the hook's own
    assert extra["retained_objects"] == faults["retained_objects"]
    assert extra["kv_free_list_disorder"] == faults["kv_free_list_disorder"]
    assert extra["gc_full_pause_s_total"] == body["gc"]["full_pause_s_total"] > 0
    assert "faults" not in row and "faults" not in extra  # only numbers become columns
    # glibc's malloc as the engine process sees it: in use and kept, as snapshot columns
    assert body["heap"]["in_use_bytes"] > 0 and body["heap"]["free_bytes"] >= 0
    assert row["heap_in_use_bytes"] == body["heap"]["in_use_bytes"] and row["heap_kept_bytes"] == wire.heap.free_bytes
    gc.unfreeze()  # gc-pressure froze this test process's startup heap


def test_the_wire_types_refuse_what_is_not_their_body_and_import_without_torch():
    import subprocess
    import sys

    import pytest

    from engine.server.wire import CacheStatus, StepsPage

    for body in ([1, 2], {"detail": "Not Found"}, "<html>"):
        with pytest.raises(ValueError, match="expected the"):
            CacheStatus.from_json(body)
        with pytest.raises(ValueError, match="expected the"):
            StepsPage.from_json(body)
    page = StepsPage.from_json({"last_step": 9, "steps": [{"step": 8}, {"step": 9}, "junk"]})
    assert page.next_after == 0 and page.steps == [] and len(page.unreadable) == 3 and page.num_missed == 0
    # soak reads these bodies without loading the engine
    code = "import sys, engine.server.wire, soak.samplers; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
