"""A probe cycle: the soaked engine and its control probed back to back, each alone.

    cycle n:  gate closed ─ wait until idle (bounded) ─ first probe ─ second probe ─ gate open
              n even: main, then control        n odd: control, then main

The replay gate stays closed and the main engine idle for both probes, so the control's probe
sees the same quiet host as the main one's; the order alternates so that whatever the first
probe leaves behind (a warm core, a busy allocator) falls on each side as often. An engine's
first probe after it started is preceded by the same unrecorded warm-up call, main or control.
The cycle holds the control's lock: a control restart never falls inside one. Cycle numbers
count from 0 and go on across `soak resume`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import NamedTuple

from rundir.rows import ProbeRow
from rundir.schema import ProbeRole
from soak.control import ControlEngine
from soak.lifecycle import MainEngine
from soak.probes import EngineBusy, Prober, ProbeResult, wait_until_idle
from soak.replayer import Gate

MAIN, CONTROL = ProbeRole.MAIN, ProbeRole.CONTROL
NUM_RECENT = 5  # cycles kept for the live view


class Taken(NamedTuple):
    """One probe of a cycle, with the life and age of the engine it went to."""

    role: str  # main or control
    result: ProbeResult
    life: int
    age_s: float | None

    def row(self, cycle: int) -> ProbeRow:
        """Its probes-table row."""
        r = self.result
        return {
            "t": r.t,
            "engine_age_s": self.age_s,
            "engine_life": self.life,
            "probe_id": r.probe_id,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "ttft_s": r.ttft_s,
            "decode_tps": r.decode_tps,
            "status": r.status,
            "reason": r.reason,
            "role": self.role,
            "cycle": cycle,
        }


class Cycle(NamedTuple):
    number: int
    reason: str  # start, baseline, periodic, end or after_restart
    taken: tuple[Taken, ...]  # in the order sent

    def get(self, role: str) -> Taken | None:
        return next((t for t in self.taken if t.role == role), None)

    @property
    def rows(self) -> list[ProbeRow]:
        return [t.row(self.number) for t in self.taken]


class ProbeCycles:
    def __init__(
        self,
        prober: Prober,
        main: MainEngine,
        control: ControlEngine,
        gate: Gate,
        idle: asyncio.Event,
        engine_busy: EngineBusy | None,
        wait_s: float,
        first_number: int = 0,
    ) -> None:
        self.prober = prober
        self.main = main
        self.control = control
        self.gate = gate
        self.idle = idle  # no replayed call in flight
        self.engine_busy = engine_busy  # requests the main engine itself still runs, where it can tell
        self.wait_s = wait_s
        self.next_number = first_number
        self.recent: deque[Cycle] = deque(maxlen=NUM_RECENT)
        self.first_main_ok: ProbeResult | None = None  # the baseline a probe drop is measured against
        self._warmed: dict[str, int] = {}  # role -> the engine life whose first probe was warmed up

    async def run(self, reason: str) -> Cycle:
        await self.main.ready.wait()  # not while the engine is being started again
        async with self.control.probing() as with_control:
            number = self.next_number
            self.next_number += 1
            order = (MAIN, CONTROL) if number % 2 == 0 else (CONTROL, MAIN)
            taken = []
            with self.gate.closed():
                alone = await wait_until_idle(self.idle, self.engine_busy, self.wait_s)
                for role in order:
                    if role == MAIN or with_control:
                        taken.append(await self._take(role, reason, alone))
        cycle = Cycle(number, reason, tuple(taken))
        self.recent.append(cycle)
        main = cycle.get(MAIN)
        if self.first_main_ok is None and main is not None and main.result.status == "ok" and main.result.decode_tps:
            self.first_main_ok = main.result
        return cycle

    async def _take(self, role: str, reason: str, alone: bool) -> Taken:
        engine = self.main if role == MAIN else self.control
        target, client = engine.target, engine.client
        assert target is not None and client is not None  # a probe goes to a started engine
        life = target.life
        assert life is not None
        if self._warmed.get(role) != life:
            self._warmed[role] = life
            await self.prober.warm_up(client)
        age = target.age()
        taken = Taken(role, await self.prober.send(client, reason, alone), life, age)
        if role == CONTROL:
            self.control.answered_probe()
        return taken
