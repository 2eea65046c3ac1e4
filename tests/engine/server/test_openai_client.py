"""The official `openai` client against the real server: chat and completions, streamed and
not, token-id prompts, usage with cached tokens, concurrent clients."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from engine.runtime.engine import Engine
from engine.sampling import SamplingParams
from tests.engine.server.conftest import engine_config

GREEDY = {"ignore_eos": True}


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=60)


def test_models_lists_the_served_model(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [server.app.state.runner.engine.checkpoint.rsplit("/", 1)[-1]]


def test_completion_from_token_ids_matches_the_engine(client, tiny_checkpoint):
    prompt = list(range(60, 100))
    direct = Engine(engine_config(tiny_checkpoint))
    request = direct.add_request(prompt, SamplingParams(max_tokens=24, temperature=0, ignore_eos=True))
    while direct.has_work():
        direct.step()
    out = client.completions.create(model="any", prompt=prompt, max_tokens=24, temperature=0, extra_body=GREEDY)
    assert out.choices[0].text == direct.output_text(request)
    assert out.choices[0].finish_reason == "length"
    assert (out.usage.prompt_tokens, out.usage.completion_tokens, out.usage.total_tokens) == (40, 24, 64)


def test_streamed_chat_equals_unstreamed_and_reports_usage_last(client):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo wörld"}]
    kw = dict(model="m", messages=messages, max_tokens=40, temperature=0, extra_body=GREEDY)
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 40
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_second_turn_reports_cached_prompt_tokens(client):
    # One output token: the engine caches exactly the first prompt, with its state snapshot at
    # the end, and the second turn's prompt starts with the first one.
    first = [{"role": "user", "content": "tell me about caches " * 8}]
    r1 = client.chat.completions.create(model="m", messages=first, max_tokens=1, temperature=0, extra_body=GREEDY)
    second = first + [{"role": "assistant", "content": "sure"}, {"role": "user", "content": "and then?"}]
    r2 = client.chat.completions.create(model="m", messages=second, max_tokens=5, temperature=0, extra_body=GREEDY)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    assert r2.usage.prompt_tokens_details.cached_tokens == r1.usage.prompt_tokens
    assert r2.usage.prompt_tokens > r1.usage.prompt_tokens


def test_streamed_completion_with_stop_string(client):
    base = client.completions.create(model="m", prompt="abc", max_tokens=30, temperature=0, extra_body=GREEDY)
    text = base.choices[0].text
    stop = next(ch for ch in text[3:] if ch.isprintable() and ch != "\ufffd")  # a char that appears later
    chunks = list(
        client.completions.create(
            model="m", prompt="abc", max_tokens=30, temperature=0, stop=[stop], stream=True, extra_body=GREEDY
        )
    )
    streamed = "".join(c.choices[0].text for c in chunks)
    assert streamed == text[: text.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats(client):
    kw = dict(
        model="m",
        prompt="once upon",
        max_tokens=20,
        temperature=0.9,
        top_p=0.9,
        seed=7,
        extra_body={"top_k": 50, "ignore_eos": True},
    )
    assert client.completions.create(**kw).choices[0].text == client.completions.create(**kw).choices[0].text


def test_four_concurrent_clients_share_batches(server):
    barrier = threading.Barrier(4)
    after = httpx.get(server.v1 + "/engine/steps", params={"after": 0, "limit": 1}).json()["last_step"]

    def one(i):
        c = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0, timeout=60)
        barrier.wait()
        stream = c.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": f"client {i}"}],
            max_tokens=60,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=GREEDY,
        )
        chunks = list(stream)
        return chunks[-1].usage.completion_tokens, sum(1 for ch in chunks if ch.choices and ch.choices[0].delta.content)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    assert all(n == 60 for n, _ in results)
    assert all(num_chunks > 0 for _, num_chunks in results)
    steps = httpx.get(server.v1 + "/engine/steps", params={"after": after}).json()["steps"]
    assert max(s["batch_size"] for s in steps) > 1  # the requests really ran together


def test_agent_shaped_chat_with_tools_parts_and_tool_results(client):
    # what a coding agent sends: tool definitions, content parts, a tool call and its result
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py"}'}}
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": "open a.py"}, {"type": "text", "text": " please"}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ]
    out = client.chat.completions.create(model="m", messages=messages, tools=tools, max_tokens=8, extra_body=GREEDY)
    assert out.usage.completion_tokens == 8 and out.choices[0].message.role == "assistant"
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(
            model="m",
            max_tokens=8,
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}],
        )
