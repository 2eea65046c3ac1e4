"""The soak: one run directory, one target and its control, the replayer, probe cycles,
samplers and the flusher.

    soak = Soak(config, run_dir)            # or Soak.resume(run_dir)
    status = asyncio.run(soak.run())        # completed, interrupted (stop()) or crashed

Tasks that run side by side: the replayer (the calls), the schedule (soak.schedule: probe
cycles, deliberate restarts, profiles), the monitor (engine exits, the live view), the control's
keeper, the sampler and the flusher. An engine that dies is recorded (exit code, log tail), started again,
and the soak goes on; the calls it was serving are recorded as errors.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx

from replay import Call, MaterializeConfig, Materializer, Prompt, read_trace
from replay.materialize import shared_block_ids
from rundir import schema
from rundir.manifest import RunManifest
from rundir.writer import RunStore
from soak import affinity as cpu_affinity
from soak.client import CallResult, Client, list_models
from soak.config import SoakConfig
from soak.control import ControlEngine
from soak.cycle import ProbeCycles
from soak.errors import SoakError
from soak.heap import give_back_freed_memory
from soak.lifecycle import MainEngine
from soak.live_view import Progress, progress
from soak.manifest import describe_engine, iso, new_manifest, resumed_manifest
from soak.probes import Prober
from soak.profiler import Profiler, Profiles
from soak.recorder import Recorder
from soak.replayer import Position, Replayer, sessions_of
from soak.resume import START, config_to_resume, resume_point
from soak.schedule import Schedule
from soak.targets import BuiltinTarget, Target, make_target
from soak.watch import EngineWatch

logger = logging.getLogger(__name__)


class RunStatus(str, enum.Enum):
    """How a soak ended; equal to its manifest string ("completed" == RunStatus.COMPLETED)."""

    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # stop() (Ctrl-C, SIGTERM)
    CRASHED = "crashed"

    def __str__(self) -> str:
        return self.value


@dataclass
class Session:
    """Everything a running soak works with, built complete once the engine is up."""

    target: Target
    main: MainEngine
    control: ControlEngine
    materializer: Materializer
    profiles: Profiles
    replayer: Replayer
    cycles: ProbeCycles
    schedule: Schedule
    watch: EngineWatch


class Soak:
    def __init__(
        self,
        config: SoakConfig,
        run_dir: Path,
        command: list[str] | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        resume: bool = False,
        on_probe_cycle: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.command = command or sys.argv
        self.on_progress = on_progress
        self.on_probe_cycle = on_probe_cycle  # the probes rows of each cycle, as written
        self.resuming = resume
        self.trace = read_trace(config.trace)  # a malformed trace fails here, before anything is written
        if not self.trace.calls:
            raise SoakError(f"{config.trace}: expected at least one call after the header, found none")
        self.store: RunStore | None = None
        self.recorder: Recorder | None = None
        self.session: Session | None = None
        self._stop = asyncio.Event()
        self._decided = asyncio.Event()  # --until-decided: the running verdict is decided, end the replay
        self._phase = "starting"
        self._status: RunStatus | None = None
        self._elapsed_before = 0.0
        self._segment_start = time.time()
        self._deadline = self._segment_start + config.duration_s

    # What start() builds, for the code that runs after it (a call before start() is a bug).
    @property
    def _store(self) -> RunStore:
        assert self.store is not None
        return self.store

    @property
    def _recorder(self) -> Recorder:
        assert self.recorder is not None
        return self.recorder

    @property
    def _session(self) -> Session:
        assert self.session is not None
        return self.session

    @classmethod
    def resume(
        cls, run_dir: Path, api_key: str | None = None, on_progress: Callable[[Progress], None] | None = None
    ) -> Soak:
        return cls(config_to_resume(run_dir, api_key), run_dir, on_progress=on_progress, resume=True)

    def stop(self) -> None:
        """Stop cleanly (Ctrl-C): status interrupted."""
        self._stop.set()

    def decided(self, verdict: str, cycle: int | None, line: str, **details: Any) -> None:
        """The running verdict (computed by the caller, which reads each probe cycle's rows) is
        decided: recorded once, as a `decided` event and the manifest's `decided`; with
        `until_decided` the replay ends now and the run goes on to its restart control (no end
        cycle: the look that decided was the aged engine's last)."""
        if self.store is None or self.manifest.decided is not None:
            return
        elapsed = round(self._elapsed(time.time()), 3)
        self.manifest.decided = {"verdict": verdict, "cycle": cycle, "elapsed_s": elapsed, "line": line, **details}
        self.store.event("decided", verdict=verdict, cycle=cycle, elapsed_s=elapsed, line=line)
        if self.config.until_decided and self._phase == "replay":
            self._decided.set()

    async def run(self) -> RunStatus:
        cfg = self.config
        if not self.resuming and (self.run_dir / schema.MANIFEST).exists():
            raise SoakError(f"{self.run_dir}: a run is already there; `soak resume {self.run_dir}` continues it")
        self.store = RunStore(self.run_dir)
        self.manifest = self._manifest()
        at = resume_point(self.run_dir) if self.resuming else START
        self.recorder = Recorder(self.store, num_calls=at.num_calls)
        if self.resuming:
            self.store.event(
                "resume",
                run_id=self.manifest.run_id,
                loop=at.position.loop,
                sessions_in_progress=len(at.position.next_turn),
                elapsed_s=self._elapsed_before,
            )
        else:
            self.store.event("start", run_id=self.manifest.run_id)
            for fault in cfg.engine_options.engine.get("faults", ()):  # switched on in the engine from its start
                self.store.event("fault_on", fault=fault)
        affinity = cpu_affinity.plan(cfg.affinity, starts_engines=cfg.is_builtin)
        self.manifest.affinity = affinity.to_json()
        cpus_before = cpu_affinity.pin_driver(affinity)
        # The duration is serving time: it starts with the replay, once the engines are up and the
        # start probe cycle is done (_run); until then nothing of it is spent.
        self._segment_start = float("inf")
        self._deadline = time.time() + max(0.0, cfg.duration_s - self._elapsed_before)
        limits = httpx.Limits(max_connections=cfg.concurrency + 16, max_keepalive_connections=cfg.concurrency + 16)
        status = RunStatus.CRASHED
        try:
            async with httpx.AsyncClient(limits=limits, timeout=30.0) as http:
                target = make_target(cfg, http, self.store.event, self.run_dir, affinity.engine, at.engine_life)
                control = ControlEngine(cfg, http, self.run_dir, self.store.event, affinity.engine, at.control_life)
                self.manifest.control = control.to_json()
                try:
                    session = await self._open(http, target, control, at.next_cycle)
                    status = await self._run(session, at.position)
                except _Interrupted:
                    status = RunStatus.INTERRUPTED
                finally:
                    self._phase = "stopping"
                    await target.stop()
                    await control.stop()
        except BaseException:
            self._finish(RunStatus.CRASHED)
            raise
        finally:
            cpu_affinity.restore(cpus_before)
        self._finish(status)
        return status

    # --- the run ---------------------------------------------------------------------------------

    async def _unless_stopped(self, coro) -> Any:
        """Await `coro`, but give up on it at once when the soak is stopped (Ctrl-C during a long
        engine start or probe)."""
        task = asyncio.ensure_future(coro)
        stop = asyncio.ensure_future(self._stop.wait())
        done, _ = await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise _Interrupted()

    async def _open(self, http: httpx.AsyncClient, target: Target, control: ControlEngine, first_cycle: int) -> Session:
        """Start the engine and its control; build everything the run works with."""
        cfg = self.config
        await self._unless_stopped(target.start())
        model = cfg.model
        if model is None:
            try:
                models = await list_models(http, target.url, cfg.api_key)
                model = models[0] if models else None
            except (httpx.HTTPError, ValueError):
                model = None
        client = Client(http, target.url, cfg.resolved_api, model, cfg.api_key, cfg.request_timeout_s)
        mconf = MaterializeConfig(
            block_size=self.trace.header.block_size,
            scale=cfg.scale,
            max_context=cfg.max_context,
            over_limit=cfg.over_limit,
            mode="tokens" if cfg.resolved_api == "completions" else "text",
        )
        materializer = Materializer(mconf, shared_block_ids(self.trace.calls))
        replayer = Replayer(sessions_of(self.trace), materializer, self._send, cfg.concurrency, cfg.speed)
        main = MainEngine(target, client, replayer.gate, replayer.idle, cfg.probe_wait_s, self._store.event)
        prober = Prober(mconf, cfg.probe_input_tokens, cfg.probe_output_tokens)
        cycles = ProbeCycles(
            prober,
            main,
            control,
            replayer.gate,
            replayer.idle,
            cast(BuiltinTarget, target).num_running if target.is_builtin else None,
            cfg.probe_wait_s,
            first_cycle,
        )
        watch = EngineWatch(target, self.run_dir, cfg.engine_log, control_pid=lambda: control.pid)
        profiler = Profiler(self.run_dir / schema.PROFILES, cfg.profile_seconds, cfg.profiles)
        profiles = Profiles(profiler, self.run_dir, self._store.event, cfg.profile_drop)
        schedule = Schedule(cfg, cycles, main, profiles, self._store, self._recorder, self._probe_cycle_rows)
        self.session = Session(target, main, control, materializer, profiles, replayer, cycles, schedule, watch)
        self.manifest.steps_source = watch.steps_source
        self.manifest.model = model
        self.manifest.engine, engine_config = await describe_engine(target, cfg)
        if target.is_builtin:
            self.manifest.configs["engine"] = engine_config
        await self._unless_stopped(control.start(target.pid, model))
        self.manifest.control = control.to_json()
        self._store.write_manifest(self.manifest)
        return self.session

    async def _run(self, s: Session, position: Position) -> RunStatus:
        cfg = self.config
        background = [
            asyncio.create_task(coro) for coro in (self._flusher(), self._sampler(), self._monitor(), s.control.keep())
        ]
        try:
            self._phase = "start probe"
            await self._unless_stopped(s.schedule.cycle("start"))
            s.schedule.profile("start")
            if cfg.baseline_cycles and not self.resuming:
                self._phase = "baseline"
                await self._unless_stopped(s.schedule.baseline())
            self._phase = "replay"
            self._segment_start = time.time()
            self._deadline = deadline = self._segment_start + max(0.0, cfg.duration_s - self._elapsed_before)
            replay = asyncio.create_task(s.replayer.run(deadline, position))
            scheduler_done = asyncio.Event()
            scheduler = asyncio.create_task(s.schedule.run(deadline, scheduler_done))
            stop = asyncio.create_task(self._stop.wait())
            decided = asyncio.create_task(self._decided.wait())
            drain_s = min(60.0, max(5.0, 0.1 * cfg.duration_s))
            done, _ = await asyncio.wait(
                {replay, stop, decided},
                return_when=asyncio.FIRST_COMPLETED,
                timeout=max(0.0, deadline - time.time()) + drain_s,
            )
            if decided in done and not done & {replay, stop}:  # --until-decided: end as at the deadline
                s.replayer.end_now()
                done, _ = await asyncio.wait({replay, stop}, return_when=asyncio.FIRST_COMPLETED, timeout=drain_s)
            decided.cancel()
            # A probe cycle (or scheduled restart) in flight finishes and is recorded: cancelled, it
            # would have taken its cycle number and left no rows. An interrupt does not wait.
            scheduler_done.set()
            if stop in done:
                scheduler.cancel()
            await asyncio.gather(asyncio.wait_for(scheduler, timeout=cfg.probe_wait_s + 60.0), return_exceptions=True)
            if stop in done:
                await self._cancel(replay)
                return RunStatus.INTERRUPTED
            stop.cancel()
            if replay not in done:  # calls still running past the deadline and the grace period
                await self._cancel(replay)
            elif (failed := replay.exception()) is not None:
                raise failed
            if not self._decided.is_set():  # a decided run's last look was the one that decided
                self._phase = "end probes"
                await self._unless_stopped(s.schedule.cycle("end"))
            if cfg.restart_at_end and s.target.can_restart:
                self._phase = "restart control"
                await self._unless_stopped(s.schedule.restart_control())
            return RunStatus.INTERRUPTED if self._stop.is_set() else RunStatus.COMPLETED
        finally:
            if not self._stop.is_set():  # let profiles being taken finish
                await s.profiles.wait()
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await s.profiles.cancel()
            await self._sample_once()

    async def _cancel(self, replay: asyncio.Task) -> None:
        await self._session.replayer.cancel()
        replay.cancel()
        await asyncio.gather(replay, return_exceptions=True)

    # --- calls -----------------------------------------------------------------------------------

    async def _send(self, sid: str, call: Call, prompt: Prompt) -> None:
        main = self._session.main
        payload = self._payload(main.client, prompt)
        life, age = main.target.life, main.target.age()
        assert life is not None  # calls go out once the engine is up
        request_id = f"{sid}#{call.turn}"
        t_send = time.time()
        try:
            result = await main.client.call(payload, prompt.max_output_tokens, temperature=self.config.temperature)
        except asyncio.CancelledError:
            self._recorder.call(
                request_id, sid, call, prompt, CallResult.aborted(t_send, "the soak stopped during the call"), life, age
            )
            raise
        self._recorder.call(request_id, sid, call, prompt, result, life, age)

    @staticmethod
    def _payload(client: Client, prompt: Prompt) -> Any:
        if client.api == "chat":
            return prompt.messages
        if prompt.token_ids is not None:
            return prompt.token_ids
        assert prompt.messages is not None  # a prompt holds its tokens or its text
        return prompt.messages[0]["content"]

    def _probe_cycle_rows(self, rows: list[dict[str, Any]]) -> None:
        if self.on_probe_cycle is not None:
            self.on_probe_cycle(rows)

    # --- engine exits and the live view ------------------------------------------------------------

    async def _monitor(self) -> None:
        main = self._session.main
        while True:
            exit_info = main.target.check_exit()
            if exit_info is not None:
                await main.after_crash(exit_info)
            if self.on_progress is not None:
                try:
                    self.on_progress(self.progress())
                except Exception:  # noqa: BLE001 - a view must never stop the soak
                    logger.exception("live view failed")
            await asyncio.sleep(0.5)

    def progress(self) -> Progress:
        now = time.time()
        remaining_s = max(0.0, self._deadline - now)
        return progress(
            str(self.run_dir), self._elapsed(now), remaining_s, self._phase, self.recorder, self.session, now
        )

    # --- sampling and flushing -----------------------------------------------------------------------

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.config.sample_every_s)
            await self._sample_once()

    async def _sample_once(self) -> None:
        s = self.session
        if s is None or not s.main.ready.is_set():  # not while it is being started again
            return
        steps, snapshot = await s.watch.sample()
        for row in steps:
            self._store.add("steps", row)
        if snapshot is not None:
            self._store.add("snapshots", snapshot)

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_every_s)
            self._store.flush()
            self._write_manifest()
            give_back_freed_memory()  # what the flush's tables took (soak/heap.py)

    def _finish(self, status: RunStatus) -> None:
        if self._status is not None or self.store is None:
            return
        self._status = status
        s = self.session
        reason = (
            ("decided" if self._decided.is_set() else "duration") if status is RunStatus.COMPLETED else status.value
        )
        self.store.event(
            "stop", status=status.value, reason=reason, engine_life=s.target.life if s is not None else None
        )
        self.manifest.status = status.value
        self.manifest.stop_reason = reason
        self.manifest.ended_at = iso(time.time())
        if s is not None:
            self.manifest.materialized = s.materializer.counts()
            if s.watch.num_missed_steps is not None:
                self.manifest.steps_missed = s.watch.num_missed_steps
        self.store.flush()
        self._write_manifest()
        self.store.close()

    def _write_manifest(self) -> None:
        self.manifest.elapsed_s = round(self._elapsed(time.time()), 3)
        self.manifest.num_requests = self.recorder.num_calls if self.recorder is not None else 0
        if self.session is not None:
            self.manifest.control = self.session.control.to_json()
        self._store.write_manifest(self.manifest)

    def _elapsed(self, now: float) -> float:
        return self._elapsed_before + max(0.0, now - self._segment_start)

    # --- manifest and target -------------------------------------------------------------------------

    def _manifest(self) -> RunManifest:
        if self.resuming:
            manifest = resumed_manifest(self.run_dir, self.command)
            self._elapsed_before = float(manifest.elapsed_s or 0.0)
            return manifest
        self._elapsed_before = 0.0
        return new_manifest(self.config, self.trace, self.run_dir, self.command)


class _Interrupted(Exception):
    """The soak was stopped while it waited for something other than the replay."""
