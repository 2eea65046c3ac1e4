"""The streaming client against a real local SSE server: what it times, what it counts, what it refuses."""

import asyncio

import httpx

from soak.client import Client


def _call(url: str, api: str, prompt, max_tokens: int, **kw):
    async def go():
        async with httpx.AsyncClient() as http:
            client = Client(http, url, api, "fake-model", timeout_s=30)
            return client, await client.call(prompt, max_tokens, **kw)

    return asyncio.run(go())


def test_first_token_is_the_first_reasoning_delta_not_the_role_frame(fake_server):
    server = fake_server("--token-delay", "0.02")
    _, r = _call(server.url, "chat", [{"role": "user", "content": "one two three"}], 8)
    assert r.status == "ok" and r.error is None
    # 2 reasoning deltas come before the first content delta, 20 ms apart.
    assert r.t_send < r.t_first_token < r.t_first_content <= r.t_last_token
    assert r.t_first_content - r.t_first_token > 0.03
    assert (r.prompt_tokens, r.cached_tokens, r.output_tokens, r.reasoning_tokens) == (3, 1, 8, 2)
    assert r.decode_tps is not None and 0 < r.decode_tps < 100


def test_completions_with_token_ids(fake_server):
    server = fake_server()
    _, r = _call(server.url, "completions", [5, 6, 7, 8], 5)
    assert r.status == "ok" and r.prompt_tokens == 4 and r.output_tokens == 5
    assert r.t_first_token == r.t_first_content


def test_over_long_prompt_is_recorded_as_refused(fake_server):
    server = fake_server("--max-context", "10")
    _, r = _call(server.url, "completions", list(range(20)), 5)
    assert r.status == "refused"
    assert "maximum context length is 10" in r.error and r.error.startswith("HTTP 400")
    assert r.t_first_token is None and r.output_tokens is None


def test_a_target_that_refuses_ignore_eos_is_sent_calls_without_it(fake_server):
    server = fake_server("--strict")
    client, r = _call(server.url, "completions", [1, 2, 3], 4, exact_length=True)
    assert r.status == "ok" and r.output_tokens == 4
    assert client.accepts_ignore_eos is False


def test_a_dead_target_is_an_error_not_an_exception():
    _, r = _call("http://127.0.0.1:9", "chat", [{"role": "user", "content": "x"}], 4)
    assert r.status == "error" and "Connect" in r.error


def test_replayed_calls_take_the_temperature_asked_for_and_probes_are_greedy():
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        import json

        bodies.append(json.loads(request.content))
        return httpx.Response(200, text="data: [DONE]\n\n", headers={"content-type": "text/event-stream"})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = Client(http, "http://target", "chat", "m", timeout_s=5)
            for kw in ({}, {"temperature": 0.6}, {"greedy": True, "temperature": 0.6}):
                await client.call([{"role": "user", "content": "x"}], 4, exact_length=False, **kw)

    asyncio.run(go())
    assert "temperature" not in bodies[0]  # the target's default
    assert [b["temperature"] for b in bodies[1:]] == [0.6, 0.0]


def test_an_error_line_in_the_stream_is_a_failed_call():
    """llama-server of late 2024 (llama-cpp-python 0.3.2) ends a stream whose KV cache had no room
    even for one token with its own `error:` event, not a `data:` chunk."""

    def handler(request: httpx.Request) -> httpx.Response:
        text = (
            'error: {"code":500,"message":"Input prompt is too big compared to KV size. Please try increasing '
            'KV size.","type":"server_error"}\n\n'
        )
        return httpx.Response(200, text=text, headers={"content-type": "text/event-stream"})

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            return await Client(http, "http://target", "completions", "m", timeout_s=5).call([1, 2], 4)

    r = asyncio.run(go())
    assert r.status == "error" and r.error.startswith("Input prompt is too big compared to KV size")


def test_an_answer_whose_only_token_made_no_text_is_timed_at_its_finish():
    """A stop token first (or bytes of an unfinished character): no chunk carries text, so the
    chunk that ends the answer is its first and last token, not a missing time."""
    import json

    from soak.client import _Accumulator

    acc = _Accumulator(t_send=100.0)
    acc.add(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": None}]}))
    acc.add(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]}))
    acc.add(json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 1}}))
    acc.done = True
    r = acc.result()
    assert r.status == "ok" and r.output_tokens == 1 and r.num_token_chunks == 0
    assert r.t_first_token is not None and r.t_send < r.t_first_token == r.t_last_token
    assert r.t_first_content is None  # nothing a user saw

    empty = _Accumulator(t_send=100.0)
    empty.add(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    empty.add(json.dumps({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 0}}))
    empty.done = True
    assert empty.result().t_first_token is None  # no token at all: no token time
