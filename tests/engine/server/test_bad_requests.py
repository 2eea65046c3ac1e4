"""Bad requests get an OpenAI-style 4xx error and the server keeps serving everyone else."""

import itertools
import random

import httpx
import openai
import pytest

from tests.engine.server.conftest import status

GOOD_CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
GOOD_COMPLETION = {"prompt": "hi", "max_tokens": 4}

# (field, bad value): each one alone makes a request invalid, on both routes.
BAD_FIELDS = [
    ("max_tokens", -1),
    ("max_tokens", 0),
    ("max_tokens", 10**12),
    ("max_tokens", "10"),
    ("max_tokens", 2.5),
    ("max_tokens", True),
    ("temperature", "hot"),
    ("temperature", -0.5),
    ("temperature", [1]),
    ("top_p", 0),
    ("top_p", 1.5),
    ("top_k", -7),
    ("top_k", "x"),
    ("seed", "x"),
    ("seed", 2**70),
    ("stop", 5),
    ("stop", [1, 2]),
    ("stop", [""]),
    ("stop", ["a"] * 17),
    ("n", 2),
    ("n", 0),
    ("stream", "yes"),
    ("stream_options", "x"),
    ("stream_options", {"include_usage": "y"}),
    ("ignore_eos", "no"),
    ("stop_token_ids", [-1]),
    ("stop_token_ids", "3"),
    ("frequency_penalty", 5),
    ("logprobs", 3),
    ("model", 7),
]
BAD_CHAT = [
    {"messages": []},
    {"messages": "hi"},
    {"messages": [{"role": "robot", "content": "x"}]},
    {"messages": [{"content": "x"}]},
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": "x" * 3000}]},
    {"max_completion_tokens": -3, "messages": []},
    {},
    {"messages": None},
]
BAD_COMPLETION = [
    {"prompt": None},
    {"prompt": []},
    {"prompt": [[]]},
    {"prompt": ["a", "b"]},
    {"prompt": [-1]},
    {"prompt": [10**6]},
    {"prompt": {"x": 1}},
    {"prompt": [1.5]},
    {"prompt": "x" * 3000},
    {"echo": True},
    {"suffix": "x"},
    {},
]
RAW = [b"", b"{", b"{bad json", b"null", b"[]", b"123", b'"text"', b"\xff\xfe\x00", b'{"prompt": "a",}']


def bad_requests():
    for field, value in BAD_FIELDS:
        yield "/chat/completions", GOOD_CHAT | {field: value}
        yield "/completions", GOOD_COMPLETION | {field: value}
    for body in BAD_CHAT:
        yield "/chat/completions", {"max_tokens": 4} | body
    for body in BAD_COMPLETION:
        yield "/completions", GOOD_COMPLETION | body if body else {"max_tokens": 4}
    for raw in RAW:
        yield "/chat/completions", raw
        yield "/completions", raw


def send(http: httpx.Client, server, path, body):
    if isinstance(body, bytes):
        return http.post(server.v1 + path, content=body, headers={"content-type": "application/json"})
    return http.post(server.v1 + path, json=body)


def test_hundreds_of_bad_requests_then_a_good_one(server):
    cases = list(bad_requests())
    rng = random.Random(0)
    cases = list(itertools.islice(itertools.cycle(cases), 360))
    rng.shuffle(cases)
    with httpx.Client(timeout=30) as http:
        for path, body in cases:
            r = send(http, server, path, body)
            assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
            error = r.json()["error"]
            assert error["message"] and error["type"] == "invalid_request_error", (path, body, r.text)
        r = http.post(server.v1 + "/chat/completions", json=GOOD_CHAT | {"ignore_eos": True})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    s = status(server, check="true")
    assert s["integrity"] == "ok" and s["num_running"] == s["num_waiting"] == 0
    assert s["cache_report"]["locked_tokens"] == 0


@pytest.mark.parametrize(
    "path, body, param, words",
    [
        ("/completions", GOOD_COMPLETION | {"max_tokens": -5}, "max_tokens", "greater than or equal to 1"),
        ("/completions", GOOD_COMPLETION | {"max_tokens": 10**9}, "max_tokens", "at most the engine's context of 2048"),
        ("/chat/completions", GOOD_CHAT | {"n": 3}, "n", "n must be 1"),
        ("/chat/completions", GOOD_CHAT | {"temperature": "0.5"}, "temperature", "valid number"),
        ("/completions", {"prompt": "x" * 3000}, "prompt", "exceeds the engine's context of 2048"),
        ("/completions", {"prompt": ["a", "b"]}, "prompt", "one prompt per request"),
        ("/completions", {"prompt": [300]}, None, "token ids must be in [0, 272)"),
    ],
)
def test_error_names_the_field_and_the_problem(server, path, body, param, words):
    r = httpx.post(server.v1 + path, json=body, timeout=30)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error


def test_over_long_prompt_is_context_length_exceeded_for_the_openai_client(server):
    client = openai.OpenAI(base_url=server.v1, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x" * 3000}])
    assert info.value.code == "context_length_exceeded"


def test_unknown_route_and_method_are_openai_errors(server):
    r = httpx.get(server.v1 + "/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(server.v1 + "/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]


def test_malformed_json_says_so(server):
    r = httpx.post(server.v1 + "/completions", content=b"{bad", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "invalid JSON" in r.json()["error"]["message"]
    r = httpx.post(server.v1 + "/completions", json=[1, 2])
    assert r.status_code == 400 and "expected a JSON object" in r.json()["error"]["message"]
