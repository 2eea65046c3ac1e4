"""Closed-loop session replay: each session's next call goes out after its previous call
finished plus its think time, sessions start at their trace times, the trace loops.

    loop 0: s0 ──call──think──call──…   s1 (starts at its t / speed) ──call──…
    loop 1 (origin + span / speed, fresh ids "s0@1", "s1@1"): …

`--concurrency` caps sessions in flight; a session waits for a free place before its first
call. A probe cycle or an engine restart closes the gate: no new call goes out until every one
that closed it is done.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from replay import Call, Materializer, Prompt, Trace
from rundir.rows import RequestRow

logger = logging.getLogger(__name__)

LOOP_SEP = "@"


class Session(NamedTuple):
    name: str  # as in the trace
    start: float  # trace time of its first call
    calls: tuple[Call, ...]  # in turn order


class Position(NamedTuple):
    """Where a resumed replay starts: the loop, and per session of it the first turn still to send."""

    loop: int
    next_turn: dict[str, int]  # trace session name -> first turn not done; absent = not started


def sessions_of(trace: Trace) -> list[Session]:
    by_name: dict[str, list[Call]] = defaultdict(list)
    for call in trace.calls:
        by_name[call.session].append(call)
    sessions = [
        Session(name, min(c.t for c in calls), tuple(sorted(calls, key=lambda c: (c.turn, c.t))))
        for name, calls in by_name.items()
    ]
    return sorted(sessions, key=lambda s: (s.start, s.name))


def session_id(name: str, loop: int) -> str:
    return f"{name}{LOOP_SEP}{loop}"


def position_from(rows: Iterable[RequestRow]) -> Position:
    """The replay position implied by written request rows (aborted calls are sent again)."""
    done: dict[tuple[str, int], int] = {}
    loop = 0
    for row in rows:
        sid, turn, status = row.get("session"), row.get("turn"), row.get("status")
        if not sid or turn is None or LOOP_SEP not in sid or status == "aborted" or row.get("kind") == "probe":
            continue
        name, _, loop_text = sid.rpartition(LOOP_SEP)
        if not loop_text.isdigit():
            continue
        key = (name, int(loop_text))
        done[key] = max(done.get(key, -1), int(turn))
        loop = max(loop, int(loop_text))
    return Position(loop, {name: turn + 1 for (name, lp), turn in done.items() if lp == loop})


SendFn = Callable[[str, Call, Prompt], Awaitable[None]]


class Gate:
    """Open unless someone holds it closed. Holders count: a restart that ends inside a probe
    cycle leaves the gate closed until the cycle is done too."""

    def __init__(self) -> None:
        self._num_holders = 0
        self._open = asyncio.Event()
        self._open.set()

    @contextmanager
    def closed(self) -> Iterator[None]:
        self._num_holders += 1
        self._open.clear()
        try:
            yield
        finally:
            self._num_holders -= 1
            if self._num_holders == 0:
                self._open.set()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait(self) -> None:
        # A call woken by the gate opening may run only after someone closed it again (a restart
        # followed at once by its probe cycle): it then waits again.
        while not self._open.is_set():
            await self._open.wait()


class Replayer:
    """Runs sessions until `deadline`; `send(session_id, call, prompt)` makes and records one call."""

    def __init__(
        self, sessions: list[Session], materialize: Materializer, send: SendFn, concurrency: int, speed: float
    ) -> None:
        if not sessions:
            raise ValueError("no sessions to replay")
        self.sessions = sessions
        self.materialize = materialize
        self.send = send
        self.speed = speed
        self.slots = asyncio.Semaphore(concurrency)
        self.gate = Gate()  # open: calls may go out
        self.idle = asyncio.Event()  # no call in flight
        self.idle.set()
        self.num_in_flight = 0
        self.num_sessions_done = 0
        self.loop = 0
        self.deadline = float("inf")  # set by run(); end_now() brings it forward
        first = min(s.start for s in sessions)
        last = max(c.t for s in sessions for c in s.calls)
        self.span_s = max(last - first, 1.0)  # trace time from the first call to the last send
        self._first = first
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, deadline: float, position: Position | None = None) -> None:
        """Launch sessions loop after loop until `deadline` (time.time()); returns when all launched
        sessions have ended or been cancelled."""
        position = position or Position(0, {})
        self.deadline = deadline
        origin = time.time()
        pending_skip = position.next_turn
        if pending_skip:
            # Resume: sessions not yet started keep their offsets from the earliest of them.
            unstarted = [s.start for s in self.sessions if s.name not in pending_skip]
            origin -= ((min(unstarted) if unstarted else self._first) - self._first) / self.speed
        try:
            for loop in itertools.count(position.loop):
                self.loop = loop
                for session in self.sessions:
                    first_turn = pending_skip.get(session.name, 0) if loop == position.loop else 0
                    calls = [c for c in session.calls if c.turn >= first_turn]
                    if not calls:
                        continue
                    started = loop == position.loop and session.name in pending_skip
                    at = origin if started else origin + (session.start - self._first) / self.speed
                    if not await _sleep_until(min(at, self.deadline)) or time.time() >= self.deadline:
                        return
                    await self.slots.acquire()
                    if time.time() >= self.deadline:
                        self.slots.release()
                        return
                    task = asyncio.create_task(self._session(session_id(session.name, loop), calls, loop))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                origin = max(origin + self.span_s / self.speed + 1.0 / self.speed, time.time())
        finally:
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)

    async def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def end_now(self) -> None:
        """Launch no more sessions and no more turns (`soak run --until-decided`); calls in flight
        finish, and `run` returns once they have."""
        self.deadline = time.time()

    async def _session(self, sid: str, calls: list[Call], loop: int = 0) -> None:
        try:
            prev_end: float | None = None
            prev: Call | None = None
            for call in calls:
                if prev_end is not None:
                    if call.think_time is not None:
                        think = call.think_time
                    else:
                        assert prev is not None  # set with prev_end
                        think = max(0.0, call.t - prev.t - (prev.duration or 0.0))
                    await asyncio.sleep(think / self.speed)
                if time.time() >= self.deadline:
                    return
                prompt = self.materialize(call, loop=loop, session_key=sid)
                if prompt is None:  # over max_context under policy "drop"
                    prev, prev_end = call, time.time()
                    continue
                await self.gate.wait()
                self._enter()
                try:
                    await self.send(sid, call, prompt)
                finally:
                    self._leave()
                prev, prev_end = call, time.time()
        finally:
            self.materialize.forget(sid)
            self.num_sessions_done += 1
            self.slots.release()

    def _enter(self) -> None:
        self.num_in_flight += 1
        self.idle.clear()

    def _leave(self) -> None:
        self.num_in_flight -= 1
        if self.num_in_flight == 0:
            self.idle.set()


async def _sleep_until(t: float) -> bool:
    delay = t - time.time()
    if delay > 0:
        await asyncio.sleep(delay)
    return True
