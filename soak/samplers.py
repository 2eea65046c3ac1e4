"""What the soak samples beside the calls: engine steps, engine hooks, the process, the GPU
(an external engine's /metrics and log: soak.external).

Each sampler returns typed rows for one table of the run directory (rundir.rows). None of
them raises for a missing source: a target without a steps route, a process the OS will not
show, a machine without a GPU are logged once and sampled as nothing.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple, cast

import httpx

from engine.runtime.stats import StepStats
from engine.server.wire import CacheStatus, StepsPage
from rundir import schema
from rundir.rows import Snapshot, SnapshotRow, StepRow, said
from soak.targets import Target

logger = logging.getLogger(__name__)


class Once:
    """Log a reason a sampler gives up, once per sampler (one soak's; `soak validate` runs several
    soaks in one process, and each must say its own)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def __call__(self, key: str, message: str, *args: Any) -> None:
        if key not in self.seen:
            self.seen.add(key)
            logger.warning(message, *args)


# --- built-in engine: steps and hooks ------------------------------------------------------------


class EngineSteps:
    """Pulls per-step stats from the built-in server's `GET /v1/engine/steps?after=N`."""

    def __init__(self, target: Target) -> None:
        self._once = Once()
        self.target = target
        self.after = 0  # steps are numbered from 1
        self.life: int | None = None
        self.num_missed = 0  # steps that fell out of the server's buffer before we read them
        self.num_unreadable = 0  # steps the server sent that are not steps (left out)

    async def sample(self) -> list[StepRow]:
        if self.life != self.target.life:  # a new engine counts its steps from 1 again
            self.life, self.after = self.target.life, 0
        rows: list[StepRow] = []
        while True:
            try:
                data = await self.target.get_json(f"/v1/engine/steps?after={self.after}")
            except (httpx.HTTPError, ValueError) as exc:
                self._once("steps", "engine steps: %s; no steps sampled from it", exc)
                return rows
            try:
                page = StepsPage.from_json(data)
            except ValueError as exc:
                self._once("steps-shape", "engine steps: %s; no steps sampled from it", exc)
                return rows
            self.num_missed += page.num_missed
            self.num_unreadable += len(page.unreadable)
            if page.unreadable:
                self._once(
                    "steps-unreadable",
                    "engine steps: %d step(s) left out (%s; said once)",
                    len(page.unreadable),
                    page.unreadable[0],
                )
            rows += [step_row(item, self.target.life) for item in page.steps]
            # The server says where to go on from and the newest step it has run: pages until
            # the two meet, whatever its page size.
            self.after = max(self.after, page.next_after)
            if not page.steps or self.after >= page.last_step:
                return rows


def step_row(s: StepStats, life: int | None) -> StepRow:
    """An engine step (engine.runtime.stats.StepStats) as a steps row: the engine's figures under
    their table names (rundir.schema.STEP_FROM_ENGINE) and the rates derived from them."""
    duration = s.duration_s
    n_decode, n_prefill, n_cached = s.num_decode_tokens, s.num_prefill_tokens, s.num_cached_tokens
    row: StepRow = {
        "t": s.t,
        "engine_age_s": s.engine_age_s,
        "engine_life": life,
        "phase": s.phase.value,  # one of rundir.schema.StepPhase
        "new_tokens": n_prefill if n_prefill else None,
        "cached_tokens": n_cached if n_prefill else None,
        "gen_tps": n_decode / duration if n_decode and duration > 0 else None,
        "input_tps": n_prefill / duration if n_prefill and duration > 0 else None,
        "step_time_s": duration if n_decode else None,
        "num_decode_tokens": n_decode,
        "schedule_s": s.schedule_s,
        "forward_s": s.forward_s,
        "sample_s": s.sample_s,
        "mamba_usage": s.mamba_slots_used / s.mamba_slots_total if s.mamba_slots_total else None,
        "mamba_slots_used": s.mamba_slots_used,
        "mamba_slots_total": s.mamba_slots_total,
        "cache_hit_rate": n_cached / (n_cached + n_prefill) if n_prefill else None,
    }
    # The figures the table names otherwise (its names are steps columns: a test checks them).
    row.update(cast(StepRow, {column: getattr(s, field) for field, column in schema.STEP_FROM_ENGINE.items()}))
    return row


