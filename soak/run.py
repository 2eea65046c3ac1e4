"""The soak: one run directory, one target, the replayer, probes, samplers and the flusher.

    soak = Soak(config, run_dir)            # or Soak.resume(run_dir)
    status = asyncio.run(soak.run())        # completed, interrupted (stop()) or crashed

Tasks that run side by side: the replayer (the calls), the scheduler (probes, deliberate
restarts, profiles), the monitor (engine exits, the live view), the sampler and the
flusher. An engine that dies is recorded (exit code, log tail), started again, and the soak
goes on; the calls it was serving are recorded as errors.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import httpx

from diagnostics import rundir_schema as schema
from replay import Call, MaterializeConfig, Materializer, Prompt, read_trace
from replay.materialize import shared_block_ids
from soak.client import CallResult, Client, list_models
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.probes import ProbeResult, Prober
from soak.profiler import Profiler
from soak.manifest import digest, iso, new_manifest, resumed_manifest
from soak.replayer import Position, Replayer, position_from, sessions_of
from soak.store import RunStore, read_manifest, read_rows
from soak.targets import BuiltinTarget, Target, UrlTarget
from soak.watch import EngineWatch
from tokdrift import __version__

logger = logging.getLogger(__name__)

MAX_ENGINE_RESTARTS = 20  # crashes in one run before the soak gives up


class Progress(NamedTuple):
    """What the live view shows; sent to `on_progress` about once a second."""

    run_dir: str
    elapsed_s: float
    remaining_s: float
    num_calls: int
    num_failed: int  # error or refused
    num_in_flight: int
    live_tps: float  # generated tokens/s the client saw over the last 30 s
    probes: tuple[ProbeResult, ...]  # the last few
    engine: str  # "up (life 0, pid 123, age 42 s)", "restarting", ...
    phase: str  # replay, end probes, stopping


class Soak:
    def __init__(self, config: SoakConfig, run_dir: Path, command: Optional[list[str]] = None,
                 on_progress: Optional[Callable[[Progress], None]] = None, resume: bool = False) -> None:
        self.config = config
        self.run_dir = Path(run_dir)
        self.command = command or sys.argv
        self.on_progress = on_progress
        self.resuming = resume
        self.trace = read_trace(config.trace)  # a malformed trace fails here, before anything is written
        if not self.trace.calls:
            raise SoakError(f"{config.trace}: expected at least one call after the header, found none")
        self._stop: Optional[asyncio.Event] = None
        self._profiled_drop: set[int] = set()  # engine lives already profiled for a probe drop
        self._profile_tasks: list[asyncio.Task] = []
        self._engine_ready: Optional[asyncio.Event] = None  # set while the engine is up
        self.watch: Optional[EngineWatch] = None
        self._warmed: set[int] = set()  # engine lives whose first probe was preceded by a warm-up
        self.num_calls = self.num_failed = 0
        self._recent_tokens: deque[tuple[float, int]] = deque()
        self._engine_state = "starting"
        self._phase = "starting"
        self._status: Optional[str] = None

    @classmethod
    def resume(cls, run_dir: Path, api_key: Optional[str] = None,
               on_progress: Optional[Callable[[Progress], None]] = None) -> "Soak":
        manifest = read_manifest(run_dir)
        if manifest.get("status") == "completed":
            raise SoakError(f"{run_dir}: the run is completed; nothing to resume")
        configs = manifest.get("configs") or {}
        if "soak" not in configs:
            raise SoakError(f"{run_dir}/{schema.MANIFEST}: expected configs.soak to resume from, found none")
        config = SoakConfig.from_json({**configs["soak"], **({"api_key": api_key} if api_key else {})})
        recorded = (manifest.get("trace") or {}).get("sha256")
        if not Path(config.trace).is_file():
            raise SoakError(f"{run_dir}: the run replays {config.trace}, which is no longer there")
        if recorded and digest(Path(config.trace)) != recorded:
            raise SoakError(f"{config.trace}: expected the trace the run started with (sha256 {recorded[:12]}…), "
                            f"found a different file; resuming would replay other calls")
        return cls(config, run_dir, on_progress=on_progress, resume=True)

    def stop(self) -> None:
        """Stop cleanly (Ctrl-C): status interrupted."""
        if self._stop is not None:
            self._stop.set()

    async def run(self) -> str:
        self._stop = asyncio.Event()
        self._engine_ready = asyncio.Event()
        cfg = self.config
        if not self.resuming and (self.run_dir / schema.MANIFEST).exists():
            raise SoakError(f"{self.run_dir}: a run is already there; `soak resume {self.run_dir}` continues it")
        self.store = RunStore(self.run_dir)
        self.manifest = self._manifest()
        self.store.write_manifest(self.manifest)
        position = Position(0, {})
        if self.resuming:
            rows = read_rows(self.run_dir, "requests", ("session", "turn", "status", "kind"))
            position = position_from(rows)
            self.num_calls = len(rows)
            self.store.event("resume", run_id=self.manifest["run_id"], loop=position.loop,
                             sessions_in_progress=len(position.next_turn), elapsed_s=self._elapsed_before)
        else:
            self.store.event("start", run_id=self.manifest["run_id"])
            for fault in cfg.extra.get("faults", ()):  # switched on in the engine from its start
                self.store.event("fault_on", fault=fault)
        self._segment_start = time.time()
        deadline = self._segment_start + max(0.0, cfg.duration_s - self._elapsed_before)
        self._deadline = deadline
        limits = httpx.Limits(max_connections=cfg.concurrency + 16, max_keepalive_connections=cfg.concurrency + 16)
        status = "crashed"
        try:
            async with httpx.AsyncClient(limits=limits, timeout=30.0) as http:
                self.target = self._make_target(http)
                try:
                    status = await self._run(http, deadline, position)
                except _Interrupted:
                    status = "interrupted"
                finally:
                    self._phase = "stopping"
                    await self.target.stop()
        except BaseException:
            self._finish("crashed")
            raise
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

    async def _run(self, http: httpx.AsyncClient, deadline: float, position: Position) -> str:
        cfg = self.config
        await self._unless_stopped(self.target.start())
        self._engine_state = "up"
        self._engine_ready.set()
        model = cfg.model
        if model is None:
            try:
                models = await list_models(http, self.target.url, cfg.api_key)
                model = models[0] if models else None
            except (httpx.HTTPError, ValueError):
                model = None
        self.client = Client(http, self.target.url, cfg.resolved_api, model, cfg.api_key, cfg.request_timeout_s)
        mode = "tokens" if cfg.resolved_api == "completions" else "text"
        mconf = MaterializeConfig(block_size=self.trace.header.block_size, scale=cfg.scale,
                                  max_context=cfg.max_context, over_limit=cfg.over_limit, mode=mode)
        self.materializer = Materializer(mconf, shared_block_ids(self.trace.calls))
        self.prober = Prober(self.client, mconf, cfg.probe_input_tokens, cfg.probe_output_tokens, cfg.probe_wait_s,
                             self._engine_running if self.target.is_builtin else None)
        self.profiler = Profiler(self.run_dir / schema.PROFILES, cfg.profile_seconds, cfg.profiles)
        self.replayer = Replayer(sessions_of(self.trace), self.materializer, self._send, cfg.concurrency, cfg.speed)
        self.watch = EngineWatch(self.target, self.run_dir, cfg.engine_log)
        self.manifest["steps_source"] = self.watch.steps_source
        self.manifest["model"] = model
        await self._describe_engine()
        self.store.write_manifest(self.manifest)

        background = [asyncio.create_task(coro) for coro in
                      (self._flusher(), self._sampler(), self._monitor())]
        try:
            self._phase = "start probe"
            await self._unless_stopped(self._probe("start"))
            self._profile("start")
            self._phase = "replay"
            replay = asyncio.create_task(self.replayer.run(deadline, position))
            scheduler = asyncio.create_task(self._scheduler(deadline))
            stop = asyncio.create_task(self._stop.wait())
            drain_s = min(60.0, max(5.0, 0.1 * cfg.duration_s))
            done, _ = await asyncio.wait({replay, stop}, return_when=asyncio.FIRST_COMPLETED,
                                         timeout=max(0.0, deadline - time.time()) + drain_s)
            scheduler.cancel()
            await asyncio.gather(scheduler, return_exceptions=True)
            if stop in done:
                await self._cancel(replay)
                return "interrupted"
            stop.cancel()
            if replay not in done:  # calls still running past the deadline and the grace period
                await self._cancel(replay)
            elif replay.exception() is not None:
                raise replay.exception()
            self._phase = "end probes"
            await self._unless_stopped(self._probe("end"))
            if cfg.restart_at_end and self.target.can_restart:
                await self._unless_stopped(self._restart("control"))
                await self._unless_stopped(self._probe("after_restart"))
            return "interrupted" if self._stop.is_set() else "completed"
        finally:
            if self._profile_tasks and not self._stop.is_set():  # let profiles being taken finish
                await asyncio.wait(self._profile_tasks, timeout=self.config.profile_seconds + 30)
            for task in (*background, *self._profile_tasks):
                task.cancel()
            await asyncio.gather(*background, *self._profile_tasks, return_exceptions=True)
            await self._sample_once()

    async def _cancel(self, replay: asyncio.Task) -> None:
        await self.replayer.cancel()
        replay.cancel()
        await asyncio.gather(replay, return_exceptions=True)

    # --- calls -----------------------------------------------------------------------------------

    async def _send(self, sid: str, call: Call, prompt: Prompt) -> None:
        payload = self._payload(prompt)
        life, age = self.target.life, self.target.age()
        request_id = f"{sid}#{call.turn}"
        t_send = time.time()
        try:
            result = await self.client.call(payload, prompt.max_output_tokens)
        except asyncio.CancelledError:
            self._record(request_id, sid, call, prompt, CallResult(
                t_send, None, None, None, None, None, None, None, "aborted", "the soak stopped during the call", 0),
                life, age)
            raise
        self._record(request_id, sid, call, prompt, result, life, age)

    def _payload(self, prompt: Prompt) -> Any:
        if self.client.api == "chat":
            return prompt.messages
        return prompt.token_ids if prompt.token_ids is not None else prompt.messages[0]["content"]

    def _record(self, request_id: str, sid: Optional[str], call: Optional[Call], prompt: Optional[Prompt],
                r: CallResult, life: int, age: Optional[float], kind: Optional[str] = None) -> None:
        prompt_tokens = r.prompt_tokens
        if prompt_tokens is None and prompt is not None and prompt.token_ids is not None:
            prompt_tokens = len(prompt.token_ids)
        self.store.add("requests", {
            "request_id": request_id, "session": sid, "turn": call.turn if call else None,
            "kind": kind or (call.kind if call else None), "t_send": r.t_send, "t_first_token": r.t_first_token,
            "t_first_content": r.t_first_content, "t_last_token": r.t_last_token, "prompt_tokens": prompt_tokens,
            "cached_tokens": r.cached_tokens, "output_tokens": r.output_tokens,
            "reasoning_tokens": r.reasoning_tokens, "status": r.status, "error": r.error,
            "engine_age_s": age, "engine_life": life})
        self.num_calls += 1
        if r.status in ("error", "refused"):
            self.num_failed += 1
        if r.status == "refused":
            self.store.event("dropped_request", request_id=request_id, input_tokens=prompt_tokens,
                             limit=_limit_in(r.error), error=r.error)
        if r.output_tokens and r.t_last_token:
            self._recent_tokens.append((r.t_last_token, r.output_tokens))

    # --- probes, restarts, profiles ------------------------------------------------------------

    async def _probe(self, reason: str) -> ProbeResult:
        await self._engine_ready.wait()  # not while the engine is being started again
        profiling = [t for t in self._profile_tasks if not t.done()]
        if profiling:  # py-spy sampling the engine would slow the probe down
            await asyncio.wait(profiling, timeout=self.config.profile_seconds + 30)
        if self.target.life not in self._warmed:
            self._warmed.add(self.target.life)
            await self.prober.warm_up()
        life, age = self.target.life, self.target.age()
        result = await self.prober.probe(self.replayer.gate, self.replayer.idle, reason)
        self.store.add("probes", {
            "t": result.t, "engine_age_s": age, "engine_life": life, "probe_id": result.probe_id,
            "prompt_tokens": result.prompt_tokens, "output_tokens": result.output_tokens,
            "ttft_s": result.ttft_s, "decode_tps": result.decode_tps, "status": result.status, "reason": reason})
        self._record(f"probe-{len(self.prober.results)}-{reason}", None, None, None, result.call, life, age,
                     kind="probe")
        self.store.event("probe", t=result.t, probe_id=result.probe_id, reason=reason, status=result.status,
                         decode_tps=result.decode_tps, ttft_s=result.ttft_s, engine_life=life)
        first = self.prober.first_ok
        if (first is not None and result.decode_tps is not None and result is not first
                and result.decode_tps < (1.0 - self.config.profile_drop) * first.decode_tps
                and life not in self._profiled_drop):
            self._profiled_drop.add(life)
            self._profile("probe_drop")
        return result

    def _profile(self, reason: str) -> None:
        if self.profiler.disabled_reason:
            return

        async def take() -> None:
            profile = await self.profiler.record(self.target.pid, reason, reason)
            if profile is not None:
                self.store.event("profile", path=str(profile.path.relative_to(self.run_dir)), reason=reason,
                                 seconds=profile.seconds, engine_life=self.target.life)

        self._profile_tasks.append(asyncio.create_task(take()))

    async def _engine_running(self) -> Optional[int]:
        """Requests running or waiting inside the built-in engine; None when it does not answer."""
        try:
            status = await self.target.get_json("/v1/cache/status")
            return int(status.get("num_running", 0)) + int(status.get("num_waiting", 0))
        except (httpx.HTTPError, ValueError, AttributeError, TypeError):
            return None

    async def _restart(self, reason: str) -> None:
        gate = self.replayer.gate
        gate.clear()
        try:
            try:
                await asyncio.wait_for(self.replayer.idle.wait(), self.config.probe_wait_s)
            except asyncio.TimeoutError:
                pass
            await self._engine_ready.wait()
            self._engine_ready.clear()
            self._engine_state = f"restarting ({reason})"
            await self.target.restart(reason)
            self.client.set_base_url(self.target.url)
            self._engine_state = "up"
            self._engine_ready.set()
        finally:
            gate.set()

    async def _scheduler(self, deadline: float) -> None:
        cfg = self.config
        next_probe = time.time() + cfg.probe_every_s if cfg.probe_every_s > 0 else float("inf")
        next_restart = time.time() + cfg.restart_every_s if cfg.restart_every_s else float("inf")
        # The end profile is taken while the replay still runs: a profile of an idle engine shows nothing.
        end_profile = deadline - cfg.profile_seconds - 1.0
        while True:
            now = time.time()
            due = min(next_probe, next_restart, end_profile)
            if due >= deadline:
                return
            await asyncio.sleep(max(0.0, due - now))
            if time.time() >= end_profile:
                self._profile("end")
                end_profile = float("inf")
            if time.time() >= next_restart and self.target.can_restart:
                await self._restart("scheduled")
                await self._probe("after_restart")
                next_restart = time.time() + cfg.restart_every_s
                next_probe = time.time() + cfg.probe_every_s if cfg.probe_every_s > 0 else float("inf")
            elif time.time() >= next_restart:
                next_restart = float("inf")
            if time.time() >= next_probe:
                await self._probe("periodic")
                next_probe = time.time() + cfg.probe_every_s

    # --- engine exits and the live view ------------------------------------------------------------

    async def _monitor(self) -> None:
        num_restarts = 0
        while True:
            exit_info = self.target.check_exit()
            if exit_info is not None:
                self.store.event("engine_exit", exit_code=exit_info.exit_code, log_tail=exit_info.log_tail,
                                 engine_life=self.target.life, expected=False)
                logger.warning("engine exited with code %s; starting it again", exit_info.exit_code)
                num_restarts += 1
                if num_restarts > MAX_ENGINE_RESTARTS:
                    raise SoakError(f"the engine died {num_restarts} times; giving up. Last lines of its log:\n"
                                    f"{exit_info.log_tail}")
                gate = self.replayer.gate
                gate.clear()
                self._engine_ready.clear()
                self._engine_state = "restarting after a crash"
                try:
                    await self.target.start()
                    self.client.set_base_url(self.target.url)
                finally:
                    gate.set()
                self._engine_state = "up"
                self._engine_ready.set()
            if self.on_progress is not None:
                try:
                    self.on_progress(self.progress())
                except Exception:  # noqa: BLE001 - a view must never stop the soak
                    logger.exception("live view failed")
            await asyncio.sleep(0.5)

    def progress(self) -> Progress:
        now = time.time()
        while self._recent_tokens and self._recent_tokens[0][0] < now - 30:
            self._recent_tokens.popleft()
        tokens = sum(n for _, n in self._recent_tokens)
        t = self.target
        age = t.age(now)
        engine = (f"{self._engine_state} (life {t.life}, pid {t.pid}"
                  + (f", age {age:.0f} s)" if age is not None else ")"))
        return Progress(str(self.run_dir), self._elapsed(now), max(0.0, self._deadline - now), self.num_calls,
                        self.num_failed, self.replayer.num_in_flight if hasattr(self, "replayer") else 0,
                        tokens / 30.0, tuple(self.prober.results[-5:]) if hasattr(self, "prober") else (),
                        engine, self._phase)

    # --- sampling and flushing -----------------------------------------------------------------------

    async def _sampler(self) -> None:
        while True:
            await asyncio.sleep(self.config.sample_every_s)
            await self._sample_once()

    async def _sample_once(self) -> None:
        if self.watch is None or not self._engine_ready.is_set():  # not while it is being started again
            return
        steps, snapshot = await self.watch.sample()
        for row in steps:
            self.store.add("steps", row)
        if snapshot is not None:
            self.store.add("snapshots", snapshot)

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(self.config.flush_every_s)
            self._flush()

    def _flush(self) -> None:
        self.store.flush()
        self.manifest["elapsed_s"] = round(self._elapsed(time.time()), 3)
        self.manifest["num_requests"] = self.num_calls
        self.store.write_manifest(self.manifest)

    def _finish(self, status: str) -> None:
        if self._status is not None or not hasattr(self, "store"):
            return
        self._status = status
        self.store.event("stop", status=status, engine_life=getattr(getattr(self, "target", None), "life", None))
        self.manifest["status"] = status
        self.manifest["ended_at"] = iso(time.time())
        if hasattr(self, "materializer"):
            m = self.materializer
            self.manifest["materialized"] = {"calls": m.num_calls, "dropped": m.num_dropped,
                                             "trimmed": m.num_trimmed, "over_limit": m.num_over_limit}
        if self.watch is not None and self.watch.num_missed_steps is not None:
            self.manifest["steps_missed"] = self.watch.num_missed_steps
        self.store.flush()
        self.manifest["elapsed_s"] = round(self._elapsed(time.time()), 3)
        self.manifest["num_requests"] = self.num_calls
        self.store.write_manifest(self.manifest)
        self.store.close()

    def _elapsed(self, now: float) -> float:
        return self._elapsed_before + (now - getattr(self, "_segment_start", now))

    # --- manifest ----------------------------------------------------------------------------------

    def _manifest(self) -> dict[str, Any]:
        if self.resuming:
            manifest = resumed_manifest(self.run_dir, self.command)
            self._elapsed_before = float(manifest.get("elapsed_s") or 0.0)
            return manifest
        self._elapsed_before = 0.0
        return new_manifest(self.config, self.trace, self.run_dir, self.command)

    async def _describe_engine(self) -> None:
        engine: dict[str, Any] = {"url": self.target.url, "pid": self.target.pid}
        if self.target.is_builtin:
            engine.update(name="tokdrift", version=__version__, args=list(self.config.engine_args))
            try:
                status = await self.target.get_json("/v1/cache/status")
                self.manifest["configs"]["engine"] = status.get("config")
                engine["max_context"] = status.get("max_context")
            except (httpx.HTTPError, ValueError, AttributeError):
                pass
        else:
            engine["name"] = "unknown"
        self.manifest["engine"] = engine

    def _make_target(self, http: httpx.AsyncClient) -> Target:
        cfg = self.config
        if cfg.is_builtin:
            return BuiltinTarget(http, self.store.event, self.run_dir / schema.ENGINE_LOG, cfg.engine_args,
                                 cfg.engine_start_timeout_s)
        return UrlTarget(http, self.store.event, cfg.target, cfg.api_key, cfg.restart_cmd, cfg.engine_start_timeout_s)


class _Interrupted(Exception):
    """The soak was stopped while it waited for something other than the replay."""


def _limit_in(error: Optional[str]) -> Optional[int]:
    """The context limit a refusal names: the last number in its message."""
    numbers = re.findall(r"\d+", error or "")
    return int(numbers[-1]) if numbers else None
