"""The soak: one run directory, one target and its control, the replayer, probe cycles,
samplers and the flusher.

    soak = Soak(config, run_dir)            # or Soak.resume(run_dir)
    status = asyncio.run(soak.run())        # completed, interrupted (stop()) or crashed

Tasks that run side by side: the replayer (the calls), the schedule (soak.schedule: probe
cycles, deliberate restarts, profiles), the main engine's and the control's keepers (engine
exits), the live view, the sampler and the flusher. An engine that dies is recorded (exit code,
log tail), started again, and the soak goes on; the calls it was serving are recorded as errors.
The manifest is soak.manifest.ManifestBook's; serving time, soak.clock.ServingClock's. After
every probe cycle the soak asks its judge for the running verdict (soak.judge; diagnostics' unless
it is handed another): the first decided look is recorded, and with `until_decided` ends the replay.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx

from replay import Call, MaterializeConfig, Materializer, Prompt, read_trace
from replay.materialize import shared_block_ids
from rundir import schema
from rundir.manifest import RunManifest
from rundir.rows import ProbeRow
from rundir.schema import RunStatus, StopReason
from rundir.writer import RunStore
from soak import affinity as cpu_affinity
from soak.client import CallResult, Client, list_models
from soak.clock import ServingClock
from soak.config import SoakConfig
from soak.control import ControlEngine
from soak.cycle import ProbeCycles
from soak.errors import SoakError
from soak.heap import give_back_freed_memory
from soak.judge import Judge, RunningVerdict, default_judge
from soak.lifecycle import MainEngine
from soak.live_view import LiveView, Progress, SoakPhase
from soak.manifest import ManifestBook
from soak.probes import Prober
from soak.profiler import Profiler, Profiles
from soak.recorder import Recorder
from soak.replayer import Position, Replayer, sessions_of
from soak.resume import START, config_to_resume, resume_point
from soak.schedule import Schedule
from soak.targets import BuiltinTarget, Target, make_target
from soak.watch import EngineWatch

_T = TypeVar("_T")


# The soak's phases before the replay's first call.
BEFORE_TRAFFIC = (SoakPhase.STARTING, SoakPhase.START_PROBE, SoakPhase.BASELINE)


@dataclass(kw_only=True)
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
        on_probe_cycle: Callable[[list[ProbeRow]], object] | None = None,  # its return is ignored
        judge: Judge | None = None,  # the running verdict's (soak.judge); None: diagnostics'
    ) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.command = command or sys.argv
        self.view = LiveView(self, on_progress)
        self.on_probe_cycle = on_probe_cycle  # the probes rows of each cycle, as written
        self.resuming: bool = resume
        self.trace = read_trace(config.trace)  # a malformed trace fails here, before anything is written
        if not self.trace.calls:
            raise SoakError(f"{config.trace}: expected at least one call after the header, found none")
        self.store: RunStore | None = None
        self.book: ManifestBook | None = None
        self.recorder: Recorder | None = None
        self.session: Session | None = None
        self.clock = ServingClock(config.duration_s)  # a resumed run's, once its manifest is read
        self.phase = SoakPhase.STARTING  # what the soak does now (the live view shows it)
        self._stop = asyncio.Event()
        self._decided = asyncio.Event()  # until_decided: the running verdict is decided, end the replay
        self._status: RunStatus | None = None
        self._gave_up: BaseException | None = None  # why the main engine's keeper gave up, if it did
        # Asked after every probe cycle (a soak with no probes has none): decides until_decided.
        self.verdict: RunningVerdict | None = None
        if config.probes:
            self.verdict = RunningVerdict(self, judge if judge is not None else default_judge(config))

    # What start() builds, for the code that runs after it (a call before start() is a bug).
    @property
    def _store(self) -> RunStore:
        assert self.store is not None
        return self.store

    @property
    def _book(self) -> ManifestBook:
        assert self.book is not None
        return self.book

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

    @property
    def manifest(self) -> RunManifest:
        return self._book.manifest

    @property
    def on_progress(self) -> Callable[[Progress], None] | None:
        """Handed the soak's Progress about twice a second (the live view's)."""
        return self.view.on_progress

    @on_progress.setter
    def on_progress(self, on_progress: Callable[[Progress], None] | None) -> None:
        self.view.on_progress = on_progress

    def progress(self) -> Progress:
        return self.view.progress()

    @property
    def verdict_line(self) -> str | None:
        """The running verdict after the last probe cycle, as printed; None before the first."""
        return self.verdict.line if self.verdict is not None else None

    def stop(self) -> None:
        """Stop cleanly (Ctrl-C): status interrupted."""
        self._stop.set()

    def decided(self, verdict: str, cycle: int | None, line: str, **details: Any) -> None:
        """The running verdict (soak.judge.RunningVerdict, after each probe cycle) is decided:
        recorded once, as a `decided` event and the manifest's `decided`; with
        `until_decided` the replay ends now and the run goes on to its restart control (no end
        cycle: the look that decided was the aged engine's last). A look before the replay (the
        start or baseline cycles) judges engines that served nothing yet: not recorded; the first
        decided look in the replay is."""
        if self.book is None or self.phase in BEFORE_TRAFFIC:
            return
        elapsed = round(self.clock.elapsed_s(time.time()), 3)
        newly = self.book.decide(verdict, cycle, elapsed, line, **details)
        if newly and self.config.until_decided and self.phase == SoakPhase.REPLAY:
            self._decided.set()

    def verify_control(self) -> bool:
        """Restart the control between cycles, so that its youth can be checked across the restart
        (soak.control.ControlEngine.verify). False where there is no control that can be restarted."""
        return self.session is not None and self.session.control.verify()

    async def run(self) -> RunStatus:
        cfg = self.config
        if not self.resuming and (self.run_dir / schema.MANIFEST).exists():
            raise SoakError(f"{self.run_dir}: a run is already there; `soak resume {self.run_dir}` continues it")
        self.store = RunStore(self.run_dir)
        self.book = ManifestBook.open(self.store, cfg, self.trace, self.run_dir, self.command, self.resuming)
        at = resume_point(self.run_dir) if self.resuming else START
        self.recorder = Recorder(self.store, num_calls=at.num_calls)
        if self.resuming:
            self.store.event(
                "resume",
                run_id=self.manifest.run_id,
                loop=at.position.loop,
                sessions_in_progress=len(at.position.next_turn),
                elapsed_s=self.book.elapsed_before,
            )
        else:
            self.store.event("start", run_id=self.manifest.run_id)
            for fault in cfg.engine_options.engine.get("faults", ()):  # switched on in the engine from its start
                self.store.event("fault_on", fault=fault)
        affinity = cpu_affinity.plan(cfg.affinity, starts_engines=cfg.is_builtin)
        self.book.pinned(affinity)
        cpus_before = cpu_affinity.pin_driver(affinity)
        # The duration is serving time: it starts with the replay (_run), once the engines are up
        # and the start probe cycle is done.
        self.clock = ServingClock(cfg.duration_s, self.book.elapsed_before)
        limits = httpx.Limits(max_connections=cfg.concurrency + 16, max_keepalive_connections=cfg.concurrency + 16)
        status = RunStatus.CRASHED
        try:
            async with httpx.AsyncClient(limits=limits, timeout=30.0) as http:
                target = make_target(cfg, http, self.store.event, self.run_dir, affinity.engine, at.engine_life)
                control = ControlEngine(cfg, http, self.run_dir, self.store.event, affinity.engine, at.control_life)
                self.book.follow_control(control)
                try:
                    session = await self._open(http, target, control, at.next_cycle)
                    status = await self._run(session, at.position)
                except _Interrupted:
                    status = RunStatus.INTERRUPTED
                finally:
                    self.phase = SoakPhase.STOPPING
                    await target.stop()
                    await control.stop()
                if self._gave_up is not None:  # stopped because the engine could not be kept alive
                    raise self._gave_up
        except BaseException:
            self._finish(RunStatus.CRASHED)
            raise
        finally:
            cpu_affinity.restore(cpus_before)
        self._finish(status)
        return status

    # --- the run ---------------------------------------------------------------------------------

    async def _unless_stopped(self, coro: Awaitable[_T]) -> _T:
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
        prober = Prober(mconf, cfg.probe_input_tokens, cfg.probing.probe_output_tokens)
        cycles = ProbeCycles(
            prober,
            main,
            control,
            replayer.gate,
            replayer.idle,
            engine_busy=cast(BuiltinTarget, target).num_running if target.is_builtin else None,
            wait_s=cfg.probe_wait_s,
            first_number=first_cycle,
        )
        watch = EngineWatch(target, self.run_dir, cfg.engine_log, control_pid=lambda: control.pid)
        profiler = Profiler(self.run_dir / schema.PROFILES, cfg.profile_seconds, cfg.profiles)
        profiles = Profiles(profiler, self.run_dir, self._store.event, cfg.profile_drop)
        schedule = Schedule(cfg, cycles, main, profiles, self._store, self._recorder, self._probe_cycle_rows)
        self.session = Session(
            target=target,
            main=main,
            control=control,
            materializer=materializer,
            profiles=profiles,
            replayer=replayer,
            cycles=cycles,
            schedule=schedule,
            watch=watch,
        )
        await self._book.engine_up(target, cfg, model, watch.steps_source)
        await self._unless_stopped(control.start(target.pid, model, target.identity))
        self._book.save()
        return self.session

    async def _run(self, s: Session, position: Position) -> RunStatus:
        cfg = self.config
        background = [
            asyncio.create_task(coro)
            for coro in (self._flusher(), self._sampler(), self._keep_main(s), s.control.keep(), self.view.run())
        ]
        try:
            if cfg.probes:
                self.phase = SoakPhase.START_PROBE
                await self._unless_stopped(s.schedule.cycle("start"))
            s.schedule.profile("start")
            if cfg.baseline_cycles and not self.resuming:
                self.phase = SoakPhase.BASELINE
                await self._unless_stopped(s.schedule.baseline())
            self.phase = SoakPhase.REPLAY
            deadline = self.clock.start()
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
            if cfg.probes and not self._decided.is_set():  # a decided run's last look was the one that decided
                self.phase = SoakPhase.END_PROBES
                await self._unless_stopped(s.schedule.cycle("end"))
            if cfg.probes and cfg.restart_at_end and s.target.can_restart:
                self.phase = SoakPhase.RESTART_CONTROL
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

    async def _keep_main(self, s: Session) -> None:
        """The main engine's keeper. When it gives up (more crashes than the soak allows, an engine
        that will not start again) the soak stops as on Ctrl-C, then ends crashed with its error:
        every row written so far is kept, and `soak resume` can go on."""
        try:
            await s.main.keep()
        except Exception as error:  # handed to run(), which raises it once the soak has stopped
            self._gave_up = error
            self._stop.set()

    async def _cancel(self, replay: asyncio.Task[None]) -> None:
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

    def _probe_cycle_rows(self, rows: list[ProbeRow]) -> None:
        if self.verdict is not None:
            self.verdict.add(rows)
        if self.on_probe_cycle is not None:
            self.on_probe_cycle(rows)

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
            self._store.add("snapshots", snapshot.row, snapshot.extra)

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
        if status is RunStatus.COMPLETED:
            reason = StopReason.DECIDED if self._decided.is_set() else StopReason.DURATION
        else:  # interrupted or crashed: the status says why
            reason = StopReason(status.value)
        self.store.event("stop", status=status, reason=reason, engine_life=s.target.life if s is not None else None)
        self._book.ended(
            status,
            reason,
            materialized=s.materializer.counts() if s is not None else None,
            steps_missed=s.watch.num_missed_steps if s is not None else None,
        )
        self.store.flush()
        self._write_manifest()
        self.store.close()

    def _write_manifest(self) -> None:
        num_requests = self.recorder.num_calls if self.recorder is not None else 0
        self._book.write(round(self.clock.elapsed_s(time.time()), 3), num_requests)


class _Interrupted(Exception):
    """The soak was stopped while it waited for something other than the replay."""
