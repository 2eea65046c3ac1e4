"""One reading of an OpenAI-compatible streamed answer, for every reader of it (the soak's client,
the recording proxy): which chunk carries generated output, and what the usage says.

The first token is the first chunk that carries anything generated — reasoning
(`reasoning_content` or `reasoning`), content, a tool call, or a completion's `text` — not the
opening frame that carries only the role. An answer whose tokens made no text (a stop token
first, or bytes of a character never completed) has no such chunk; the soak's client then takes
the chunk that ends it (`finished`) as its first and last token. Usage comes from the chunk that
has it (the last one, with `stream_options.include_usage`); its optional details are the cached
prompt tokens and the reasoning tokens.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple


class Chunk(NamedTuple):
    generated: bool  # reasoning, content, a tool call or a completion's text
    content: bool  # content or a completion's text (what a user sees)
    usage: dict[str, Any] | None
    error: str | None  # the chunk is an error object (a server that fails mid-stream)
    has_choices: bool  # False for a usage-only chunk
    finished: bool = False  # a choice says why it ended (finish_reason)


class Usage(NamedTuple):
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None


NOTHING = Chunk(generated=False, content=False, usage=None, error=None, has_choices=False)


def data_of(line: str) -> str | None:
    """The payload of one SSE `data:` line; None for any other line."""
    return line[5:].strip() if line.startswith("data:") else None


def parse_data(data: str) -> dict[str, Any] | None:
    """A chunk's JSON object; None for JSON that is not an object. Raises ValueError when the
    payload is not JSON at all."""
    obj = json.loads(data)
    return obj if isinstance(obj, dict) else None


def read_chunk(obj: dict[str, Any]) -> Chunk:
    if "error" in obj:
        err = obj["error"]
        return NOTHING._replace(error=str(err.get("message", err) if isinstance(err, dict) else err))
    generated = content = finished = False
    choices = obj.get("choices") or ()
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta") or {}
        text = choice.get("text") if "text" in choice else delta.get("content")
        content = content or bool(text)
        finished = finished or choice.get("finish_reason") is not None
        generated = (
            generated
            or bool(text)
            or bool(delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"))
        )
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) and obj.get("usage") else None
    return Chunk(
        generated=generated, content=content, usage=usage, error=None, has_choices=bool(choices), finished=finished
    )


def read_usage(usage: dict[str, Any] | None) -> Usage:
    usage = usage if isinstance(usage, dict) else {}
    prompt_details = usage.get("prompt_tokens_details") or {}
    out_details = usage.get("completion_tokens_details") or {}
    return Usage(
        _count(usage.get("prompt_tokens")),
        _count(prompt_details.get("cached_tokens")),
        _count(usage.get("completion_tokens")),
        _count(out_details.get("reasoning_tokens")),
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return int(value)
