"""The step record of tokdrift's vLLM plugin (vllm_plugin: `TOKDRIFT_VLLM_STEPS`) as
steps and events: one row per engine iteration, which vLLM's 10-s stats lines cannot give.

The lines (vllm_plugin.record): an `engine_start` line at each engine start (its
identity: the events `engine_start` and `engine_config`), a `step` line per iteration, a
`fault_on` line where a test instrument's fault began, a `figures` line where a process states
figures of its own (the fault's state, the garbage collector's, the host's: a snapshots row, each
figure summed over the processes of one engine life, `_summed`). A line that does not read as JSON
(the last one of a file a crash cut short) is counted as bad and skipped.

How a step line becomes a steps row:
- phase: with vLLM's `--enable-logging-iteration-details`, from the tokens the step scheduled
  (prompt, decode); without, from what it produced: a request that generated a token past its
  first is decode work; a prefill that ended, or a running request that produced nothing (a
  prompt chunk still computing), is prefill work. Both: mixed. A step of only decode tokens is a
  decode step.
- step_time_s: the step's shortest inter-token latency, on the engine core's own clock (every
  request that decoded in the step before waited exactly one step), else the engine's wait for
  the model (`elapsed_s`, with iteration details); only for steps that decoded, as the built-in
  engine's steps.
- num_running_reqs: the requests the step scheduled where iteration details say, else those
  running after it plus those that finished in it.
- num_tokens: KV usage times the cache's size in tokens (the start line's), block-granular.
- times: Unix seconds shifted by the start line's UTC offset: the engine host's clock, as its log.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from logformats.errors import LogFormatError
from logformats.records import FIGURES
from logformats.text import Readable, read_lines
from logformats.vllm import fault_detail
from rundir.schema import StepPhase
from vllm_plugin.record import ENGINE_START, FAULT_ON, FORMAT, STEP, VERSION

logger = logging.getLogger(__name__)

NAME = "vllm-steps"  # the format's name (LogInfo.format): its engine first, as diag takes it
# Start-line keys -> identity facts, named as logformats.identity names those of vLLM's log.
FACTS = {
    "vllm_version": "version",
    "model": "model",
    "tensor_parallel_size": "tp",
    "pipeline_parallel_size": "pp",
    "dtype": "dtype",
    "max_model_len": "max_seq_len",
    "quantization": "quantization",
    "prefix_caching": "prefix_caching",
    "kv_cache_dtype": "kv_cache_dtype",
    "enforce_eager": "enforce_eager",
}
# What a record without iteration details cannot say (LogInfo.notes).
NO_DETAILS = (
    "prompt tokens counted in the step each prompt ended, not in the steps that computed them "
    "(vLLM's --enable-logging-iteration-details gives those)"
)


class StepRecordScan(NamedTuple):
    """Records in file order (steps and events) and what reading found."""

    times: np.ndarray  # datetime64[ns], the engine host's clock
    kinds: list[str]
    linenos: list[int]
    columns: dict[str, np.ndarray]
    num_lines: int
    num_steps: int
    num_events: int
    num_other: int  # JSON of another kind
    num_unknown: int  # no JSON object
    num_bad: int  # an object cut short or garbled
    kv_capacity: int | None
    has_details: bool


def detect(head: list[str]) -> int:
    """How many of the head's lines are step-record lines (0: not a step record)."""
    count = 0
    for line in head:
        if not (line.lstrip().startswith("{") and '"kind"' in line):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and (obj.get("kind") == STEP or obj.get("format") == FORMAT):
            count += 1
    return count


