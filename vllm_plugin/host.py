"""The CPU a host spends beside the user's vLLM, for its step record: what else ran while it served.

A step record's step time is wall time: a neighbour taking the CPU (or the GPU's feeder thread)
lengthens it as engine age would. Every HOST_S seconds the step record states, as a `figures`
line (record.py, HOST_FIGURES), the host's CPU busy and the part of it not spent by this vLLM (the
process the stat logger runs in, the API server, and every process under it: engine core,
workers), in percent of one core, as the soak's own host sampler states them beside an engine it
soaks (soak.samplers.HostSampler). diag reads a rise of the second as contention it cannot tell
from engine age (diagnostics.evidence.controls.host_load).

psutil comes with vLLM (a dependency of every release); without it the record states no host figures.
"""

from __future__ import annotations

import os
from typing import Any

HOST_S = 10.0  # seconds between two host readings


class HostFigures:
    """Readings of the host's CPU and this vLLM's process tree; each `sample` covers the time since
    the previous one (the first covers nothing and says nothing)."""

    def __init__(self, pid: int | None = None) -> None:
        try:
            import psutil
        except ImportError:
            self._psutil: Any = None
            return
        self._psutil = psutil
        self._root = psutil.Process(pid or os.getpid())
        self._num_cpus = psutil.cpu_count() or 1
        self._times: dict[int, float] = {}  # pid -> its CPU seconds at the last reading
        self._last: float | None = None
        psutil.cpu_percent(None)  # the first reading of the host is always 0: start the interval here

    def sample(self, now: float) -> dict[str, float] | None:
        """{host_cpu_percent, host_other_cpu_percent} over the time since the last call, or None."""
        if self._psutil is None:
            return None
        host = self._psutil.cpu_percent(None) * self._num_cpus
        spent, times = 0.0, {}
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except self._psutil.Error:
            return None
        for proc in procs:
            try:
                cpu = proc.cpu_times()
            except self._psutil.Error:  # ended between the listing and the reading
                continue
            times[proc.pid] = cpu.user + cpu.system
            if proc.pid in self._times:  # a process new since the last reading is left out once
                spent += times[proc.pid] - self._times[proc.pid]
        last, self._last, self._times = self._last, now, times
        if last is None or now <= last:
            return None
        own = 100.0 * spent / (now - last)
        return {"host_cpu_percent": round(host, 1), "host_other_cpu_percent": round(max(0.0, host - own), 1)}