class EngineHooks:
    """The built-in server's `GET /v1/cache/status`: radix tree, state slots, allocator, experts, GC."""

    def __init__(self, target: Target) -> None:
        self._once = Once()
        self.target = target
        self._last_experts: tuple[int | None, float, float] | None = None  # life, hits, misses
        self._last_gc_pause: tuple[int | None, float] | None = None  # life, cumulative pause s

    async def sample(self) -> Snapshot:
        try:
            data = await self.target.get_json("/v1/cache/status")
        except (httpx.HTTPError, ValueError) as exc:
            # (a timeout's message is empty: name its type)
            self._once("hooks", "engine hooks: %s; that snapshot skipped (said once)", str(exc) or type(exc).__name__)
            return Snapshot({}, {})
        try:
            return self.row(CacheStatus.from_json(data))
        except ValueError as exc:
            self._once("hooks-shape", "engine hooks: %s; that snapshot skipped (said once)", exc)
            return Snapshot({}, {})

    def row(self, status: CacheStatus) -> Snapshot:
        cache, slots, free = status.cache, status.state_slots, status.kv_free_list
        extra: dict[str, float | None] = {}
        row: SnapshotRow = {
            "engine_age_s": status.engine_age_s,
            "radix_nodes": cache.num_nodes,
            "radix_cached_tokens": cache.cached_tokens,
            "radix_evictable_tokens": cache.evictable_tokens,
            "radix_locked_tokens": cache.locked_tokens,
            "mamba_slots_used": slots.num_used,
            "mamba_snapshots": slots.num_snapshots,
            "kv_free_tokens": free.num_free,
            "kv_free_runs": free.num_free_runs,
            "kv_largest_free_run": free.largest_free_run,
            "kv_fragmentation": free.fragmentation,
        }
        if status.heap is not None:  # RSS less what malloc keeps is what the engine uses (docs/diagnostics.md)
            row.update({"heap_in_use_bytes": status.heap.in_use_bytes, "heap_kept_bytes": status.heap.free_bytes})
        experts = status.experts
        if experts is not None:
            row.update(
                {"expert_hits": experts.hits, "expert_misses": experts.misses, "expert_evictions": experts.evictions}
            )
            last = self._last_experts
            if experts.hits is not None and experts.misses is not None:
                if last is not None and last[0] == self.target.life:
                    d_hits, d_misses = experts.hits - last[1], experts.misses - last[2]
                    row["expert_miss_rate"] = d_misses / (d_hits + d_misses) if d_hits + d_misses > 0 else None
                self._last_experts = (self.target.life, experts.hits, experts.misses)
        gc_stats = status.gc
        if gc_stats is not None:
            row["gc_gen2_collections"] = gc_stats.gen2_collections
            # Cumulative pause times (rates in analysis), the pause since the last snapshot, and
            # the latest full pause.
            total = gc_stats.pause_s_total
            if isinstance(total, (int, float)):
                before = self._last_gc_pause
                if before is not None and before[0] == self.target.life:
                    row["gc_pause_s"] = max(0.0, total - before[1])
                self._last_gc_pause = (self.target.life, total)
            extra.update(
                gc_pause_s_total=total,
                gc_full_pause_s_total=gc_stats.full_pause_s_total,
                gc_last_full_pause_s=gc_stats.last_full_pause_s,
            )
        # The degradation mechanisms' own signals (engine.runtime.faults.FaultStats), one snapshot
        # column each, under the hook's own names (counters end in _total); a column set above keeps
        # its value.
        if status.faults is not None:
            signals = Snapshot.of(
                {
                    name: value
                    for name, value in status.faults._asdict().items()
                    if isinstance(value, (int, float)) and not isinstance(value, bool)
                }
            )
            row, extra = {**signals.row, **row}, {**signals.extra, **extra}
        return Snapshot(said(row), {name: value for name, value in extra.items() if value is not None})


# --- the process and the GPU ----------------------------------------------------------------------


class ProcessSampler:
    """RSS, CPU, threads and open files of the engine process (psutil). CPU is left out of the
    first sample of a process: psutil reads 0 there, which is no measurement."""

    def __init__(self) -> None:
        self._once = Once()
        self._proc: Any = None  # the psutil.Process of the pid last sampled (psutil is imported when used)

    def sample(self, pid: int | None) -> SnapshotRow:
        if pid is None:
            return {}
        import psutil

        try:
            first = self._proc is None or self._proc.pid != pid
            if first:
                self._proc = psutil.Process(pid)
            p = self._proc
            with p.oneshot():
                rss = p.memory_info().rss
                if rss == 0 or p.status() == psutil.STATUS_ZOMBIE:  # dying or dead, not yet reaped
                    return {}
                cpu = p.cpu_percent(None)
                row: SnapshotRow = {"rss_bytes": rss, "num_threads": p.num_threads()}
                if not first:
                    row["cpu_percent"] = cpu
                try:
                    row["num_fds"] = p.num_fds()
                except (AttributeError, psutil.AccessDenied):
                    pass
            return row
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            return {}
        except psutil.AccessDenied:
            self._once("proc", "process %d: access denied; not sampled", pid)
            return {}


class Children(NamedTuple):
    """A process's descendants, sampled together."""

    core: SnapshotRow  # the busiest one's `core_*` columns ({} without children)
    cpu_percent: float | None  # all of them, percent of one core; None where one is new (no reading yet)
    rss_bytes: int  # all of them (pages they share are counted in each)


