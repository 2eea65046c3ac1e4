"""The recording proxy between the official openai client and a real local server."""

import asyncio
import json
import socket
import threading
import time

import httpx
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from replay.proxy import RecordConfig, create_app
from replay.trace import read_trace

WORDS = ["Hel", "lo", ",", " wor", "ld", "!"]
SYSTEM = "You are a coding agent. " * 200  # a large fixed prefix, as agents send


def _upstream_app(received: list):
    """A small OpenAI-compatible server: deterministic answers, SSE when asked to stream."""

    def usage(body):
        num_prompt = len(json.dumps(body["messages"])) // 4
        return {
            "prompt_tokens": num_prompt,
            "completion_tokens": len(WORDS) + 2,
            "total_tokens": num_prompt + 8,
            "completion_tokens_details": {"reasoning_tokens": 2},
            "prompt_tokens_details": {"cached_tokens": 0},
        }

    async def chat(request: Request):
        body = await request.json()
        received.append(body)
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "".join(WORDS)},
                        }
                    ],
                    "usage": usage(body),
                }
            )

        async def events():
            def chunk(delta, finish=None):
                return {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                }

            yield f"data: {json.dumps(chunk({'role': 'assistant'}))}\n\n"
            for part in ("thinking", " hard"):
                yield f"data: {json.dumps(chunk({'reasoning_content': part}))}\n\n"
            for word in WORDS:
                await asyncio.sleep(0.01)
                yield f"data: {json.dumps(chunk({'content': word}))}\n\n"
            yield f"data: {json.dumps(chunk({}, 'stop'))}\n\n"
            if (body.get("stream_options") or {}).get("include_usage"):
                final = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": body["model"],
                    "choices": [],
                    "usage": usage(body),
                }
                yield f"data: {json.dumps(final)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model", "owned_by": "test"}]})

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models, methods=["GET"])]
    )


class _Server:
    """A uvicorn server on a free loopback port, in a thread."""

    def __init__(self, app):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def servers(tmp_path):
    received = []
    upstream = _Server(_upstream_app(received))
    started = []

    def start_proxy(**kwargs):
        out = tmp_path / f"trace{len(started)}.jsonl"
        proxy = _Server(create_app(RecordConfig(upstream=upstream.url, output=out, block_size=16, **kwargs)))
        started.append(proxy)
        return proxy, out

    yield upstream, start_proxy, received
    for s in started:
        s.stop()
    upstream.stop()


def _messages(*turns):
    out = [{"role": "system", "content": SYSTEM}]
    for i, turn in enumerate(turns):
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": turn})
    return out


