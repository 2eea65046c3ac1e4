"""Which samplers watch the engine, by target: built-in steps and hooks, or an external engine's
/metrics and log; the process, its child processes and the GPU for both; the soak itself, its
control engine and the host beside them. One call samples them all."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rundir import schema
from rundir.schema import StepRow
from soak.external import LogTailer, MetricsScraper
from soak.samplers import ChildSampler, EngineHooks, EngineSteps, GpuSampler, HostSampler, ProcessSampler
from soak.targets import Target

logger = logging.getLogger(__name__)


class EngineWatch:
    def __init__(
        self,
        target: Target,
        run_dir: Path,
        engine_log: str | None,
        control_pid: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.target = target
        self.control_pid = control_pid  # the control engine's process, while there is one
        builtin = target.is_builtin
        self.steps = EngineSteps(target) if builtin else None
        self.hooks = EngineHooks(target) if builtin else None
        self.metrics = None if builtin else MetricsScraper(target, run_dir / schema.METRICS)
        self.log = LogTailer(target, Path(engine_log), run_dir / schema.ENGINE_LOG) if engine_log else None
        self.process = ProcessSampler()
        self.children = ChildSampler()
        self.gpu = GpuSampler()
        self.host = HostSampler()

    @property
    def steps_source(self) -> str:
        """Where steps rows come from (manifest `steps_source`)."""
        return "engine" if self.steps is not None else "engine_log" if self.log is not None else "metrics"

    @property
    def num_missed_steps(self) -> int | None:
        return self.steps.num_missed if self.steps is not None else None

    async def _steps(self) -> tuple[list[StepRow], dict[str, Any]]:
        return (await self.steps.sample() if self.steps is not None else []), {}

    async def _hooks(self) -> tuple[list[StepRow], dict[str, Any]]:
        return [], (await self.hooks.sample() if self.hooks is not None else {})

    async def _metrics(self) -> tuple[list[StepRow], dict[str, Any]]:
        if self.metrics is None:
            return [], {}
        return await self.metrics.sample(as_steps=self.log is None)

    async def _log(self) -> tuple[list[StepRow], dict[str, Any]]:
        if self.log is None:
            return [], {}
        return self.log.sample(), self.log.take_figures()

    async def sample(self) -> tuple[list[StepRow], dict[str, Any] | None]:
        """New steps rows, and one snapshot row (None when nothing could be sampled)."""
        now = time.time()
        steps: list[StepRow] = []
        snap: dict[str, Any] = {}
        # Each sampler on its own: one that fails (a bad page, a rotated log) skips only its own
        # part of this round; one bad sample must not end a 12-hour soak.
        for name, sampler in (
            ("steps", self._steps),
            ("hooks", self._hooks),
            ("metrics", self._metrics),
            ("log", self._log),
        ):
            try:
                got_steps, got_snap = await sampler()
            except Exception:  # noqa: BLE001
                logger.exception("sampling %s failed once", name)
                continue
            steps += got_steps
            snap.update(got_snap)
        snap.update(self.process.sample(self.target.pid))
        children = self.children.sample(self.target.pid)
        snap.update(children.core)
        snap.update(self.gpu.sample())
        if not snap:  # nothing from the engine: no row (the host columns alone say nothing of it)
            return steps, None
        own, theirs = snap.get("cpu_percent"), children.cpu_percent
        engine_cpu = own + theirs if own is not None and theirs is not None else None
        snap.update(self.host.sample(engine_cpu, self.target.pid, self.control_pid()))
        snap.setdefault("engine_age_s", self.target.age(now))
        return steps, {"t": now, "engine_life": self.target.life, **snap}
