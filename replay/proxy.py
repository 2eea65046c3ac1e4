"""A recording proxy: a transparent OpenAI-compatible pass-through that appends each call to a trace.

Every request is forwarded unchanged to the upstream server and its answer, streamed or
not, is passed back as it arrives. Chat and text completions are also recorded when they
finish: send time, time to first token (any reasoning, content or tool-call delta), duration,
usage, and prefix blocks hashed from the prompt (token blocks for a token-id prompt, text
blocks of `block_size * chars_per_token` characters otherwise). Text is stored only with
`keep_text`.

One change is made to a streamed request: when the client did not ask for usage, the proxy
asks for it (`stream_options.include_usage`) and removes the usage-only chunk from what the
client receives, so that token counts come from the server, not from counting chunks.

Sessions: the `X-Session-Id` header, else the body's `user` field, else a call continues
the session whose last prompt it extends (all but the last block of it as a prefix), else
it opens a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from replay.blocks import text_block_hashes, token_block_hashes
from replay.errors import TraceError
from replay.stream import read_chunk, read_usage
from replay.trace import Call, TraceHeader, TraceWriter, utc_now_iso

log = logging.getLogger(__name__)

_HOP_HEADERS = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "accept-encoding",
    "upgrade",
    "proxy-connection",
    "te",
    "trailer",
}
_RESPONSE_DROP = {"content-length", "connection", "keep-alive", "transfer-encoding", "content-encoding"}


@dataclass(frozen=True, kw_only=True)
class RecordConfig:
    upstream: str  # the server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine)
    output: Path
    block_size: int = 64
    chars_per_token: float = 4.0  # text prompts: characters per block = block_size * this
    keep_text: bool = False
    inject_usage: bool = True

    def __post_init__(self) -> None:
        if not self.upstream.startswith(("http://", "https://")):
            raise TraceError(f"upstream: expected an http(s):// URL, found {self.upstream!r}")
        if self.block_size < 1:
            raise TraceError(f"block_size: expected an integer >= 1, found {self.block_size!r}")
        if not self.chars_per_token > 0:
            raise TraceError(f"chars_per_token: expected a number > 0, found {self.chars_per_token!r}")


@dataclass(kw_only=True)
class Exchange:
    """One recorded request and what came back."""

    body: dict[str, Any]
    session_hint: str | None
    started: float  # unix seconds
    first_token: float | None = None
    finished: float | None = None
    usage: dict[str, Any] | None = None
    num_deltas: int = 0


@dataclass
class _Session:
    name: str
    last_ids: tuple[int, ...] = ()
    last_end: float | None = None
    num_calls: int = 0


@dataclass
class Recorder:
    """Turns finished exchanges into trace calls and appends them, one flushed line each."""

    config: RecordConfig
    writer: TraceWriter = field(init=False)
    start: float = field(init=False)
    sessions: dict[str, _Session] = field(default_factory=dict)

    def __post_init__(self) -> None:
        header = TraceHeader(
            block_size=self.config.block_size,
            source="record",
            created=utc_now_iso(),
            meta={"upstream": self.config.upstream, "chars_per_token": self.config.chars_per_token},
        )
        self.writer = TraceWriter(self.config.output, header, append=True)
        self.start = self.writer.header.created_unix or time.time()

    def close(self) -> None:
        self.writer.close()

    def record(self, ex: Exchange) -> Call:
        cfg = self.config
        body = ex.body
        tokens = _prompt_token_ids(body)
        if tokens is not None:
            ids = token_block_hashes(tokens, cfg.block_size)
            estimate = len(tokens)
        else:
            text = _prompt_text(body)
            ids = text_block_hashes(text, max(1, round(cfg.block_size * cfg.chars_per_token)))
            estimate = math.ceil(len(text) / cfg.chars_per_token)
        usage = read_usage(ex.usage)
        num_in = estimate if usage.prompt_tokens is None else usage.prompt_tokens
        num_out = ex.num_deltas if usage.output_tokens is None else usage.output_tokens
        reasoning, cached = usage.reasoning_tokens, usage.cached_tokens
        session = self._session(tuple(ids), ex.session_hint)
        finished = ex.finished or time.time()
        call = Call(
            t=round(max(0.0, ex.started - self.start), 4),
            session=session.name,
            turn=session.num_calls,
            hash_ids=tuple(ids),
            input_tokens=num_in,
            output_tokens=num_out,
            reasoning_tokens=None if reasoning is None else min(reasoning, num_out),
            think_time=None if session.last_end is None else round(max(0.0, ex.started - session.last_end), 4),
            cached_tokens=cached,
            ttft=None if ex.first_token is None else round(ex.first_token - ex.started, 4),
            duration=round(finished - ex.started, 4),
            messages=_kept_messages(body) if cfg.keep_text else None,
        )
        session.last_ids = tuple(ids)
        session.last_end = finished
        session.num_calls += 1
        self.writer.write(call)
        return call

    def _session(self, ids: tuple[int, ...], hint: str | None) -> _Session:
        if hint:
            return self.sessions.setdefault(hint, _Session(hint))
        best, best_len = None, 0
        for s in self.sessions.values():
            n = len(s.last_ids)
            if n and len(ids) >= n - 1 and ids[: n - 1] == s.last_ids[: n - 1] and n - 1 >= best_len:
                if n > 1 or ids[:1] == s.last_ids[:1]:
                    best, best_len = s, n - 1
        if best is not None:
            return best
        name = f"rec-{len(self.sessions):04d}"
        return self.sessions.setdefault(name, _Session(name))


def create_app(config: RecordConfig) -> Starlette:
    """The proxy as an ASGI app; the trace file is opened here and closed on shutdown."""
    state: dict[str, Any] = {"recorder": Recorder(config)}  # opened now, so a bad path fails before serving
    base = config.upstream.rstrip("/")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["client"] = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0))
        try:
            yield
        finally:
            await state["client"].aclose()
            state["recorder"].close()

    async def proxy(request: Request) -> Response:
        client: httpx.AsyncClient = state["client"]
        recorder: Recorder = state["recorder"]
        path = request.url.path
        if base.endswith("/v1") and path.startswith("/v1/"):
            path = path[3:]
        url = base + path + (f"?{request.url.query}" if request.url.query else "")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS]
        raw = await request.body()
        body = _json_or_none(raw) if request.method == "POST" and path.endswith("completions") else None
        exchange = None
        stream = False
        injected = False
        if isinstance(body, dict):
            exchange = Exchange(
                body=body,
                session_hint=request.headers.get("x-session-id") or _str(body.get("user")),
                started=time.time(),
            )
            stream = bool(body.get("stream"))
            if stream and config.inject_usage and not (body.get("stream_options") or {}).get("include_usage"):
                raw = json.dumps(
                    {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}
                ).encode()
                injected = True
        upstream_request = client.build_request(request.method, url, headers=headers, content=raw)
        try:
            upstream = await client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            log.warning("upstream %s unreachable: %s", url, exc)
            return JSONResponse(
                {"error": {"message": f"tokdrift proxy: upstream unreachable: {exc}", "type": "upstream_error"}},
                status_code=502,
            )
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_DROP}
        is_sse = "text/event-stream" in upstream.headers.get("content-type", "")
        if exchange is None or not (stream and is_sse):
            content = await upstream.aread()
            await upstream.aclose()
            if exchange is not None and upstream.status_code < 400:
                exchange.finished = time.time()  # no first-token time without a stream: ttft stays unknown
                reply = _json_or_none(content)
                exchange.usage = reply.get("usage") if isinstance(reply, dict) else None
                _record(recorder, exchange)
            elif exchange is not None:
                log.warning("upstream answered %d to %s; not recorded", upstream.status_code, path)
            return Response(content, status_code=upstream.status_code, headers=out_headers)

        async def relay() -> AsyncIterator[bytes]:
            parser = _SSEParser(exchange, drop_usage_only=injected)
            recorded = False

            def finish() -> None:
                # Recorded before the client sees the end of the stream, so a client that reads the trace
                # as soon as its call returns finds the call there.
                nonlocal recorded
                if not recorded:
                    recorded = True
                    exchange.finished = time.time()
                    if upstream.status_code < 400:
                        _record(recorder, exchange)

            try:
                async for chunk in upstream.aiter_raw():
                    for event in parser.feed(chunk):
                        if _is_done(event):
                            finish()
                        yield event
                tail = parser.flush()
                if tail:
                    finish()
                    yield tail
            finally:
                await upstream.aclose()
                finish()

        return StreamingResponse(relay(), status_code=upstream.status_code, headers=out_headers)

    routes = [Route("/{path:path}", proxy, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])]
    return Starlette(routes=routes, lifespan=lifespan)


def _record(recorder: Recorder, exchange: Exchange) -> None:
    try:
        recorder.record(exchange)
    except Exception:  # a recording failure must never break the client's call
        log.exception("could not record a call")


class _SSEParser:
    """Splits an SSE byte stream into events, reads timing and usage, optionally drops usage-only chunks."""

    def __init__(self, exchange: Exchange, drop_usage_only: bool) -> None:
        self.exchange = exchange
        self.drop_usage_only = drop_usage_only
        self.buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self.buffer += chunk
        events = []
        while True:
            cut, sep = _find_event_end(self.buffer)
            if cut < 0:
                break
            event, self.buffer = self.buffer[: cut + sep], self.buffer[cut + sep :]
            if self._inspect(event):
                events.append(event)
        return events

    def flush(self) -> bytes:
        tail, self.buffer = self.buffer, b""
        return tail if tail and self._inspect(tail) else b""

    def _inspect(self, event: bytes) -> bool:
        """Read one event; False when it is the injected usage-only chunk."""
        data = b"".join(line[5:].strip() for line in event.splitlines() if line.startswith(b"data:"))
        if not data or data == b"[DONE]":
            return True
        obj = _json_or_none(data)
        if not isinstance(obj, dict):
            return True
        ex = self.exchange
        chunk = read_chunk(obj)
        if chunk.generated:
            ex.num_deltas += 1
            if ex.first_token is None:
                ex.first_token = time.time()
        if chunk.usage is not None:
            ex.usage = chunk.usage
            if self.drop_usage_only and not chunk.has_choices:
                return False
        return True


def _is_done(event: bytes) -> bool:
    return any(line.startswith(b"data:") and line[5:].strip() == b"[DONE]" for line in event.splitlines())


def _find_event_end(buffer: bytes) -> tuple[int, int]:
    hits = [(buffer.find(sep), len(sep)) for sep in (b"\r\n\r\n", b"\n\n")]
    hits = [h for h in hits if h[0] >= 0]
    return min(hits) if hits else (-1, 0)


def _prompt_token_ids(body: dict[str, Any]) -> list[int] | None:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return prompt
    return None


def _prompt_text(body: dict[str, Any]) -> str:
    """A canonical text of the prompt: tool definitions, then each message in order."""
    parts = []
    if body.get("tools"):
        parts.append("tools:" + json.dumps(body["tools"], sort_keys=True, ensure_ascii=False))
    if isinstance(body.get("messages"), list):
        for m in body["messages"]:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
            parts.append(f"<{m.get('role', '')}>{content or ''}")
            for key in ("tool_calls", "tool_call_id", "name"):
                if m.get(key):
                    parts.append(json.dumps(m[key], sort_keys=True, ensure_ascii=False))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        parts.append(prompt)
    elif isinstance(prompt, list):
        parts.append(json.dumps(prompt))
    return "\n".join(parts)


def _kept_messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    if isinstance(messages, list):
        return messages
    prompt = body.get("prompt")
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else []


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def serve(config: RecordConfig, host: str, port: int) -> None:
    """Run the proxy until interrupted."""
    import uvicorn

    uvicorn.run(create_app(config), host=host, port=port, log_level="warning")


__all__ = ["RecordConfig", "Recorder", "Exchange", "create_app", "serve"]
