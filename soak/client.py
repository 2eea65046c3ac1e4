"""One streamed call to an OpenAI-compatible server, timed the way DESIGN.md measures.

Time to first token is the first chunk carrying anything generated — reasoning, content or
a tool call — not the opening frame that carries only the role; first content is kept
beside it (replay.stream reads each chunk, for this client and the recording proxy alike).
Usage comes from the final chunk (`stream_options.include_usage`); a target that sends none
gets its output counted from the chunks that carried tokens.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, NamedTuple

import httpx

from replay import stream

logger = logging.getLogger(__name__)

# Words a server uses when it refuses a prompt for its length (vLLM, SGLang, FreeToken, tokdrift).
_REFUSAL_WORDS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "too long",
    "exceeds",
    "maximum context",
    "max_model_len",
    "longer than",
    "is dropped",
)


class CallResult(NamedTuple):
    t_send: float
    t_first_token: float | None
    t_first_content: float | None
    t_last_token: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    status: str  # ok, error, refused, aborted
    error: str | None
    num_token_chunks: int  # chunks that carried generated output

    @classmethod
    def aborted(cls, t_send: float, why: str) -> CallResult:
        """A call cut before it finished (the soak stopped)."""
        return cls(
            t_send=t_send,
            t_first_token=None,
            t_first_content=None,
            t_last_token=None,
            prompt_tokens=None,
            cached_tokens=None,
            output_tokens=None,
            reasoning_tokens=None,
            status="aborted",
            error=why,
            num_token_chunks=0,
        )

    @property
    def decode_tps(self) -> float | None:
        """Output tokens after the first, over the time from first to last token."""
        n = self.output_tokens if self.output_tokens is not None else self.num_token_chunks
        if self.t_first_token is None or self.t_last_token is None or n < 2:
            return None
        span = self.t_last_token - self.t_first_token
        return (n - 1) / span if span > 0 else None

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_send


class Client:
    """Streams calls to one base URL; remembers which optional fields the target refused."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        base_url: str,
        api: str,
        model: str | None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
    ) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.api = api  # completions or chat
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.accepts_ignore_eos = True

    def set_base_url(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    async def call(
        self,
        prompt: Any,
        max_tokens: int,
        *,
        greedy: bool = False,
        exact_length: bool = True,
        temperature: float | None = None,
    ) -> CallResult:
        """Send one streamed call. `prompt` is token ids or text (completions) or messages (chat);
        sampled at `temperature` (None: the target's default), or greedy."""
        body: dict[str, Any] = {
            "model": self.model or "default",
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.api == "chat":
            body["messages"] = prompt
        else:
            body["prompt"] = prompt
        if greedy or temperature is not None:
            body["temperature"] = 0.0 if greedy else temperature
        if exact_length and self.accepts_ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
        result = await self._stream(body)
        if (
            result.status == "error"
            and exact_length
            and self.accepts_ignore_eos
            and result.error
            and ("ignore_eos" in result.error or "min_tokens" in result.error)
        ):
            logger.info("the target refuses ignore_eos/min_tokens; sending calls without them")
            self.accepts_ignore_eos = False
            return await self.call(
                prompt, max_tokens, greedy=greedy, exact_length=exact_length, temperature=temperature
            )
        return result

    async def _stream(self, body: dict[str, Any]) -> CallResult:
        acc = _Accumulator(time.time())
        try:
            return await asyncio.wait_for(self._read(body, acc), self.timeout_s)
        except asyncio.TimeoutError:
            return acc.failed("error", f"no complete answer within {self.timeout_s:g} s")
        except httpx.HTTPError as exc:
            return acc.failed("error", f"{type(exc).__name__}: {exc}".rstrip(": "))

    async def _read(self, body: dict[str, Any], acc: _Accumulator) -> CallResult:
        url = f"{self.base_url}/v1/{'chat/completions' if self.api == 'chat' else 'completions'}"
        timeout = httpx.Timeout(self.timeout_s, connect=10.0)
        async with self.http.stream("POST", url, json=body, headers=self.headers, timeout=timeout) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                return acc.failed(_refusal_or_error(response.status_code, text), _error_text(response, text))
            async for line in response.aiter_lines():
                if line.startswith("error:"):
                    # llama-server of late 2024 ends a stream it gave up on with an `error:` line of its
                    # own (server_sent_event(sink, "error", ...)), not a `data:` one
                    return acc.failed("error", _message_of(line[6:])[:200] or "an error line in the stream")
                data = stream.data_of(line)
                if data is None:
                    continue
                if data == "[DONE]":
                    acc.done = True
                    break
                acc.add(data)
        return acc.result()


class _Accumulator:
    def __init__(self, t_send: float) -> None:
        self.t_send = t_send
        self.t_first: float | None = None
        self.t_content: float | None = None
        self.t_last: float | None = None
        self.t_finish: float | None = None  # the chunk that said why the answer ended
        self.usage: dict[str, Any] = {}
        self.num_chunks = 0
        self.done = False
        self.status: str | None = None
        self.error: str | None = None

    def add(self, data: str) -> None:
        now = time.time()
        try:
            obj = stream.parse_data(data)
        except ValueError:
            self.status, self.error = "error", f"a stream chunk is not JSON: {data[:80]!r}"
            return
        if obj is None:
            return
        chunk = stream.read_chunk(obj)
        if chunk.error is not None:
            self.status, self.error = "error", chunk.error
            return
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.generated:
            self.num_chunks += 1
            self.t_first = self.t_first or now
            self.t_last = now
        if chunk.content:
            self.t_content = self.t_content or now
        if chunk.finished:
            self.t_finish = self.t_finish or now

    def failed(self, status: str, error: str) -> CallResult:
        self.status, self.error = status, error
        return self.result()

    def result(self) -> CallResult:
        usage = stream.read_usage(self.usage)
        status, error = self.status, self.error
        if status is None:
            status, error = ("ok", None) if self.done or self.usage else ("error", "the stream ended before [DONE]")
        output = usage.output_tokens
        if output is None and status == "ok":
            output = self.num_chunks
        t_first, t_last = self.t_first, self.t_last
        if t_first is None and output and self.t_finish is not None:  # tokens that made no text
            t_first = t_last = self.t_finish
        return CallResult(
            t_send=self.t_send,
            t_first_token=t_first,
            t_first_content=self.t_content,
            t_last_token=t_last,
            prompt_tokens=usage.prompt_tokens,
            cached_tokens=usage.cached_tokens,
            output_tokens=output,
            reasoning_tokens=usage.reasoning_tokens,
            status=status,
            error=error,
            num_token_chunks=self.num_chunks,
        )


def _refusal_or_error(status_code: int, text: str) -> str:
    lowered = text.lower()
    if status_code in (400, 413, 422) and any(word in lowered for word in _REFUSAL_WORDS):
        return "refused"
    return "error"


def _error_text(response: httpx.Response, text: str) -> str:
    return f"HTTP {response.status_code}: {_message_of(text)[:500]}"


def _message_of(text: str) -> str:
    """An error body's message: `{"error": {"message": ...}}`, `{"message": ...}`, or the text itself."""
    message = text.strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        message = str(err.get("message", err) if isinstance(err, dict) else err)
    except (json.JSONDecodeError, AttributeError):
        pass
    return message


async def list_models(http: httpx.AsyncClient, base_url: str, api_key: str | None) -> list[str]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    response = await http.get(f"{base_url.rstrip('/')}/v1/models", headers=headers, timeout=10.0)
    response.raise_for_status()
    return [str(m["id"]) for m in response.json().get("data", []) if isinstance(m, dict) and m.get("id")]
