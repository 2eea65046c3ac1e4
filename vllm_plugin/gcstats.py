"""Python's garbage collector inside the user's vLLM, stated in the step record: where the
collector's pauses grow with age, the record says so under the built-in engine's names.

vLLM calls every `vllm.general_plugins` entry point in each process that loads plugins:
`load_general_plugins()` (vllm/plugins/__init__.py) runs in the API server while it reads its
arguments (vllm/engine/arg_utils.py), in the engine core (EngineCore.__init__, vllm/v1/engine/core.py)
and in each worker (WorkerWrapperBase.init_worker, vllm/v1/worker/worker_base.py), once a process.
On the CPU that is the API server and the engine core, which runs the model itself, in 0.15.1; the
API server, the engine core and its worker in 0.27.1 (docs/diagnostics.md, "vLLM step record", has
the lines). `register` is tokdrift's second entry point of that group. With TOKDRIFT_VLLM_STEPS unset
it returns at once; set, it installs in its process, once, a `gc.callbacks` hook (`GcCounts`: two
clock readings and a few additions a collection) and a thread that every REPORT_S seconds appends the
process's GC figures (record.GC_FIGURES) to the record as a `figures` line, in one write.

A process forked from one that installed it inherits the hook and none of the thread: the fork
handler starts the count over and starts a thread of the child's own.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from typing import Any

from vllm_plugin import figures
from vllm_plugin.record import STEPS_ENV

logger = logging.getLogger("vllm.tokdrift_gc")  # a child of vLLM's logger: it lands in vLLM's log

REPORT_S = 10.0  # seconds between two lines of a process (vLLM's own stats period)


class GcCounts:
    """What the collector did in this process since it was installed: a `gc.callbacks` callable."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.num_collections = [0, 0, 0]  # per generation
        self.pause_s = 0.0
        self.full_pause_s = 0.0
        self.num_collected = 0
        self._start: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
            return
        if self._start is None:  # installed inside a collection
            return
        pause = time.perf_counter() - self._start
        self._start = None
        generation = info.get("generation", 0)
        self.num_collections[generation] += 1
        self.pause_s += pause
        self.num_collected += info.get("collected", 0)
        if generation == 2:
            self.full_pause_s += pause

    def figures(self) -> dict[str, float]:
        return {
            "gc_pause_s_total": round(self.pause_s, 6),
            "gc_full_pause_s_total": round(self.full_pause_s, 6),
            "gc_gen2_collections": self.num_collections[2],
            "gc_collections_total": sum(self.num_collections),
            "gc_collected_total": self.num_collected,
            "gc_frozen_objects": gc.get_freeze_count(),
        }


class Reporter:
    """Appends `counts`' figures to the record at `path` every `every_s` seconds, from a thread."""

    def __init__(self, counts: GcCounts, path: str, every_s: float = REPORT_S) -> None:
        self.counts = counts
        self.path = path
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tokdrift-gc", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def report(self) -> None:
        line: dict[str, float | str] = {**self.counts.figures(), "process": multiprocessing.current_process().name}
        try:
            figures.append(self.path, line)
        except OSError as exc:  # the record's trouble must not stop the engine
            logger.warning("tokdrift gc: the step record %s cannot be appended to: %s", self.path, exc)

    def after_fork(self) -> None:
        """In a forked child: its own count, its own thread (the parent's did not come along)."""
        self.counts.reset()
        self.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.report()


_installed: Reporter | None = None


def register() -> None:
    """The `vllm.general_plugins` entry point: the GC figures, where a step record is kept."""
    path = os.environ.get(STEPS_ENV)
    if not path:
        return
    figures.mark_root()
    install(path, REPORT_S)


def install(path: str, every_s: float = REPORT_S) -> Reporter:
    """The hook and its reporting thread, once a process."""
    global _installed
    if _installed is not None:
        return _installed
    counts = GcCounts()
    gc.callbacks.append(counts)
    reporter = Reporter(counts, path, every_s)
    reporter.start()
    os.register_at_fork(after_in_child=reporter.after_fork)
    _installed = reporter
    logger.info("tokdrift gc: the collector's figures go to %s every %.0f s (pid %d)", path, every_s, os.getpid())
    return reporter