def scan(path: Readable) -> StepRecordScan:
    steps: list[dict[str, Any]] = []  # the step lines, with their record index
    kinds: list[str] = []
    linenos: list[int] = []
    secs: list[float] = []
    detail: dict[int, str] = {}
    figure_lines: list[FigureLine] = []
    starts: list[tuple[float, Any]] = []  # each start line's time and pid (its vLLM's root)
    step_index: list[int] = []
    life_capacity: list[float] = []  # per step: the KV cache's tokens as its start line said
    num_lines = num_other = num_unknown = num_bad = num_events = 0
    offset, capacity, kv_capacity = 0.0, float("nan"), None
    for lineno, line in read_lines(path):
        num_lines += 1
        if line is None or not line.strip():
            num_unknown += line is None
            continue
        if not line.lstrip().startswith("{"):
            num_unknown += 1
            continue
        try:
            obj = json.loads(line)
            kind = obj["kind"]
            t = float(obj["t"])
        except (ValueError, KeyError, TypeError):
            num_bad += 1
            if num_bad <= 5:
                logger.warning(
                    "%s:%d: expected a step-record line, found one that does not read; skipped", path, lineno
                )
            continue
        if kind == STEP:
            step_index.append(len(kinds))
            steps.append(obj)
            life_capacity.append(capacity)
            _add(kinds, linenos, secs, StepPhase.IDLE, lineno, t + offset)  # phase set below
        elif kind == ENGINE_START:
            if not _readable_start(obj, path, lineno):
                num_bad += 1
                continue
            offset = float(obj.get("utc_offset_s") or 0.0)
            cap = obj.get("kv_capacity_tokens")
            capacity = float(cap) if cap else float("nan")
            kv_capacity = int(cap) if cap else kv_capacity
            detail[len(kinds)] = _start_text(obj)
            starts.append((t + offset, obj.get("pid")))
            _add(kinds, linenos, secs, "engine_start", lineno, t + offset)
            for key, fact in FACTS.items():
                value = obj.get(key)
                if value is not None:
                    detail[len(kinds)] = f"{fact}={_fact(fact, value)}"
                    _add(kinds, linenos, secs, "engine_config", lineno, t + offset)
                    num_events += 1
            num_events += 1
        elif kind == FIGURES:
            figure_lines.append(FigureLine(lineno, t + offset, obj.get("pid"), obj.get("root"), _numbers(obj)))
        elif kind == FAULT_ON:
            detail[len(kinds)] = fault_detail(str(obj.get("fault", "")))
            _add(kinds, linenos, secs, FAULT_ON, lineno, t + offset)
            num_events += 1
        else:
            num_other += 1
    figures: dict[str, dict[int, float]] = {}  # figure -> record index -> value
    for row in _summed(figure_lines, starts):
        for key, value in row.figures.items():
            figures.setdefault(key, {})[len(kinds)] = value
        _add(kinds, linenos, secs, FIGURES, row.lineno, row.t)
    columns, phases, has_details = _step_columns(steps, np.asarray(life_capacity, dtype=float))
    n = len(kinds)
    out: dict[str, np.ndarray] = {}
    idx = np.asarray(step_index, dtype=np.int64)
    for name, values in columns.items():
        full = np.full(n, np.nan)
        full[idx] = values
        out[name] = full
    for name, at in figures.items():
        full = np.full(n, np.nan)
        full[np.fromiter(at, dtype=np.int64)] = list(at.values())
        out[name] = full
    for i, phase in zip(step_index, phases):
        kinds[i] = phase
    text = np.full(n, None, dtype=object)
    for i, value in detail.items():
        text[i] = value
    out["detail"] = text
    stamps = np.asarray(secs, dtype=float)
    usable = np.isfinite(stamps) & (np.abs(stamps) < 5e9)
    times = np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]")
    times[usable] = np.round(stamps[usable] * 1e9).astype("int64").astype("datetime64[ns]")
    return StepRecordScan(
        times=times,
        kinds=kinds,
        linenos=linenos,
        columns=out,
        num_lines=num_lines,
        num_steps=len(steps),
        num_events=num_events,
        num_other=num_other,
        num_unknown=num_unknown,
        num_bad=num_bad,
        kv_capacity=kv_capacity,
        has_details=has_details,
    )


class FigureLine(NamedTuple):
    lineno: int
    t: float  # on the engine host's clock
    pid: Any  # the process that stated the figures
    root: Any  # the pid of its vLLM's first process (the start line's pid); None in records before it
    figures: dict[str, float]


def _numbers(obj: dict[str, Any]) -> dict[str, float]:
    """A figures line's figures: its numbers but the time and the pids."""
    return {
        key: float(value)
        for key, value in obj.items()
        if key not in ("kind", "t", "pid", "root") and isinstance(value, int | float) and not isinstance(value, bool)
    }


def _summed(lines: list[FigureLine], starts: list[tuple[float, Any]]) -> list[FigureLine]:
    """The figures lines as rows of one vLLM: each figure a line states, summed over the processes
    that stated it in the same engine life (each one's latest value), so that the engine core's and
    the worker's counters add up instead of taking turns in one column. A line a new life's process
    wrote while that life was starting (its root is the pid of a start line after it, not of the one
    in effect) is left out: it precedes its life's start line, and the previous life is not its own."""
    start_times = np.asarray([t for t, _ in starts], dtype=float)
    order = np.argsort(start_times, kind="stable")
    start_times, start_pids = start_times[order], [starts[i][1] for i in order]
    latest: dict[int, dict[Any, dict[str, float]]] = {}  # life -> pid -> figure -> its latest value
    rows = []
    for line in sorted(lines, key=lambda line: line.t):
        life = int(np.searchsorted(start_times, line.t, side="right")) - 1
        in_effect = start_pids[life] if life >= 0 else None
        if line.root is not None and line.root != in_effect and line.root in start_pids[life + 1 :]:
            continue
        processes = latest.setdefault(life, {})
        processes.setdefault(line.pid, {}).update(line.figures)
        summed = {name: sum(p[name] for p in processes.values() if name in p) for name in line.figures}
        rows.append(line._replace(figures=summed))
    return rows


