"""--api-key guards every route but /health; a client that goes away gets its request aborted
and its memory freed."""

import socket

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.server.main import bind
from tests.engine.server.conftest import API_KEY, status, wait_until

GUARDED = [
    ("GET", "/v1/models"),
    ("GET", "/metrics"),
    ("GET", "/v1/cache/status"),
    ("GET", "/v1/engine/steps"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/chat/completions"),
]
LONG = {"prompt": "go on and on", "max_tokens": 1500, "ignore_eos": True, "temperature": 0}


@pytest.mark.parametrize("method, path", GUARDED)
@pytest.mark.parametrize("header", [None, "Bearer wrong-key", API_KEY, "Basic " + API_KEY])
def test_every_route_but_health_wants_the_key(keyed_server, method, path, header):
    headers = {"authorization": header} if header else {}
    r = httpx.request(method, keyed_server.base_url + path, headers=headers, json={}, timeout=10)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"


def test_health_needs_no_key_and_the_right_key_works(keyed_server):
    assert httpx.get(keyed_server.base_url + "/health").json() == {"status": "ok"}
    r = httpx.get(keyed_server.base_url + "/metrics", headers={"authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and "tokdrift:num_requests_running" in r.text
    good = openai.OpenAI(base_url=keyed_server.v1, api_key=API_KEY, max_retries=0)
    assert good.completions.create(model="m", prompt="hi", max_tokens=3).usage.prompt_tokens == 2
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_server.v1, api_key="sk-wrong", max_retries=0).models.list()


def aborted(server) -> float:
    text = httpx.get(server.base_url + "/metrics").text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "tokdrift:request_success_total" and s.labels["finished_reason"] == "abort"
    )


def test_closing_a_stream_aborts_the_request_and_frees_memory(server):
    before = aborted(server)
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", server.v1 + "/completions", json=LONG | {"stream": True}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(10)]  # some tokens have arrived: it is running
            assert any(line.startswith("data: {") for line in got)
            assert status(server)["num_running"] == 1
    # leaving the block closed the connection mid-stream
    wait_until(lambda: aborted(server) == before + 1, what="the abort")
    s = status(server, check="true")
    assert s["num_running"] == 0 and s["num_waiting"] == 0
    assert s["cache_report"]["locked_tokens"] == 0 and s["integrity"] == "ok"


def test_a_client_that_times_out_on_a_plain_request_is_aborted_too(server):
    before = aborted(server)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.v1 + "/completions", json=LONG, timeout=httpx.Timeout(10, read=0.5))
    wait_until(lambda: aborted(server) == before + 1, what="the abort")
    s = status(server, check="true")
    assert s["num_running"] == 0 and s["cache_report"]["locked_tokens"] == 0 and s["integrity"] == "ok"
    # and the server still answers in full
    r = httpx.post(server.v1 + "/completions", json=LONG | {"max_tokens": 5}, timeout=30)
    assert r.json()["usage"]["completion_tokens"] == 5


def test_bind_asks_for_tcp_so_responses_are_not_delayed():
    # asyncio turns TCP_NODELAY on for accepted connections only when the listener says IPPROTO_TCP
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
