"""The step record's writer: vLLM's per-iteration stats objects -> JSON lines (record.py).

Apart from vLLM: it reads the stats objects' attributes by name (SchedulerStats, IterationStats,
VllmConfig of 0.27.1 and 0.32.0; 0.15.1's IterationStats has no prompt_token_stats, only
num_prompt_tokens), so a test hands it stand-ins. Lines are kept in memory and
appended to the file in one write every `flush_s` seconds, at exit and on `flush()`: a crash loses
at most that second, and a line is never split between two writes (the file is opened O_APPEND,
so two processes appending to one file interleave whole blocks of lines, never parts of one).
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

import ground
from vllm_plugin.fault import StepCostSpec
from vllm_plugin.figures import line
from vllm_plugin.record import ENGINE_START, FAULT_ENV, FAULT_ON, FORMAT, STEP, VERSION

FLUSH_S = 1.0  # seconds between writes: what a crash may lose


class StepWriter:
    """Appends one engine's step record to `path`."""

    def __init__(self, path: str, fault: StepCostSpec | None = None, flush_s: float = FLUSH_S) -> None:
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OSError(f"step record: expected a file to append to, {path!r} cannot be opened: {exc}") from exc
        self.path = path
        self.fault = fault
        self.flush_s = flush_s
        self.num_finished = 0
        self._pending: list[str] = []
        self._due = time.monotonic() + flush_s
        atexit.register(self.flush)

    def start(self, header: dict[str, Any]) -> None:
        """The engine's start line, written at once."""
        self._line({"kind": ENGINE_START, "format": FORMAT, "version": VERSION, **header})
        self.flush()

    def step(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        """One engine iteration, from what vLLM hands its stat loggers (either may be None)."""
        row = step_row(scheduler_stats, iteration_stats)
        if row is None:
            return
        self._line(row)
        if self.fault is not None and "finished" in row:
            before, self.num_finished = self.num_finished, self.num_finished + row["finished"]
            if before < self.fault.after <= self.num_finished:
                self._line({"kind": FAULT_ON, "t": row["t"], "fault": self.fault.describe()})
        if time.monotonic() >= self._due:
            self.flush()

    def figures(self, t: float, figures: dict[str, float]) -> None:
        """A `figures` line of this process's (record.FIGURE_KEYS)."""
        self._pending.append(line(figures, t))

    def flush(self) -> None:
        self._due = time.monotonic() + self.flush_s
        if not self._pending:
            return
        data = "".join(self._pending).encode()
        self._pending.clear()
        os.write(self._fd, data)

    def close(self) -> None:
        self.flush()
        atexit.unregister(self.flush)
        os.close(self._fd)

    def _line(self, row: dict[str, Any]) -> None:
        self._pending.append(json.dumps(row, separators=(",", ":")) + "\n")


def step_row(s: Any, it: Any) -> dict[str, Any] | None:
    """A step line (record.STEP_KEYS) from a SchedulerStats and an IterationStats; None without either."""
    if s is None and it is None:
        return None
    row: dict[str, Any] = {"kind": STEP, "t": it.iteration_timestamp if it is not None else time.time()}
    if s is not None:
        row["running"] = s.num_running_reqs
        row["waiting"] = s.num_waiting_reqs
        row["deferred"] = getattr(s, "num_skipped_waiting_reqs", 0)
        row["kv_usage"] = round(s.kv_cache_usage, 6)
        cache = getattr(s, "prefix_cache_stats", None)
        if cache is not None:
            row["prefix_queries"] = cache.queries
            row["prefix_hits"] = cache.hits
        details = getattr(s, "iteration_details", None)
        if details is not None and not getattr(details, "is_dummy", False):
            row["sched_prompt_reqs"] = details.num_ctx_requests
            row["sched_prompt_tokens"] = details.num_ctx_tokens
            row["sched_gen_reqs"] = details.num_generation_requests
            row["sched_gen_tokens"] = details.num_generation_tokens
            row["elapsed_s"] = round(details.elapsed_ms / 1000.0, 6)
    if it is not None:
        itl = it.inter_token_latencies_iter
        prompt = getattr(it, "prompt_token_stats", None)
        row["gen_tokens"] = it.num_generation_tokens
        row["first_tokens"] = len(it.time_to_first_tokens_iter)
        row["decode_reqs"] = len(itl)
        if prompt is not None:
            row["prompt_tokens"] = prompt.total
            row["computed_tokens"] = prompt.computed
            row["cached_tokens"] = prompt.cached_tokens
        else:  # 0.15.1 counts the prompt tokens alone, not which of them were computed or cached
            row["prompt_tokens"] = it.num_prompt_tokens
        row["preempted"] = it.num_preempted_reqs
        row["finished"] = len(it.finished_requests)
        if itl:
            row["itl_s"] = round(min(itl), 6)
    return row


def engine_header(config: Any, engine_index: int, vllm_version: str | None) -> dict[str, Any]:
    """What the start line says of the engine, from its VllmConfig."""
    model = getattr(config, "model_config", None)
    cache = getattr(config, "cache_config", None)
    parallel = getattr(config, "parallel_config", None)
    scheduler = getattr(config, "scheduler_config", None)
    observability = getattr(config, "observability_config", None)
    served = getattr(model, "served_model_name", None)
    block_size = getattr(cache, "block_size", None)
    num_blocks = getattr(cache, "num_gpu_blocks", None)
    dtype = getattr(model, "dtype", None)
    return {
        "t": time.time(),
        "utc_offset_s": time.localtime().tm_gmtoff,
        "writer": f"tokdrift {ground.__version__}",
        "pid": os.getpid(),
        "engine_index": engine_index,
        "vllm_version": vllm_version,
        "model": getattr(model, "model", None),
        "served_model_name": served[0] if isinstance(served, list | tuple) and served else served,
        "dtype": str(dtype).removeprefix("torch.") if dtype is not None else None,
        "quantization": getattr(model, "quantization", None),
        "max_model_len": getattr(model, "max_model_len", None),
        "enforce_eager": getattr(model, "enforce_eager", None),
        "tensor_parallel_size": getattr(parallel, "tensor_parallel_size", None),
        "pipeline_parallel_size": getattr(parallel, "pipeline_parallel_size", None),
        "data_parallel_size": getattr(parallel, "data_parallel_size", None),
        "block_size": block_size,
        "num_gpu_blocks": num_blocks,
        "kv_capacity_tokens": block_size * num_blocks if block_size and num_blocks else None,
        "prefix_caching": getattr(cache, "enable_prefix_caching", None),
        "kv_cache_dtype": getattr(cache, "cache_dtype", None),
        "max_num_seqs": getattr(scheduler, "max_num_seqs", None),
        "max_num_batched_tokens": getattr(scheduler, "max_num_batched_tokens", None),
        "async_scheduling": getattr(scheduler, "async_scheduling", None),
        "iteration_details": getattr(observability, "enable_logging_iteration_details", None),
        "fault": os.environ.get(FAULT_ENV) or None,
    }


def engine_path(path: str, engine_index: int) -> str:
    """Engine 0 writes to `path`; engine N of a data-parallel deployment to `stem.engineN.suffix`."""
    if engine_index == 0:
        return path
    stem, dot, suffix = path.rpartition(".")
    return f"{stem}.engine{engine_index}.{suffix}" if dot and "/" not in suffix else f"{path}.engine{engine_index}"