def _add(kinds: list[str], linenos: list[int], secs: list[float], kind: str, lineno: int, t: float) -> None:
    kinds.append(kind)
    linenos.append(lineno)
    secs.append(t)


def _readable_start(obj: dict[str, Any], path: Readable, lineno: int) -> bool:
    """True for a start line this reader knows; False (warned) for a garbled one; a newer record is refused."""
    version = obj.get("version")
    if obj.get("format") != FORMAT or not isinstance(version, int):
        logger.warning(
            "%s:%d: expected a start line of format %r with an integer version, found format %r, version %r; skipped",
            path,
            lineno,
            FORMAT,
            obj.get("format"),
            version,
        )
        return False
    if version > VERSION:
        raise LogFormatError(
            f"{path}:{lineno}: step record version {version}, newer than this tokdrift reads ({VERSION}): "
            "upgrade tokdrift"
        )
    return True


def _start_text(obj: dict[str, Any]) -> str:
    model = _fact("model", obj.get("model") or "?")
    return f"vLLM {obj.get('vllm_version') or '?'} step record, model {model}, pid {obj.get('pid')}"


def _fact(fact: str, value: Any) -> str:
    if fact == "model":  # a path or a hub name: its last part, as logformats.identity shortens it
        return str(value).rstrip("/").rsplit("/", 1)[-1]
    return str(value)


def _step_columns(steps: list[dict[str, Any]], capacity: np.ndarray) -> tuple[dict[str, np.ndarray], list[str], bool]:
    """The steps columns of the step lines (each array one value a step), their phases, and
    whether any step carried iteration details."""
    if not steps:
        return {}, [], False
    df = pd.DataFrame.from_records(steps)

    def col(name: str) -> np.ndarray:
        if name not in df:
            return np.full(len(df), np.nan)
        # A figure that is no number (a garbled line) is left empty.
        values: np.ndarray = pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float)
        return values

    running, finished = col("running"), np.nan_to_num(col("finished"))
    first, gen, decode_reqs = col("first_tokens"), col("gen_tokens"), col("decode_reqs")
    outputs = np.isfinite(gen)  # the step carried iteration stats
    decode_tokens = np.where(outputs, np.clip(gen - np.nan_to_num(first), 0, None), np.nan)
    sched_prompt, sched_gen = col("sched_prompt_tokens"), col("sched_gen_tokens")
    details = np.isfinite(sched_prompt) & np.isfinite(sched_gen)
    produced = np.nan_to_num(decode_reqs) + np.nan_to_num(first)
    silent = np.nan_to_num(running) + finished > produced  # a running request made nothing: a chunk computing
    computed = col("computed_tokens")
    prefill = np.where(details, sched_prompt > 0, (np.nan_to_num(computed) > 0) | (np.nan_to_num(first) > 0) | silent)
    decode = np.where(details, sched_gen > 0, np.nan_to_num(decode_tokens) > 0)
    phases = np.where(
        prefill & decode,
        StepPhase.MIXED.value,
        np.where(decode, StepPhase.DECODE.value, np.where(prefill, StepPhase.PREFILL.value, StepPhase.IDLE.value)),
    ).tolist()
    new_tokens = np.where(details, sched_prompt, computed)
    new_tokens = np.where(new_tokens > 0, new_tokens, np.nan)
    step_time = col("itl_s")
    step_time = np.where(np.isfinite(step_time), step_time, col("elapsed_s"))
    step_time = np.where(np.nan_to_num(decode_tokens) > 0, step_time, np.nan)
    batch = np.where(details, col("sched_prompt_reqs") + col("sched_gen_reqs"), running + finished)
    queries, hits = col("prefix_queries"), col("prefix_hits")
    with np.errstate(divide="ignore", invalid="ignore"):
        columns = {
            "num_running_reqs": batch,
            "num_queue_reqs": col("waiting") + np.nan_to_num(col("deferred")),
            "num_deferred": col("deferred"),
            "token_usage": col("kv_usage"),
            "num_tokens": col("kv_usage") * capacity,
            "num_new_seqs": np.where(np.nan_to_num(first) > 0, first, np.nan),
            "new_tokens": new_tokens,
            "cached_tokens": np.where(np.isfinite(new_tokens), col("cached_tokens"), np.nan),
            "num_decode_tokens": decode_tokens,
            "step_time_s": step_time,
            "gen_tps": np.where(step_time > 0, decode_tokens / step_time, np.nan),
            "input_tps": np.where(step_time > 0, new_tokens / step_time, np.nan),
            "cache_hit_rate": np.where(queries > 0, hits / queries, np.nan),
            "num_preemptions": col("preempted"),
        }
    return columns, phases, bool(details.any())
