"""The control engine: a young copy of the soaked engine, probed beside it every cycle.

For the built-in engine it is a twin: a second `soak serve` with the same options (faults
included: the same engine, only young; no warm-up, `twin_options`), started beside the main one on the same CPUs, given no
replay traffic, and restarted every `twin_restart_every_s` and after every
`control_restart_after` probes it answered, so it stays young: a fault driven by requests served
reaches a same-build control too, only later, and a control that ages hides the soaked engine's
loss (diagnostics.evidence.youth measures whether it stayed young). For a URL target it is
`--control-target`, a second instance of the same server, restarted with `--control-restart-cmd`
on the same schedule (never without one, with a warning). Both see the same host: when
both probes move, the host moved; when only the main one does, the engine aged.

Restarts (scheduled, or after a crash) hold the lock a probe cycle holds, so they happen between
cycles, never during one. Its events are its own (`control_start`, `control_restart`,
`control_exit`, `control_off`), never `engine_start`: the soaked engine's lives are the main
one's alone. A control that cannot start is turned off for the rest of the run with a
`control_off` event; the soak goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx

from engine.server.cli import ServeOptions
from ground import Label
from rundir import schema
from soak.client import Client
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.identify import EngineIdentity, differences
from soak.targets import BuiltinTarget, EventSink, Target, UrlTarget

logger = logging.getLogger(__name__)

TWIN_MEMORY_MARGIN = 4 * 2**30  # a twin needs the engine's memory again, and leaves this much to spare
MAX_CONTROL_CRASHES = 20  # crashes in one run before the control is turned off
POLL_S = 0.5
# Probes a control's life answers before a restart asked to verify its youth: a restart judges the
# control's age only after a life this long (diagnostics.evidence.youth.MIN_OLD_LIFE): a younger one shows
# little of it and would dilute what the longer lives show.
VERIFY_AFTER_PROBES = 8


class ControlRestart(Label):
    """Why the control was restarted (its `control_restart` events' reason)."""

    SCHEDULED = "scheduled"  # --twin-restart-every seconds
    PROBES = "probes"  # --control-restart-after probes answered in one life
    VERIFY = "verify"  # asked between cycles, so that a restart can show whether it stayed young


class ControlEngine:
    def __init__(
        self,
        config: SoakConfig,
        http: httpx.AsyncClient,
        run_dir: Path,
        on_event: EventSink,
        cpus: tuple[int, ...] | None = None,
        last_life: int | None = None,
    ) -> None:
        self.config = config
        self.http = http
        self.on_event = on_event
        self.target: Target | None = None
        self.why_off: str | None = None
        events = _as_control_events(on_event)
        if config.is_builtin and config.twin is not False and config.probes:
            self.kind: str | None = "twin"
            self.target = BuiltinTarget(
                http,
                events,
                Path(run_dir) / schema.CONTROL_LOG,
                twin_options(config.twin_engine_options),
                config.engine_start_timeout_s,
                cpus=cpus,
            )
        elif config.control_target is not None:
            self.kind = "url"
            self.target = UrlTarget(
                http,
                events,
                config.control_target,
                config.api_key,
                config.control_restart_cmd,
                config.engine_start_timeout_s,
            )
        else:
            self.kind = None
            self.why_off = "--no-twin" if config.is_builtin else "no --control-target"
        if self.target is not None:
            self.target.life = last_life  # a resumed run's control goes on counting its lives
        self.client: Client | None = None  # once started
        self.num_crashes = 0
        self.num_probes = 0  # probes answered in the current life (its restart schedule, with its age)
        self._started_wall: float | None = None  # when the current life started (its restart schedule)
        self._verify_asked = False  # a restart asked for between cycles (`verify`)
        self._held = False  # no restart but after a crash (`holding`: the restart control's cycles)
        self._main_identity: EngineIdentity | None = None  # what the soaked engine said of itself
        self._lock = asyncio.Lock()
        if self.kind == "url" and not self.can_restart:
            logger.warning(
                "--control-target without --control-restart-cmd: the control is never restarted, so "
                "whether it stays young is checked only within its one life and never verified; a fault "
                "driven by requests served reaches a "
                "same-build control too, and the paired control then hides it"
                + ("; --until-decided will not stop on 'no age'" if config.until_decided else "")
            )

    @property
    def _live(self) -> Target:
        """The control's target, once the control is on (every caller runs after __init__ made it)."""
        assert self.target is not None
        return self.target

    @property
    def enabled(self) -> bool:
        return self.why_off is None

    @property
    def can_restart(self) -> bool:
        return self.target is not None and self.target.can_restart

    @property
    def pid(self) -> int | None:
        return self.target.pid if self.enabled and self.target is not None else None

    async def start(self, main_pid: int | None, model: str | None, main_identity: EngineIdentity | None = None) -> None:
        """Start the control beside a running main engine (a twin only where memory allows); a URL
        control that says it is another engine than the soaked one is warned about."""
        self._main_identity = main_identity
        if not self.enabled:
            return
        if self.kind == "twin" and self.config.twin is None:
            short = _memory_short(main_pid)
            if short is not None:
                self._turn_off(short)
                return
        async with self._lock:
            if await self._start_or_off(first=True):
                self.client = Client(
                    self.http,
                    self._live.url,
                    self.config.resolved_api,
                    model,
                    self.config.api_key,
                    self.config.request_timeout_s,
                )
                differs = differences(main_identity, self._live.identity)
                if differs is not None:
                    logger.warning(
                        "the control says it is another engine than the soaked one (%s): its probes compare two "
                        "engines, not two ages of one",
                        differs,
                    )

    @asynccontextmanager
    async def probing(self) -> AsyncIterator[bool]:
        """Held by a probe cycle: no restart meanwhile. Yields whether the control can be probed
        (a control found dead is started again first)."""
        if not self.enabled:
            yield False
            return
        async with self._lock:
            await self._recover_if_dead()
            yield self.enabled and self.client is not None

    async def keep(self) -> None:
        """Runs beside the soak: a crashed control is started again, a due one restarted."""
        while self.enabled:
            await asyncio.sleep(POLL_S)
            if self._lock.locked():
                continue
            async with self._lock:
                if not await self._recover_if_dead() and (reason := self._restart_due()) is not None:
                    await self._restart(reason)

    def answered_probe(self) -> None:
        """A probe went to the control: one more request served in this life."""
        self.num_probes += 1

    def verify(self) -> bool:
        """Restart the control before the next cycle (`keep` does it between cycles), so that the
        cycles across the restart show whether it stayed young: a decided "no age" on pairs with a
        control never restarted has not seen it. Asked once its life answered VERIFY_AFTER_PROBES
        probes (until then, the next restart waits). False where the control is off or cannot be
        restarted."""
        if not (self.enabled and self.can_restart):
            return False
        if self.num_probes >= VERIFY_AFTER_PROBES:
            self._verify_asked = True
        return True

    @contextmanager
    def holding(self) -> Iterator[None]:
        """No restart of the control meanwhile, but after a crash: the restart control's cycles must
        pair the soaked engine, aged and fresh, with one control."""
        self._held = True
        try:
            yield
        finally:
            self._held = False

    async def stop(self) -> None:
        if self.target is not None:
            await self.target.stop()

    def describe(self, now: float | None = None) -> str:
        if not self.enabled or self.target is None:
            return f"off ({self.why_off})"
        age = self.target.age(now if now is not None else time.time())
        return f"{self.kind} (life {self.target.life}, pid {self.target.pid}" + (
            f", age {age:.0f} s)" if age is not None else ")"
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest's `control`."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "url": self.target.url if self.target is not None and self.target.url else None,
            "restart_every_s": self.config.twin_restart_every_s if self.can_restart else None,
            "restart_after_probes": self.config.control_restart_after if self.can_restart else None,
            "restart_cmd": self.config.control_restart_cmd,
            "enabled": self.enabled,
            "why_off": self.why_off,
        }
        if self.kind == "url" and not self.can_restart:
            out["never_restarted"] = "no --control-restart-cmd"
        identity = self.target.identity if self.kind == "url" and self.target is not None else None
        if identity is not None:
            out["engine"] = identity.to_json()
            differs = differences(self._main_identity, identity)
            if differs is not None:
                out["differs"] = differs
        return out

    # --- lives -------------------------------------------------------------------------------------

    def _restart_due(self) -> ControlRestart | None:
        """Why the control is to be restarted now (None: it is not): asked for, its probes, its age."""
        if not self.can_restart or self._started_wall is None or self._held:
            return None
        if self._verify_asked:
            return ControlRestart.VERIFY
        if self.num_probes >= self.config.control_restart_after:
            return ControlRestart.PROBES
        if time.time() - self._started_wall >= self.config.twin_restart_every_s:
            return ControlRestart.SCHEDULED
        return None

    async def _recover_if_dead(self) -> bool:
        """A control that died unasked: recorded and started again (off after too many). True when
        it had died. The caller holds the lock."""
        exit_info = self.target.check_exit() if self.enabled and self.target is not None else None
        if exit_info is None:
            return False
        self.num_crashes += 1
        self.on_event(
            "control_exit", exit_code=exit_info.exit_code, log_tail=exit_info.log_tail, control_life=self._live.life
        )
        logger.warning("control engine exited with code %s; starting it again", exit_info.exit_code)
        if self.num_crashes > MAX_CONTROL_CRASHES:
            self._turn_off(f"it died {self.num_crashes} times")
        else:
            await self._start_or_off(first=False)
        return True

    async def _restart(self, reason: str) -> None:
        try:
            await self._live.restart(reason)
        except SoakError as exc:
            await self._live.stop()
            self._turn_off(f"restarting it failed: {_first_line(exc)}")
            return
        self._started(first=False)

    async def _start_or_off(self, first: bool) -> bool:
        try:
            await self._live.start()
        except SoakError as exc:
            await self._live.stop()
            self._turn_off(f"it could not start: {_first_line(exc)}")
            return False
        self._started(first)
        return True

    def _started(self, first: bool) -> None:
        self._started_wall = time.time()
        self.num_probes = 0
        self._verify_asked = False
        if not first and self.client is not None:
            self.client.set_base_url(self._live.url)

    def _turn_off(self, why: str) -> None:
        self.why_off = why
        self.on_event("control_off", why=why)
        logger.warning("no control engine for the rest of the run: %s", why)


def twin_options(options: ServeOptions) -> ServeOptions:
    """The soaked engine's options for its twin, but no warm-up unless one was asked for: the twin
    is restarted every `--twin-restart-every` seconds, so its memory never gets old, and a warm-up
    of the default checkpoint (two full chunks) took 28-65 s of a core on this 2-core host at every
    restart, beside the soaked engine it is there to be compared with."""
    if "warmup_chunks" in options.server:
        return options
    return options.with_(server={"warmup_chunks": 0})


def _as_control_events(sink: EventSink) -> EventSink:
    """A target's own events, as the control's: its lives are not the soaked engine's."""
    names = {"engine_start": "control_start", "engine_restart": "control_restart"}

    def on_event(kind: str, **fields: Any) -> None:
        if kind not in names:
            logger.debug("control: %s not recorded", kind)
            return
        life = fields.pop("engine_life", None)
        sink(names[kind], control_life=life, **fields)

    return on_event


def _memory_short(main_pid: int | None) -> str | None:
    """Why a twin does not fit in memory now, or None when it does."""
    import psutil

    try:
        need = psutil.Process(main_pid).memory_info().rss if main_pid else 0
    except psutil.Error:
        need = 0
    available = psutil.virtual_memory().available
    if available >= need + TWIN_MEMORY_MARGIN:
        return None
    return (
        f"{available / 2**30:.1f} GiB of memory available; a twin needs the engine's {need / 2**30:.1f} GiB "
        f"and {TWIN_MEMORY_MARGIN / 2**30:.0f} GiB to spare (--twin starts one anyway)"
    )


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
