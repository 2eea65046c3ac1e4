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
    ((kind, fields),) = events
    assert kind == "engine_start" and fields["age_known"] and fields["age_from"] == "process"


def test_a_start_time_metric_wins_over_the_process(fake_server):
    server = fake_server()
    target, events = _start(server.url)
    assert events[0][1]["age_from"] == "metrics"
    assert target.started_at != psutil.Process(server.proc.pid).create_time()  # the server's own figure