class ChildSampler:
    """The engine's child processes (all its descendants): their CPU and memory together, and the
    busiest one's RSS, CPU and threads as the `core_*` columns. vLLM V1 runs its engine core as a
    child of the API server that listens on the port (on the CPU backend the engine core's own child,
    the worker, runs the model); SGLang its scheduler. The busiest is the one with the most CPU time
    so far, which keeps it the same from sample to sample. A child's CPU is left out of its first
    sample (psutil reads 0 there), and the children's sum with it."""

    def __init__(self) -> None:
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, kept so cpu_percent measures since the last call

    def sample(self, pid: int | None) -> Children:
        if pid is None:
            return Children({}, None, 0)
        import psutil

        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return Children({}, None, 0)
        seen: dict[int, Any] = {}
        total_cpu: float | None = 0.0
        total_rss = 0
        busiest: tuple[float, SnapshotRow] | None = None
        for child in children:
            known = self._procs.get(child.pid)
            proc = known if known is not None and known == child else child  # same pid and start time
            try:
                with proc.oneshot():
                    cpu = proc.cpu_percent(None)
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
                    row: SnapshotRow = {"core_rss_bytes": rss, "core_num_threads": proc.num_threads()}
            except psutil.Error:  # gone since it was listed
                continue
            seen[proc.pid] = proc
            total_rss += rss
            if proc is known:
                row["core_cpu_percent"] = cpu
                total_cpu = None if total_cpu is None else total_cpu + cpu
            else:
                total_cpu = None
            if busiest is None or times.user + times.system > busiest[0]:
                busiest = (times.user + times.system, row)
        self._procs = seen
        return Children(busiest[1] if busiest is not None else {}, total_cpu, total_rss)


class HostSampler:
    """The soak process, the control engine and the whole machine beside the engine, in percent
    of one core as psutil's Process.cpu_percent reports: what else used the CPU the engine runs on.
    `host_other_cpu_percent` is what is left for other tenants (host minus engine, driver and control)."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._driver = psutil.Process()
        self._driver.cpu_percent(None)  # the first reading is always 0
        self._num_cpus = psutil.cpu_count() or 1
        psutil.cpu_percent(None)
        self._control = ProcessSampler()
        self._control_children = ChildSampler()

    def sample(self, engine_cpu_percent: float | None, engine_pid: int | None, control_pid: int | None) -> SnapshotRow:
        """`engine_cpu_percent`: the engine's with its child processes, sampled just before (None when
        it could not be, or the engine is not a process of this machine: `engine_pid` None). The
        control's figures hold its child processes too (a vLLM control's engine core)."""
        psutil = self._psutil
        host_cpu = psutil.cpu_percent(None) * self._num_cpus
        row: SnapshotRow = {"host_cpu_percent": host_cpu}
        try:
            with self._driver.oneshot():
                row["driver_cpu_percent"] = self._driver.cpu_percent(None)
                mem = self._driver.memory_info()
                row["driver_rss_bytes"] = mem.rss
                if hasattr(mem, "shared"):  # Linux: file-backed and shared pages (RssFile + RssShmem)
                    row["driver_anon_bytes"] = mem.rss - mem.shared
        except psutil.Error:
            pass
        control = self._control.sample(control_pid)
        children = self._control_children.sample(control_pid)
        if (rss := control.get("rss_bytes")) is not None:
            row["control_rss_bytes"] = rss + children.rss_bytes
        if (cpu := control.get("cpu_percent")) is not None and children.cpu_percent is not None:
            row["control_cpu_percent"] = cpu + children.cpu_percent
        parts = [row.get("driver_cpu_percent")]
        if engine_pid is not None:
            parts.append(engine_cpu_percent)
        if control_pid is not None:
            parts.append(row.get("control_cpu_percent"))
        if all(v is not None for v in parts):  # else a process is between readings: no figure beats a wrong one
            row["host_other_cpu_percent"] = max(0.0, host_cpu - sum(v for v in parts if v is not None))
        return row


class GpuSampler:
    """Memory used and utilisation summed / averaged over the GPUs NVML sees; nothing without a GPU."""

    def __init__(self) -> None:
        self._once = Once()
        self.handles: list[Any] = []  # NVML device handles: opaque ctypes pointers
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - no driver, no library, no GPU: all mean "no GPU"
            logger.info("no GPU sampling (%s)", exc)

    def sample(self) -> SnapshotRow:
        if not self.handles:
            return {}
        try:
            mem = sum(self._nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)
            util = sum(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles) / len(self.handles)
        except Exception as exc:  # noqa: BLE001
            self._once("gpu", "NVML: %s; GPU no longer sampled", exc)
            self.handles = []
            return {}
        return {"gpu_mem_bytes": mem, "gpu_util": util / 100.0}
