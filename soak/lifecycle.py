"""The soaked engine's lives: one path to a new engine, whether it crashed, a restart was
scheduled, or the run's restart control asks for a fresh one.

    replay gate closed ─ (deliberate: calls in flight finish, bounded) ─ not ready
        ─ target.restart(reason) / target.start() after a crash ─ client follows the new URL
        ─ ready ─ gate open

Probe cycles wait for `ready`, so no probe goes to an engine being started.
"""

from __future__ import annotations

import asyncio
import logging
import time

from soak.client import Client
from soak.errors import SoakError
from soak.replayer import Gate
from soak.targets import EngineExit, EventSink, Target

logger = logging.getLogger(__name__)

MAX_ENGINE_CRASHES = 20  # crashes in one run before the soak gives up
POLL_S = 0.5  # how often keep() looks for an engine that died


class MainEngine:
    """The soaked engine, started once already; new lives come only through here."""

    def __init__(
        self, target: Target, client: Client, gate: Gate, idle: asyncio.Event, wait_s: float, on_event: EventSink
    ) -> None:
        self.target = target
        self.client = client
        self.gate = gate
        self.idle = idle  # no replayed call in flight
        self.wait_s = wait_s  # how long a deliberate restart lets calls in flight finish
        self.on_event = on_event
        self.ready = asyncio.Event()  # set while the engine is up
        self.ready.set()
        self.state = "up"
        self.num_crashes = 0
        self.num_restarts = 0  # deliberate
        self._lock = asyncio.Lock()

    async def restart(self, reason: str) -> None:
        """A deliberate restart (scheduled, or the restart control): an engine_restart event, then
        a new life."""
        await self._new_life(reason, None)
        self.num_restarts += 1

    async def keep(self) -> None:
        """Runs beside the soak: an engine that died unasked is recorded and started again."""
        while True:
            exit_info = self.target.check_exit()
            if exit_info is not None:
                await self.after_crash(exit_info)
            await asyncio.sleep(POLL_S)

    async def after_crash(self, exit_info: EngineExit) -> None:
        """The engine died unasked: recorded with its exit code and log tail, then started again;
        after MAX_ENGINE_CRASHES the soak gives up."""
        self.on_event(
            "engine_exit",
            exit_code=exit_info.exit_code,
            log_tail=exit_info.log_tail,
            engine_life=self.target.life,
            expected=False,
        )
        logger.warning("engine exited with code %s; starting it again", exit_info.exit_code)
        self.num_crashes += 1
        if self.num_crashes > MAX_ENGINE_CRASHES:
            raise SoakError(
                f"the engine died {self.num_crashes} times; giving up. Last lines of its log:\n{exit_info.log_tail}"
            )
        await self._new_life("after a crash", exit_info)

    def describe(self, now: float | None = None) -> str:
        t = self.target
        age = t.age(now if now is not None else time.time())
        return f"{self.state} (life {t.life}, pid {t.pid}" + (f", age {age:.0f} s)" if age is not None else ")")

    async def _new_life(self, reason: str, crash: EngineExit | None) -> None:
        async with self._lock:
            with self.gate.closed():
                if crash is None:  # let the calls in flight finish first, for a while
                    try:
                        await asyncio.wait_for(self.idle.wait(), self.wait_s)
                    except asyncio.TimeoutError:
                        pass
                self.ready.clear()
                self.state = f"restarting ({reason})" if crash is None else "restarting after a crash"
                if crash is None:
                    await self.target.restart(reason)
                else:
                    await self.target.start()
                self.client.set_base_url(self.target.url)
                self.state = "up"
                self.ready.set()
