"""One reading of a streamed OpenAI answer: the first-token rule and the usage fields."""

import pytest

from replay.stream import data_of, parse_data, read_chunk, read_usage


def test_the_role_frame_is_not_a_token_and_reasoning_content_text_and_tool_calls_are():
    assert not read_chunk({"choices": [{"delta": {"role": "assistant"}}]}).generated
    assert not read_chunk({"choices": [{"delta": {"content": ""}}]}).generated
    reasoning = read_chunk({"choices": [{"delta": {"reasoning_content": "hm"}}]})
    assert reasoning.generated and not reasoning.content
    assert read_chunk({"choices": [{"delta": {"reasoning": "hm"}}]}).generated
    assert read_chunk({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}).generated
    content = read_chunk({"choices": [{"delta": {"content": "Hi"}}]})
    assert content.generated and content.content and content.has_choices
    assert read_chunk({"choices": [{"text": " the", "index": 0}]}).content  # a completion


def test_usage_only_chunks_errors_and_the_usage_fields():
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 33,
        "prompt_tokens_details": {"cached_tokens": 96},
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    chunk = read_chunk({"choices": [], "usage": usage})
    assert chunk.usage == usage and not chunk.has_choices and not chunk.generated
    assert read_usage(chunk.usage) == (120, 96, 33, 7)
    assert read_usage(None) == (None, None, None, None)
    assert read_usage({"prompt_tokens": -1, "completion_tokens": True, "prompt_tokens_details": None}) == (
        None,
        None,
        None,
        None,
    )
    assert read_chunk({"error": {"message": "KV cache exhausted"}}).error == "KV cache exhausted"
    assert read_chunk({"error": "boom"}).error == "boom"


def test_sse_lines_and_payloads():
    assert data_of("data: [DONE]") == "[DONE]" and data_of(": keep-alive") is None
    assert parse_data('{"a": 1}') == {"a": 1} and parse_data("[1, 2]") is None
    with pytest.raises(ValueError):
        parse_data("{not json")
