"""What the soak does beside the calls: probe cycles (start, baseline, periodic, end, after a
restart), each recorded as probes rows, events and a probe request; the restart control;
profiles; and the scheduler that times the periodic ones.

    schedule = Schedule(config, cycles, main, profiles, store, recorder, on_cycle)
    await schedule.cycle("start"); await schedule.baseline()
    await schedule.run(deadline, done)      # periodic cycles, scheduled restarts, the end profile
    await schedule.restart_control()
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from rundir.writer import RunStore
from soak.config import SoakConfig
from soak.cycle import MAIN, Cycle, ProbeCycles
from soak.lifecycle import MainEngine
from soak.profiler import Profiles
from soak.recorder import Recorder

logger = logging.getLogger(__name__)

# Probe cycles after the restart control: the fresh engine's level. Three read 0.76, 1.04 and 1.01
# of the twin after an output-buffer fault that had held the aged engine at 0.85 from the second
# cycle on, a restart 0.97 (0.75-1.26) that could say nothing; six halve that spread's weight.
AFTER_RESTART_CYCLES = 6


class Schedule:
    """Probe cycles, restarts and profiles of the main engine (and its control, in each cycle)."""

    def __init__(
        self,
        config: SoakConfig,
        cycles: ProbeCycles,
        main: MainEngine,
        profiles: Profiles,
        store: RunStore,
        recorder: Recorder,
        on_cycle: Callable[[list[dict[str, Any]]], None],
    ) -> None:
        self.config = config
        self.cycles = cycles
        self.main = main
        self.profiles = profiles
        self.store = store
        self.recorder = recorder
        self.on_cycle = on_cycle  # the probes rows of each cycle, as written

    async def cycle(self, reason: str) -> Cycle:
        await self.profiles.wait()  # py-spy sampling the engine would slow the probe down
        cycle = await self.cycles.run(reason)
        for taken in cycle.taken:
            r = taken.result
            self.store.add("probes", taken.row(cycle.number))
            life = {"engine_life" if taken.role == MAIN else "control_life": taken.life}
            self.store.event(
                "probe",
                t=r.t,
                probe_id=r.probe_id,
                reason=reason,
                status=r.status,
                decode_tps=r.decode_tps,
                ttft_s=r.ttft_s,
                role=taken.role,
                cycle=cycle.number,
                **life,
            )
        main = cycle.get(MAIN)
        if main is not None:  # the requests table is the main engine's traffic and its probes
            self.recorder.call(
                f"probe-{cycle.number}-{reason}",
                None,
                None,
                None,
                main.result.call,
                main.life,
                main.age_s,
                kind="probe",
            )
            first = self.cycles.first_main_ok
            self.profiles.after_probe(
                main.result.decode_tps, first.decode_tps if first is not None else None, self.main.target.pid, main.life
            )
        try:
            self.on_cycle(cycle.rows)
        except Exception:  # noqa: BLE001 - a view must never stop the soak
            logger.exception("the probe cycle callback failed")
        return cycle

    async def baseline(self) -> None:
        """baseline_cycles probe cycles on the fresh engine with nothing else sent, probe_every_s
        apart: the engine's youth, measured before any traffic fills its caches."""
        probing = self.config.probing
        self.store.event("baseline", cycles=probing.baseline_cycles)
        for _ in range(probing.baseline_cycles):
            await asyncio.sleep(probing.probe_every_s)
            await self.cycle("baseline")

    async def restart_control(self) -> None:
        """The restart control: a fresh engine, probed a few cycles so its level is known."""
        with self.cycles.control.holding():
            await self.main.restart("control")
            for _ in range(AFTER_RESTART_CYCLES):
                await self.cycle("after_restart")

    def profile(self, reason: str) -> None:
        self.profiles.take(reason, self.main.target.pid, self.main.target.life)

    async def run(self, deadline: float, done: asyncio.Event) -> None:
        """Periodic probe cycles, scheduled restarts and the end profile until the deadline, or
        until `done` is set (what is in flight then finishes first)."""
        cfg, target = self.config, self.main.target
        every_s = cfg.probing.probe_every_s
        probing = cfg.probes and every_s > 0
        next_probe = time.time() + every_s if probing else float("inf")
        next_restart = time.time() + cfg.restart_every_s if cfg.restart_every_s else float("inf")
        # The end profile is taken while the replay still runs: a profile of an idle engine shows nothing.
        end_profile = deadline - cfg.profile_seconds - 1.0
        while True:
            now = time.time()
            due = min(next_probe, next_restart, end_profile)
            if due >= deadline or done.is_set():
                return
            try:
                await asyncio.wait_for(done.wait(), timeout=max(0.0, due - now))
                return
            except asyncio.TimeoutError:
                pass
            if time.time() >= end_profile:
                self.profile("end")
                end_profile = float("inf")
            if time.time() >= next_restart and target.can_restart:
                await self.main.restart("scheduled")
                if cfg.probes:
                    await self.cycle("after_restart")
                next_restart = time.time() + (cfg.restart_every_s or float("inf"))
                next_probe = time.time() + every_s if probing else float("inf")
            elif time.time() >= next_restart:
                next_restart = float("inf")
            if time.time() >= next_probe:
                await self.cycle("periodic")
                next_probe = time.time() + every_s
