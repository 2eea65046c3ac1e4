"""The engine thread: the only thread that touches the engine.

HTTP handlers hand work over through a queue (`submit`, `abort`, `call`) and get their
tokens back through a per-request sink, a callable the engine thread invokes with a `Delta`
(the server's sink puts it on the handler's asyncio queue with `call_soon_threadsafe`).

    loop:  wait until there is a command or work  ->  run commands  ->  step  ->  dispatch updates

When idle the thread sleeps on a condition; nothing polls.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from engine.runtime.engine import Engine
from engine.runtime.stats import StepHistory, StepStats
from engine.runtime.warmup import warm_up
from engine.sampling import SamplingParams
from engine.server.detokenize import TextStream
from engine.server.errors import EngineUnavailable

logger = logging.getLogger(__name__)

STALL_WAIT_S = 0.01  # work queued but nothing could be scheduled: look again after this


class Delta(NamedTuple):
    """What a request gained since its last Delta."""

    text: str  # safe to show: whole characters, no part of a stop string
    token_ids: list[int]
    finished: bool
    finish_reason: str | None  # "stop", "length", "abort"
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    num_output_tokens: int
    error: str | None = None  # the engine failed or stopped under this request


class StepPage(NamedTuple):
    first_step: int | None  # oldest step still held; None when none is held
    last_step: int  # newest step the engine has run; 0 before the first
    steps: list[StepStats]  # oldest first


class RequestObserver:
    """Told about every request's progress, on the engine thread (metrics plug in here)."""

    def on_tokens(
        self,
        now: float,
        arrival: float,
        first_token: float | None,
        last_token: float | None,
        num_new: int,
        num_prompt: int,
    ) -> None: ...

    def on_finish(
        self,
        now: float,
        arrival: float,
        first_token: float | None,
        reason: str | None,
        num_prompt: int,
        num_output: int,
    ) -> None: ...

    def on_step(self, stats: StepStats) -> None: ...


Sink = Callable[[Delta], object]  # what it returns is dropped
# A command for the engine thread: ("add", request id, ids, params, sink, arrival, future),
# ("abort", request id) or ("call", fn, future); _do takes them apart by their first word.
_Command = tuple[Any, ...]
_T = TypeVar("_T")


@dataclass(kw_only=True)
class _Live:
    sink: Sink
    stream: TextStream
    arrival: float
    first_token: float | None = None
    last_token: float | None = None


