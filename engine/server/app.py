"""The FastAPI app: OpenAI routes, `/metrics`, `/health`, `/v1/cache/status`, `/v1/engine/steps`.

Handlers never touch the engine: generation goes through `EngineRunner.submit`, hook reads
through `EngineRunner.call`, both served by the engine thread between two steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, TypeVar, cast

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.errors import EngineError
from engine.runtime.engine import Engine, RequestRejected
from engine.sampling import SamplingParams
from engine.server import protocol as p
from engine.server.chat import ChatMessage, message_text, render_chat
from engine.server.config import ServerConfig
from engine.server.errors import EngineUnavailable
from engine.server.metrics import CONTENT_TYPE, ServerMetrics
from engine.server.runner import Delta, EngineRunner
from engine.server.status import as_json, take_snapshot
from engine.server.wire import StepsPage

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions


class ApiError(Exception):
    """Answered as an OpenAI-style error body with `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def response(self) -> JSONResponse:
        return JSONResponse(p.error_body(self.message, self.type, self.param, self.code), status_code=self.status)


def build_app(runner: EngineRunner, metrics: ServerMetrics, config: ServerConfig, model_name: str) -> FastAPI:
    """The app; its lifespan starts and stops the engine thread."""
    server = _OpenAIServer(runner, metrics, config, model_name)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        runner.start()
        yield
        runner.stop()

    # No /docs or /openapi.json: with --api-key set, every route but /health is guarded.
    app = FastAPI(title="tokdrift engine", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    guarded = [Depends(server.check_key)]
    app.add_api_route("/health", server.health, methods=["GET"])
    app.add_api_route("/v1/models", server.models, methods=["GET"], dependencies=guarded)
    app.add_api_route("/v1/chat/completions", server.chat, methods=["POST"], dependencies=guarded)
    app.add_api_route("/v1/completions", server.completions, methods=["POST"], dependencies=guarded)
    app.add_api_route("/metrics", server.metrics_text, methods=["GET"], dependencies=guarded)
    app.add_api_route("/v1/cache/status", server.cache_status, methods=["GET"], dependencies=guarded)
    app.add_api_route("/v1/engine/steps", server.engine_steps, methods=["GET"], dependencies=guarded)
    app.add_exception_handler(ApiError, lambda _r, exc: exc.response())
    app.exception_handler(RequestValidationError)(_validation_error)  # typed for its own exception
    app.exception_handler(StarletteHTTPException)(_http_error)
    app.state.runner = runner
    return app


class _OpenAIServer:
    def __init__(self, runner: EngineRunner, metrics: ServerMetrics, config: ServerConfig, model_name: str) -> None:
        self.runner = runner
        self.engine = runner.engine  # read-only here: tokenizer and fixed sizes
        self.metrics = metrics
        self.config = config
        self.model_name = model_name
        self.created = int(time.time())

    # --- plain routes -----------------------------------------------------------------------

    async def check_key(self, request: Request) -> None:
        key = self.config.api_key
        if key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip().encode(), key.encode()):
            raise ApiError(
                401,
                "expected the header 'Authorization: Bearer <api key>' with the server's "
                "--api-key, found " + ("a different key" if token else "none"),
                code="invalid_api_key",
            )

    async def health(self) -> JSONResponse:
        if not self.runner.alive:
            raise ApiError(503, self.runner.error or "the engine is not running", type_="server_error")
        if self.runner.warming_up:
            raise ApiError(503, "the engine is warming up (--warmup-chunks)", type_="server_error")
        return JSONResponse({"status": "ok"})

    async def models(self) -> JSONResponse:
        card = p.model_card(self.model_name, self.engine.max_context, self.created)
        return JSONResponse({"object": "list", "data": [card]})

    async def metrics_text(self) -> Response:
        snap = await self._on_engine(take_snapshot)
        return Response(self.metrics.render(snap), media_type=CONTENT_TYPE)

    async def cache_status(self, check: bool = Query(False, description="Also run check_integrity().")) -> JSONResponse:
        snap = await self._on_engine(lambda engine: take_snapshot(engine, check=check))
        return JSONResponse(as_json(snap) | {"model": self.model_name})

    async def engine_steps(
        self,
        after: int = Query(0, ge=0, description="Return steps numbered above this."),
        limit: int | None = Query(None, ge=1, description="At most this many rows."),
    ) -> JSONResponse:
        limit = min(limit or self.config.max_steps_per_reply, self.config.max_steps_per_reply)
        page = self.runner.steps_after(after, limit)
        missed = 0 if page.first_step is None else max(0, page.first_step - after - 1)
        return JSONResponse(
            StepsPage(
                first_step=page.first_step,
                last_step=page.last_step,
                next_after=page.steps[-1].step if page.steps else max(after, 0),
                num_missed=missed,
                steps=list(page.steps),
            ).to_json()
        )

    # --- generation -------------------------------------------------------------------------

    async def chat(self, body: p.ChatCompletionRequest, request: Request) -> Response:
        arrival = time.time()
        if body.logprobs or body.top_logprobs:
            raise ApiError(400, "logprobs are not supported by this server", param="logprobs")
        messages = [
            ChatMessage(
                m.role,
                message_text(
                    None
                    if m.content is None
                    else m.content
                    if isinstance(m.content, str)
                    else [part.model_dump() for part in m.content],
                    m.tool_calls,
                ),
            )
            for m in body.messages
        ]
        ids = render_chat(messages, self.engine.tokenizer)
        max_tokens = body.max_completion_tokens or body.max_tokens
        params = self._params(body, len(ids), max_tokens, default=None)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        queue = await self._start(request_id, ids, params, arrival)
        created = int(arrival)
        if body.stream:
            return self._sse(self._chat_events(request_id, created, body.include_usage, queue))
        text, last = await self._collect(request, request_id, queue)
        if last is None:
            return Response(status_code=499)  # the client went away; nobody reads this
        return JSONResponse(p.chat_response(request_id, self.model_name, created, text, last))

    async def completions(self, body: p.CompletionRequest, request: Request) -> Response:
        arrival = time.time()
        if body.logprobs is not None:
            raise ApiError(400, "logprobs are not supported by this server", param="logprobs")
        if body.echo or body.suffix is not None:
            raise ApiError(
                400, "echo and suffix are not supported by this server", param="echo" if body.echo else "suffix"
            )
        ids = self._prompt_ids(body.prompt)
        params = self._params(body, len(ids), body.max_tokens, default=COMPLETIONS_DEFAULT_MAX_TOKENS)
        request_id = f"cmpl-{uuid.uuid4().hex}"
        queue = await self._start(request_id, ids, params, arrival)
        created = int(arrival)
        if body.stream:
            return self._sse(self._completion_events(request_id, created, body.include_usage, queue))
        text, last = await self._collect(request, request_id, queue)
        if last is None:
            return Response(status_code=499)
        return JSONResponse(p.completion_response(request_id, self.model_name, created, text, last))

    def _prompt_ids(self, prompt: str | list[int] | list[str] | list[list[int]]) -> list[int]:
        first = prompt[0] if isinstance(prompt, list) and prompt else None
        if isinstance(first, (str, list)):  # a batch of prompts
            if len(prompt) != 1:
                raise ApiError(
                    400,
                    f"expected one prompt per request, found a batch of {len(prompt)}; send them as separate requests",
                    param="prompt",
                )
            prompt = first
        # a string, or token ids (the batch's one prompt, or the prompt itself)
        ids = self.engine.tokenizer.encode(prompt) if isinstance(prompt, str) else cast(list[int], prompt)
        if not ids:
            raise ApiError(400, "expected a non-empty prompt, found an empty one", param="prompt")
        return ids

    def _params(
        self, body: p.SamplingFields, num_prompt: int, max_tokens: int | None, default: int | None
    ) -> SamplingParams:
        if body.n != 1:
            raise ApiError(400, f"n must be 1 (this server returns one choice per request), got {body.n}", param="n")
        context = self.engine.max_context
        if max_tokens is not None and max_tokens > context:
            raise ApiError(
                400,
                f"max_tokens must be at most the engine's context of {context} tokens, got {max_tokens}",
                param="max_tokens",
            )
        if max_tokens is None:
            max_tokens = default if default is not None else max(1, context - num_prompt)
        stop = () if body.stop is None else (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)
        try:
            return SamplingParams(
                max_tokens=max_tokens,
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p,
                top_k=body.top_k if body.top_k and body.top_k > 0 else None,
                seed=body.seed,
                stop=stop,
                stop_token_ids=tuple(body.stop_token_ids or ()),
                ignore_eos=body.ignore_eos,
            )
        except EngineError as exc:
            raise ApiError(400, str(exc)) from None

    async def _start(
        self, request_id: str, ids: list[int], params: SamplingParams, arrival: float
    ) -> asyncio.Queue[Delta]:
        """Hand the request to the engine; its Deltas arrive on the returned queue."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delta] = asyncio.Queue()
        future = self.runner.submit(
            request_id, ids, params, lambda delta: loop.call_soon_threadsafe(queue.put_nowait, delta), arrival
        )
        try:
            await asyncio.wrap_future(future)
        except RequestRejected as exc:
            too_long = len(ids) >= self.engine.max_context
            raise ApiError(
                400,
                str(exc),
                param="prompt" if too_long else None,
                code="context_length_exceeded" if too_long else None,
            ) from None
        except EngineUnavailable as exc:
            raise ApiError(503, str(exc), type_="server_error") from None
        except EngineError as exc:
            raise ApiError(400, str(exc)) from None
        except asyncio.CancelledError:
            self.runner.abort(request_id)
            raise
        return queue

    async def _deltas(self, request_id: str, queue: asyncio.Queue[Delta]) -> AsyncGenerator[Delta, None]:
        """The request's Deltas until the finished one; leaving early aborts the request."""
        finished = False
        try:
            while True:
                delta = await queue.get()
                if delta.error is not None:
                    finished = True
                    raise ApiError(503, delta.error, type_="server_error")
                yield delta
                if delta.finished:
                    finished = True
                    return
        finally:
            if not finished:
                self.runner.abort(request_id)

    async def _collect(
        self, request: Request, request_id: str, queue: asyncio.Queue[Delta]
    ) -> tuple[str, Delta | None]:
        """All the text and the last Delta; (text so far, None) when the client disconnected first."""
        parts: list[str] = []

        async def consume() -> Delta | None:
            last = None
            async with contextlib.aclosing(self._deltas(request_id, queue)) as deltas:
                async for delta in deltas:
                    parts.append(delta.text)
                    last = delta
            return last

        consumer = asyncio.ensure_future(consume())
        watcher = asyncio.ensure_future(_wait_disconnect(request))
        try:
            await asyncio.wait({consumer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (consumer, watcher):
                task.cancel()
        if consumer.cancelled() or not consumer.done():
            with contextlib.suppress(asyncio.CancelledError):
                await consumer  # its cleanup aborts the request
            return "".join(parts), None
        return "".join(parts), consumer.result()

    def _sse(self, events: AsyncIterator[str]) -> EventSourceResponse:
        return EventSourceResponse(events, ping=self.config.stream_ping_s, sep="\n")

    async def _chat_events(
        self, request_id: str, created: int, include_usage: bool, queue: asyncio.Queue[Delta]
    ) -> AsyncIterator[str]:
        def chunk(delta: dict[str, Any], **kw: Any) -> str:
            return json.dumps(p.chat_chunk(request_id, self.model_name, created, delta, **kw))

        yield chunk({"role": "assistant", "content": ""})
        try:
            async with contextlib.aclosing(self._deltas(request_id, queue)) as deltas:
                async for delta in deltas:
                    if delta.text:
                        yield chunk({"content": delta.text})
                    if delta.finished:
                        yield chunk({}, finish_reason=delta.finish_reason)
                        if include_usage:
                            yield chunk({}, usage_=p.usage(delta), choices=False)
        except ApiError as exc:
            yield json.dumps(p.error_body(exc.message, exc.type, exc.param, exc.code))
        yield "[DONE]"

    async def _completion_events(
        self, request_id: str, created: int, include_usage: bool, queue: asyncio.Queue[Delta]
    ) -> AsyncIterator[str]:
        def chunk(text: str, **kw: Any) -> str:
            return json.dumps(p.completion_chunk(request_id, self.model_name, created, text, **kw))

        try:
            async with contextlib.aclosing(self._deltas(request_id, queue)) as deltas:
                async for delta in deltas:
                    if delta.text or delta.finished:
                        yield chunk(delta.text, finish_reason=delta.finish_reason if delta.finished else None)
                    if delta.finished and include_usage:
                        yield chunk("", usage_=p.usage(delta), choices=False)
        except ApiError as exc:
            yield json.dumps(p.error_body(exc.message, exc.type, exc.param, exc.code))
        yield "[DONE]"

    async def _on_engine(self, fn: Callable[[Engine], _T]) -> _T:
        try:
            return await asyncio.wrap_future(self.runner.call(fn))
        except EngineUnavailable as exc:
            raise ApiError(503, str(exc), type_="server_error") from None


async def _wait_disconnect(request: Request) -> None:
    """Returns when the client has gone (the body is already read, so the next message is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    where = ".".join(loc) or "body"
    if first.get("type") == "json_invalid":
        message = f"expected a JSON object as the request body, found invalid JSON ({first.get('msg', '')})"
    elif not loc:
        message = f"expected a JSON object as the request body, found {type(first.get('input')).__name__}"
    else:
        message = f"field '{where}': {first.get('msg', 'invalid value')}"
        if len(errors) > 1:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return JSONResponse(p.error_body(message, param=where if loc else None), status_code=400)


def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    type_ = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return JSONResponse(
        p.error_body(str(exc.detail), type_), status_code=exc.status_code, headers=getattr(exc, "headers", None)
    )
