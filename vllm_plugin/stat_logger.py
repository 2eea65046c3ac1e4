"""The `vllm.stat_logger_plugins` entry point: `StepRecord`, one engine's step record.

vLLM's frontend loads the group's classes (vllm/v1/metrics/loggers.py,
`load_stat_logger_plugin_factories`: each must subclass StatLoggerBase), builds one per engine as
`StepRecord(vllm_config, engine_index)` once the engine core is up (so the KV cache's size is
known), and hands it each iteration's stats: `record(scheduler_stats, iteration_stats, ...)` from
AsyncLLM's output handler, once per batch of outputs the engine core sends, which is once per
engine step (the same in 0.27.1 and 0.32.0).

With `TOKDRIFT_VLLM_STEPS` unset it records nothing: `record` is one branch. Installed, it makes
vLLM collect its stats even under `--disable-log-stats` (AsyncLLM turns them on for any custom
logger); `VLLM_PLUGINS` names the plugins vLLM may load, to leave it out.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from vllm_plugin.fault import from_env
from vllm_plugin.host import HOST_S, HostFigures
from vllm_plugin.record import STEPS_ENV
from vllm_plugin.steps import StepWriter, engine_header, engine_path

if TYPE_CHECKING:
    _Base = object
else:
    try:
        from vllm.v1.metrics.loggers import StatLoggerBase as _Base
    except ImportError:  # outside vLLM (tests, docs): the same class on a plain base
        _Base = object


class StepRecord(_Base):
    """Appends each engine iteration to the file TOKDRIFT_VLLM_STEPS names (engine N > 0 of a
    data-parallel deployment: `stem.engineN.suffix`)."""

    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.writer: StepWriter | None = None
        self.host: HostFigures | None = None
        path = os.environ.get(STEPS_ENV)
        if not path:
            return
        self.writer = StepWriter(engine_path(path, engine_index), fault=from_env())
        self.writer.start(engine_header(vllm_config, engine_index, _vllm_version()))
        self.host = HostFigures() if engine_index == 0 else None  # one engine's record says the host's
        self._host_due = time.monotonic() + HOST_S
        if self.host is not None:
            self.host.sample(time.time())  # the first reading: the interval starts here

    def record(self, scheduler_stats: Any, iteration_stats: Any, *args: Any, **kwargs: Any) -> None:
        if self.writer is None:
            return
        self.writer.step(scheduler_stats, iteration_stats)
        if self.host is not None and time.monotonic() >= self._host_due:
            self._host_due = time.monotonic() + HOST_S
            now = time.time()
            figures = self.host.sample(now)
            if figures:
                self.writer.figures(now, figures)

    def log_engine_initialized(self) -> None:
        pass

    def log(self) -> None:
        if self.writer is not None:
            self.writer.flush()


def _vllm_version() -> str | None:
    try:
        from vllm.version import __version__
    except ImportError:
        return None
    return str(__version__)