class EngineRunner:
    def __init__(
        self,
        engine: Engine,
        step_history: int = 65536,
        observer: RequestObserver | None = None,
        warmup_chunks: int = 0,
    ) -> None:
        self.engine = engine
        self.observer = observer or RequestObserver()
        self.error: str | None = None  # why the engine thread stopped, when it failed
        self.warmup_chunks = warmup_chunks
        self.warming_up = warmup_chunks > 0  # until the engine thread has run them (warmup.py)
        self._cond = threading.Condition()
        self._inbox: collections.deque[_Command] = collections.deque()
        self._stopping = False
        self._live: dict[str, _Live] = {}  # engine thread only
        self._steps = StepHistory(step_history)
        self._steps_lock = threading.Lock()
        self._last_step = 0
        self._thread: threading.Thread | None = None

    # --- any thread -------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the current step, end every live request with an error, and join the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    def submit(
        self,
        request_id: str,
        prompt_ids: Sequence[int],
        params: SamplingParams,
        sink: Sink,
        arrival: float | None = None,
    ) -> concurrent.futures.Future[None]:
        """Queue a request; the future resolves once the engine has taken it (None) or refused it
        (RequestRejected). From then on `sink` receives its Deltas, the last one `finished`."""
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._put(("add", request_id, list(prompt_ids), params, sink, arrival or time.time(), future), future)
        return future

    def abort(self, request_id: str) -> None:
        """Stop a request and free its memory (no-op when it already finished)."""
        self._put(("abort", request_id), None)

    def call(self, fn: Callable[[Engine], _T]) -> concurrent.futures.Future[_T]:
        """Run `fn(engine)` on the engine thread between two steps; a future of its result."""
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._put(("call", fn, future), future)
        return future

    def steps_after(self, after: int, limit: int) -> StepPage:
        """Up to `limit` recorded steps numbered above `after`, oldest first."""
        with self._steps_lock:
            return StepPage(self._steps.first_step, self._last_step, self._steps.after(after, limit))

    @property
    def num_steps_held(self) -> int:
        """Steps in the history: at most `step_history`, 185 bytes each, taken at start."""
        with self._steps_lock:
            return len(self._steps)

    @property
    def num_live(self) -> int:
        """Requests the engine thread streams to a sink; a finished one is dropped at once."""
        return len(self._live)

    def _put(self, command: _Command, future: concurrent.futures.Future[Any] | None) -> None:
        with self._cond:
            if self._stopping or self.error is not None:
                if future is not None:
                    future.set_exception(EngineUnavailable(self.error or "the engine is shutting down"))
                return
            self._inbox.append(command)
            self._cond.notify()

    # --- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        stalled = False
        try:
            if self.warming_up:
                warm_up(self.engine, self.warmup_chunks)  # on this thread: its malloc arena keeps the memory
                self.warming_up = False
            while True:
                with self._cond:
                    if stalled and not (self._inbox or self._stopping):
                        self._cond.wait(STALL_WAIT_S)
                    while not (self._inbox or self._stopping or self.engine.has_work()):
                        self._cond.wait()
                    if self._stopping:
                        break
                    commands = list(self._inbox)
                    self._inbox.clear()
                for command in commands:
                    self._do(command)
                stalled = False
                if self.engine.has_work():
                    stats = self.engine.step()
                    if stats is None:
                        stalled = True  # queued work that cannot be scheduled yet
                    else:
                        self._record(stats)
                    if not self.engine.has_work():
                        self.engine.step()  # nothing left: the engine logs its idle line
                self._dispatch()
        except BaseException as exc:  # the engine is in an unknown state: stop serving
            logger.exception("engine thread failed")
            self.error = f"engine failed: {type(exc).__name__}: {exc}"
        self._fail_all(self.error or "the engine is shutting down")

    def _do(self, command: _Command) -> None:
        kind = command[0]
        if kind == "add":
            _, request_id, ids, params, sink, arrival, future = command
            try:
                request = self.engine.add_request(ids, params, request_id)
            except Exception as exc:
                future.set_exception(exc)
                return
            stream = TextStream(self.engine.tokenizer, request.stop_ids, request.params.stop)
            self._live[request_id] = _Live(sink=sink, stream=stream, arrival=arrival)
            future.set_result(None)
        elif kind == "abort":
            self.engine.abort(command[1])
        elif kind == "call":
            _, fn, future = command
            try:
                future.set_result(fn(self.engine))
            except Exception as exc:
                future.set_exception(exc)

    def _record(self, stats: StepStats) -> None:
        with self._steps_lock:
            self._steps.append(stats)
            self._last_step = stats.step
        self.observer.on_step(stats)

    def _dispatch(self) -> None:
        for update in self.engine.take_updates():
            live = self._live.get(update.request_id)
            if live is None:
                continue
            now = time.time()
            text = ""
            if update.new_token_ids:
                text = live.stream.push(update.new_token_ids)
                self.observer.on_tokens(
                    now,
                    live.arrival,
                    live.first_token,
                    live.last_token,
                    len(update.new_token_ids),
                    update.num_prompt_tokens,
                )
                live.first_token = live.first_token or now
                live.last_token = now
            if update.finished:
                text += live.stream.finish()
                del self._live[update.request_id]
                self.observer.on_finish(
                    now,
                    live.arrival,
                    live.first_token,
                    update.finish_reason,
                    update.num_prompt_tokens,
                    update.num_output_tokens,
                )
            if text or update.new_token_ids or update.finished:
                _emit(
                    live.sink,
                    Delta(
                        text=text,
                        token_ids=list(update.new_token_ids),
                        finished=update.finished,
                        finish_reason=update.finish_reason,
                        num_prompt_tokens=update.num_prompt_tokens,
                        num_cached_tokens=update.num_cached_tokens,
                        num_output_tokens=update.num_output_tokens,
                    ),
                )

    def _fail_all(self, reason: str) -> None:
        with self._cond:
            self._stopping = True
            commands = list(self._inbox)
            self._inbox.clear()
        for command in commands:
            future = command[-1] if command[0] != "abort" else None
            if future is not None and not future.done():
                future.set_exception(EngineUnavailable(reason))
        for live in self._live.values():
            _emit(
                live.sink,
                Delta(
                    text="",
                    token_ids=[],
                    finished=True,
                    finish_reason="abort",
                    num_prompt_tokens=0,
                    num_cached_tokens=0,
                    num_output_tokens=0,
                    error=reason,
                ),
            )
        self._live.clear()


def _emit(sink: Sink, delta: Delta) -> None:
    try:
        sink(delta)
    except RuntimeError:  # the server's event loop is gone (shutdown): nobody is listening
        pass