def test_non_streaming_call_passes_through_and_is_recorded(servers):
    upstream, start_proxy, received = servers
    proxy, out = start_proxy()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none")
    reply = client.chat.completions.create(model="tiny", messages=_messages("Fix the bug in app.py"))
    assert reply.choices[0].message.content == "Hello, world!"
    assert reply.usage.completion_tokens == 8
    trace = read_trace(out)  # written while the proxy still runs
    assert trace.header.source == "record" and trace.header.block_size == 16
    (call,) = trace.calls
    assert call.input_tokens == reply.usage.prompt_tokens
    assert (call.output_tokens, call.reasoning_tokens, call.cached_tokens) == (8, 2, 0)
    assert call.messages is None  # no text without --keep-text
    assert "Fix the bug" not in out.read_text()
    # Text blocks of block_size (16) x chars_per_token (4) = 64 characters of the canonical prompt text.
    assert len(call.hash_ids) == -(-len(f"<system>{SYSTEM}\n<user>Fix the bug in app.py") // 64)
    assert call.duration >= 0 and call.think_time is None
    assert call.ttft is None  # not observable without a stream


def test_streaming_is_transparent_and_usage_comes_from_the_server(servers):
    upstream, start_proxy, received = servers
    proxy, out = start_proxy()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none")
    stream = client.chat.completions.create(model="tiny", messages=_messages("Run the tests"), stream=True)
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "Hello, world!"
    # The client did not ask for usage: it gets no usage-only chunk, although the proxy asked upstream for one.
    assert all(c.choices for c in chunks)
    assert received[-1]["stream_options"] == {"include_usage": True}
    (call,) = read_trace(out).calls
    assert (call.output_tokens, call.reasoning_tokens) == (8, 2)
    assert call.input_tokens == len(json.dumps(received[-1]["messages"])) // 4
    assert 0 <= call.ttft <= call.duration
    assert call.duration >= 0.05  # six words 10 ms apart


def test_streamed_bytes_are_identical_to_the_upstreams(servers):
    upstream, start_proxy, _ = servers
    proxy, out = start_proxy()
    body = {"model": "tiny", "messages": _messages("hi"), "stream": True, "stream_options": {"include_usage": True}}
    direct = httpx.post(upstream.url + "/v1/chat/completions", json=body).content
    via = httpx.post(proxy.url + "/v1/chat/completions", json=body)
    assert via.content == direct
    assert via.headers["content-type"].startswith("text/event-stream")
    models = httpx.get(proxy.url + "/v1/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert len(read_trace(out).calls) == 1  # the models listing is forwarded, not recorded


def test_a_growing_conversation_stays_one_session_with_shared_prefix(servers):
    upstream, start_proxy, _ = servers
    proxy, out = start_proxy()
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none")
    history = ["Read app.py"]
    client.chat.completions.create(model="tiny", messages=_messages(*history))
    history += ["Hello, world!", "Tool result: " + "def main(): pass\n" * 40]
    client.chat.completions.create(
        model="tiny", messages=_messages(*history), stream=True, stream_options={"include_usage": True}
    ).response.read()
    client.chat.completions.create(model="tiny", messages=_messages("Something else entirely"))
    first, second, other = read_trace(out).calls
    assert (first.session, first.turn) == (second.session, 0) and second.turn == 1
    full = len(first.hash_ids) - 1
    assert second.hash_ids[:full] == first.hash_ids[:full]
    assert len(second.hash_ids) > len(first.hash_ids)
    assert second.think_time is not None and second.think_time >= 0
    assert other.session != first.session and other.turn == 0
    # The new conversation shares the system prompt's blocks, and nothing after them.
    shared = sum(1 for a, b in zip(first.hash_ids, other.hash_ids) if a == b)
    assert shared == len(f"<system>{SYSTEM}") // 64


def test_session_header_and_keep_text(servers):
    upstream, start_proxy, _ = servers
    proxy, out = start_proxy(keep_text=True)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="none", default_headers={"X-Session-Id": "agent-7"})
    client.chat.completions.create(model="tiny", messages=_messages("one"))
    client.chat.completions.create(model="tiny", messages=_messages("two"))
    calls = read_trace(out).calls
    assert [(c.session, c.turn) for c in calls] == [("agent-7", 0), ("agent-7", 1)]
    assert calls[1].messages[-1] == {"role": "user", "content": "two"}


def test_unreachable_upstream_is_a_502_and_not_recorded(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    out = tmp_path / "t.jsonl"
    proxy = _Server(create_app(RecordConfig(upstream=dead, output=out)))
    try:
        reply = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": []})
        assert reply.status_code == 502 and "upstream unreachable" in reply.json()["error"]["message"]
        assert read_trace(out).calls == []
    finally:
        proxy.stop()


def test_a_client_that_hangs_up_mid_stream_still_gets_its_call_recorded(servers):
    upstream, start_proxy, _ = servers
    proxy, out = start_proxy()
    body = {"model": "tiny", "messages": _messages("hang up"), "stream": True}
    with httpx.stream("POST", proxy.url + "/v1/chat/completions", json=body) as reply:
        for line in reply.iter_lines():
            if "reasoning_content" in line:
                break  # leave after the first token
    deadline = time.monotonic() + 10
    while not read_trace(out).calls:
        assert time.monotonic() < deadline, "the cut call was never recorded"
        time.sleep(0.05)
    (call,) = read_trace(out).calls
    assert call.ttft is not None and call.output_tokens < 8  # counted from what streamed before the cut
