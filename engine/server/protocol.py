"""The OpenAI request bodies the server accepts, and the response bodies it writes.

Types are strict (`"0.5"` is not a number); unknown fields are accepted and ignored, as
OpenAI-compatible servers do, so a client that sends `tools` or `user` still works.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.server.runner import Delta

MAX_STOP_STRINGS = 16
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed takes


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
    include_usage: bool = False


class SamplingFields(_Body):
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)  # vLLM's extension; -1 and 0 mean no cut
    seed: int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: str | list[str] | None = Field(None, max_length=MAX_STOP_STRINGS)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)  # accepted, not applied
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)  # accepted, not applied
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None


# --- responses ------------------------------------------------------------------------------


def error_body(
    message: str, type_: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def usage(delta: Delta) -> dict[str, Any]:
    return {
        "prompt_tokens": delta.num_prompt_tokens,
        "completion_tokens": delta.num_output_tokens,
        "total_tokens": delta.num_prompt_tokens + delta.num_output_tokens,
        "prompt_tokens_details": {"cached_tokens": delta.num_cached_tokens},
    }


def chat_response(request_id: str, model: str, created: int, text: str, last: Delta) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": last.finish_reason,
            }
        ],
        "usage": usage(last),
    }


def completion_response(request_id: str, model: str, created: int, text: str, last: Delta) -> dict[str, Any]:
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason}],
        "usage": usage(last),
    }


def chat_chunk(
    request_id: str,
    model: str,
    created: int,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    chunk = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}] if choices else [],
    }
    if usage_ is not None:
        chunk["usage"] = usage_
    return chunk


def completion_chunk(
    request_id: str,
    model: str,
    created: int,
    text: str,
    finish_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    chunk = {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}] if choices else [],
    }
    if usage_ is not None:
        chunk["usage"] = usage_
    return chunk


def model_card(name: str, max_context: int, created: int | None = None) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": created or int(time.time()),
        "owned_by": "tokdrift",
        "root": name,
        "max_model_len": max_context,
    }
