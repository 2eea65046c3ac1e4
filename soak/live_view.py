"""What a user watching a soak sees: the live terminal view (rich), or, without a terminal, a
plain status line a minute and a line per probe cycle."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from rich.table import Table

from ground import Label
from rundir.rows import ProbeRow
from soak.clock import ServingClock
from soak.cycle import CONTROL, MAIN, Cycle
from soak.probes import ProbeResult

if TYPE_CHECKING:
    from soak.recorder import Recorder
    from soak.run import Session

logger = logging.getLogger(__name__)

REFRESH_S = 0.5  # how often the view is drawn


class SoakPhase(Label):
    """What a soak does now (soak.run.Soak.phase), in the words the view shows."""

    STARTING = "starting"  # the engine and its control starting
    START_PROBE = "start probe"  # the first probe cycle
    BASELINE = "baseline"  # --baseline cycles: the fresh engine, before any traffic
    REPLAY = "replay"  # the trace's calls, probe cycles between them
    END_PROBES = "end probes"  # the last probe cycle
    RESTART_CONTROL = "restart control"  # the restart at the end, and its probes
    STOPPING = "stopping"


class Progress(NamedTuple):
    """What the live view and the status lines show; sent to `on_progress` about twice a second."""

    run_dir: str
    elapsed_s: float
    remaining_s: float
    num_calls: int
    num_failed: int  # error or refused
    num_in_flight: int
    live_tps: float  # generated tokens/s the client saw over the last 30 s
    probes: tuple[ProbeResult, ...]  # the main engine's last few
    engine: str  # "up (life 0, pid 123, age 42 s)", "restarting", ...
    phase: SoakPhase
    last_cycle: Cycle | None = None  # the last probe pair
    num_engine_restarts: int = 0  # crashes and deliberate restarts, this segment
    control: str = "off"  # "twin (life 1, pid 456, age 30 s)", "off (why)"


class Watched(Protocol):
    """What the view reads of a running soak (soak.run.Soak)."""

    run_dir: Path
    phase: SoakPhase
    clock: ServingClock
    recorder: Recorder | None  # once the run directory is open
    session: Session | None  # once the engine is up


class LiveView:
    """What a watcher of a running soak is shown, and when: its Progress, built about twice a
    second and handed to `on_progress`, which draws it (the CLI: library code never prints).
    Without `on_progress` nothing is built; a view that fails is logged and the soak goes on."""

    def __init__(self, soak: Watched, on_progress: Callable[[Progress], None] | None = None) -> None:
        self.soak = soak
        self.on_progress = on_progress

    async def run(self) -> None:
        while True:
            self.show()
            await asyncio.sleep(REFRESH_S)

    def show(self) -> None:
        if self.on_progress is None:
            return
        try:
            self.on_progress(self.progress())
        except Exception:  # noqa: BLE001 - a view must never stop the soak
            logger.exception("live view failed")

    def progress(self) -> Progress:
        """The soak's progress now, from its recorder and session (None until the engine is up)."""
        now = time.time()
        s, rec = self.soak.session, self.soak.recorder
        num_calls, num_failed, live_tps = (
            (rec.num_calls, rec.num_failed, rec.recent.rate(now)) if rec is not None else (0, 0, 0.0)
        )
        recent = tuple(s.cycles.recent) if s is not None else ()
        return Progress(
            run_dir=str(self.soak.run_dir),
            elapsed_s=self.soak.clock.elapsed_s(now),
            remaining_s=self.soak.clock.remaining_s(now),
            num_calls=num_calls,
            num_failed=num_failed,
            num_in_flight=s.replayer.num_in_flight if s is not None else 0,
            live_tps=live_tps,
            probes=tuple(taken.result for c in recent if (taken := c.get(MAIN)) is not None),
            engine=s.main.describe(now) if s is not None else "starting",
            phase=self.soak.phase,
            last_cycle=recent[-1] if recent else None,
            num_engine_restarts=s.main.num_crashes + s.main.num_restarts if s is not None else 0,
            control=s.control.describe(now) if s is not None else "off",
        )


def render(p: Progress, verdict: str | None = None) -> Table:
    table = Table(title=f"soak → {p.run_dir}", show_header=False, expand=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("phase", p.phase)
    table.add_row("elapsed / remaining", f"{hms(p.elapsed_s)} / {hms(p.remaining_s)}")
    table.add_row("calls", f"{p.num_calls} done, {p.num_failed} failing, {p.num_in_flight} in flight")
    table.add_row("live decode", f"{p.live_tps:.1f} tok/s (client, last 30 s)")
    probes = ", ".join(f"{r.decode_tps:.1f}" if r.decode_tps else r.status for r in p.probes) or "none yet"
    table.add_row("probes (tok/s)", probes)
    table.add_row("last probe pair", pair_text(p.last_cycle))
    table.add_row("verdict so far", (verdict or "no probe cycle yet").removeprefix("verdict so far:").strip())
    table.add_row("engine", p.engine)
    table.add_row("control", p.control)
    return table


def status_line(p: Progress) -> str:
    """`[0:12:00] 123 calls, 2 failed; live 41.3 tok/s; last probes main 61.2 / control 60.8 tok/s;
    engine restarts 0; replay`"""
    return (
        f"[{hms(p.elapsed_s)}] {p.num_calls} calls, {p.num_failed} failed, {p.num_in_flight} in flight; "
        f"live {p.live_tps:.1f} tok/s; last probes {pair_text(p.last_cycle)}; "
        f"engine restarts {p.num_engine_restarts}; {p.phase}"
    )


def cycle_line(rows: list[ProbeRow], p: Progress) -> str:
    """`[0:12:05] probe cycle 7 (periodic): main 61.2 / control 60.8 tok/s`"""
    by_role = {r.get("role"): r for r in rows}
    first = rows[0] if rows else {}
    parts = [_tps_text(role, by_role.get(role)) for role in (MAIN, CONTROL)]
    return f"[{hms(p.elapsed_s)}] probe cycle {first.get('cycle')} ({first.get('reason')}): {' / '.join(parts)} tok/s"


def pair_text(cycle: Cycle | None) -> str:
    """`main 61.2 / control 60.8 tok/s`; a failed probe shows its status, a missing control `off`."""
    if cycle is None:
        return "none yet"
    parts = []
    for role in (MAIN, CONTROL):
        taken = cycle.get(role)
        parts.append(
            _tps_text(
                role, None if taken is None else {"decode_tps": taken.result.decode_tps, "status": taken.result.status}
            )
        )
    return " / ".join(parts) + f" tok/s (cycle {cycle.number})"


def _tps_text(role: str, row: ProbeRow | None) -> str:
    if row is None:
        return f"{role} off"
    tps = row.get("decode_tps")
    shown = f"{tps:.1f}" if tps else str(row.get("status"))
    if tps and row.get("status") not in (None, "ok"):
        shown += f" ({row['status']})"
    return f"{role} {shown}"


def hms(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
