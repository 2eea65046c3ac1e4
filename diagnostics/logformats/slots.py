"""llama-server's slots -> steps rows: each request's prompt and decode, with the context of every busy slot.

llama-server runs each request in a slot, and a request's lines name both:

    slot launch_slot_: id  0 | task 5 | processing task
    slot update_slots: id  0 | task 5 | prompt done, n_past = 12, n_tokens = 12
    slot print_timing: id  0 | task 5 | n_decoded =    100, tg =  45.67 t/s, tg_3s =  46.00 t/s
    slot print_timing: id  0 | task 5 | prompt eval time = 52.01 ms / 12 tokens (4.33 ms per token, 230.72 tokens per second)
    slot print_timing: id  0 | task 5 |        eval time = 5729.20 ms / 196 tokens (29.23 ms per token, 34.21 tokens per second)
    slot      release: id  0 | task 5 | stop processing: n_past = 207, truncated = 0

- `prompt eval` is a prefill row: new_tokens, input_tps, and cached_tokens = the context at
  the end of the prompt minus the tokens computed, once the context is known.
- A progress line is a decode row for the window since the slot's previous one (`tg_3s`, or
  where a build prints only the cumulative `tg`, the window's tokens over the decode time
  `tg` implies); `eval` is a decode row for the rest of the request (the whole of it without
  progress lines). gen_tps is that request's own rate and step_time_s its time per token: a
  slot's rate is not divided by the batch as an engine-wide rate would be.
- num_running_reqs: slots busy at the time (not known in a log without release lines).
- num_tokens: the context of every busy slot. llama.cpp's KV cache is shared by its slots, so
  one slot's decode cost depends on what the others hold; the row's own slot counts at the
  middle of the window, the others as last known. A request's context is known from its
  `prompt done` line, or else from its release line (context at the end minus its output).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Optional

from diagnostics.logformats.llamacpp import Entry
from diagnostics.logformats.records import MAX_WARNINGS, Records

logger = logging.getLogger(__name__)

TIMING = re.compile(r"(prompt eval|generation eval|eval|total) time\s*=\s*(\S+) ms(?:\s*/\s*(\d+) (?:tokens|runs)"
                    r"\s*\(\s*(\S+) ms per token,\s*(\S+) tokens per second\))?")
PROGRESS = re.compile(r"(?:n_decoded|n_gen)\s*=\s*(\d+), tg\s*=\s*(\S+) t/s(?:, tg_3s\s*=\s*(\S+) t/s)?")
NEW_PROMPT = re.compile(r"new prompt, .*?(?:n_prompt_tokens|task\.n_tokens)\s*=\s*(\d+)")
PROMPT_DONE = re.compile(r"prompt done, (?:n_past\s*=\s*(\d+), )?n_tokens\s*=\s*(\d+)")
RELEASE = re.compile(r"stop processing: (?:n_past|n_tokens)\s*=\s*(\d+)")
DRAFT = re.compile(r"draft acceptance(?: rate)?\s*=\s*(\S+) \(.*?\)(?:, mean len\s*=\s*(\S+))?")
REQUEST = re.compile(r"(?:done )?request: ([A-Z]+) (\S+) \S+ (\d{3})")
N_CTX = re.compile(r"(?:llama_context|llama_new_context_with_model): +n_ctx += +(\d+)")
GO_DURATION = re.compile(r"([\d.]+)(ms|µs|μs|us|ns|h|m|s)")
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ns": 1e-9}
# Inference routes of Ollama and llama-server; health checks and model pulls are not requests.
INFERENCE = re.compile(r"/api/(?:chat|generate|embed|embeddings)\b|/v1/(?:chat/completions|completions|embeddings|"
                       r"responses|messages)\b|^/(?:completion|completions|infill|embedding)\b")
# The first lines a starting server prints (the several of one start count once: frames.assign_engine_lives).
STARTUP_TEXT = ("build: ", "build_info: ", "system_info: ", "main: loading model")
STARTUP_OLD = ("build info", "system info", "HTTP server listening")
# Ollama's engine is its runner (a llama-server, or its own runner process), started per model
# load; `Listening on` is the Ollama server, which starts no engine.
STARTUP_OLLAMA = ("starting llama server", "starting llama-server", "starting runner", "llama runner started")
LIMIT = 1e12  # a count or a time in ms beyond this is a garbled number


class _Slot:
    """One request's state in its slot. It outlives the release line, which some builds print
    before the request's timing block, until the slot's next task."""

    __slots__ = ("task", "busy", "prompt", "end_context", "decoded", "tgen", "prompt_eval", "last_decode", "pending",
                 "progress")

    def __init__(self, task: Optional[int] = None) -> None:
        self.task = task
        self.busy = True
        self.prompt: Optional[float] = None  # context when decoding began
        self.end_context: Optional[float] = None  # context at the release line
        self.decoded = 0.0  # tokens generated so far, as last printed
        self.tgen = 0.0  # decode seconds so far, as last implied
        self.prompt_eval: Optional[tuple[float, float, Optional[float]]] = None  # ms, tokens, tokens/s
        self.last_decode: Optional[int] = None  # record of the slot's last decode row
        self.pending: list[tuple[int, float, Optional[float], Optional[float]]] = []  # rows awaiting the context
        self.progress: list[tuple[int, float]] = []  # (record, decode s) of progress rows awaiting a busy time


class SlotReader:
    """Pass two: entries in file order -> records with a time each (seconds on the file's clock)."""

    def __init__(self, path: Path, clock: str, has_release: bool) -> None:
        self.path = path
        self.clock = clock
        self.has_release = has_release
        self.records = Records()
        self.secs: list[float] = []
        self.slots: dict[int, _Slot] = {}
        self.timing_slot: tuple[int, int] = (-1, -1)  # of a timing block whose lines carry no slot
        self.busy_s = 0.0
        self.now = 0.0
        self.kv_capacity: Optional[int] = None
        self.num_step_lines = self.num_events = self.num_other = self.num_bad_lines = self.num_bad_values = 0
        self.num_requests = 0

    def new_life(self, lineno: int, origin: float) -> None:
        """A process start the relative stamps count from (their 0.00.000.000)."""
        self._startup(lineno, origin, "engine start (llama.cpp's stamps count from it)")

    def read(self, entry: Entry, sec: float) -> None:
        self.now = self.busy_s if self.clock == "busy" else sec
        kind, payload, lineno = entry.kind, entry.payload, entry.lineno
        if kind == "slot":
            self._slot_line(lineno, *payload)
        elif kind == "srv":
            func, body = payload
            if body.startswith("all slots are idle"):
                self._idle(lineno)
            elif func == "load_model" and body.startswith("loading model"):
                self._startup(lineno, self.now, "llama.cpp " + body[:200])
            elif m := REQUEST.match(body):
                self._request(lineno, m.group(1), m.group(2), int(m.group(3)), None)
            else:
                self.num_other += 1
        elif kind == "old":
            self._old_line(lineno, *payload)
        elif kind == "slog":
            level, msg, rest = payload
            if msg.startswith(STARTUP_OLLAMA):
                self._startup(lineno, self.now, "ollama " + (msg + rest)[:200])
            else:
                self.num_other += 1
        elif kind == "gin":
            status, latency, ip, method, route = payload
            self._request(lineno, method, route, status, _go_seconds(latency), ip)
        elif kind == "golog":
            self.num_other += 1
        elif kind == "text":
            self._text_line(lineno, payload)

    # --- by kind of line ---

    def _slot_line(self, lineno: int, func: str, slot_id: int, task: int, body: str) -> None:
        if body.startswith("processing task"):
            self.slots[slot_id] = _Slot(task)
            self.num_other += 1
        elif body.startswith("new prompt"):
            m = NEW_PROMPT.match(body)
            slot = self._slot(slot_id, task)
            slot.prompt, slot.busy = (float(m.group(1)) if m else None), True
            self.num_other += 1
        elif body.startswith("prompt done"):
            m = PROMPT_DONE.match(body)
            slot = self._slot(slot_id, task)
            slot.busy = True
            if m:
                slot.prompt = float(m.group(1) or m.group(2))
            self.num_other += 1
        elif body.startswith(("n_decoded", "n_gen")):
            self._progress(lineno, slot_id, task, body)
        elif "time" in body[:20] and TIMING.match(body.lstrip()):
            self._timing(lineno, slot_id, task, body.lstrip())
        elif body.startswith("draft acceptance"):
            self._draft(slot_id, body)
        elif body.startswith("stop processing"):
            m = RELEASE.match(body)
            self._release(slot_id, float(m.group(1)) if m else None)
        elif not body and func.startswith("print_timing"):
            self.timing_slot = (slot_id, task)  # the block follows on lines of its own
            self.num_other += 1
        else:
            self.num_other += 1

    def _old_line(self, lineno: int, func: str, text: str, kv: dict) -> None:
        slot_id = _int(kv.get("id_slot", kv.get("slot_id")))
        task = _int(kv.get("id_task", kv.get("task_id")))
        if text.startswith(("prompt eval time", "generation eval time")):
            self._timing(lineno, slot_id, task, text)
        elif text == "slot released":
            n_past = _int(kv.get("n_past"), None)
            self._release(slot_id, float(n_past) if n_past is not None else None)
        elif "processing task" in text:
            self.slots[slot_id] = _Slot(task)
            self.num_other += 1
        elif text.startswith("all slots are idle"):
            self._idle(lineno)
        elif func == "main" and text.startswith(STARTUP_OLD):
            self._startup(lineno, self.now, f"llama.cpp {text} " + " ".join(f"{k}={v}" for k, v in kv.items()
                                                                            if k not in ("tid", "timestamp"))[:150])
        elif text == "request" and "path" in kv:
            self._request(lineno, kv.get("method", ""), kv["path"], _int(kv.get("status"), 0), None)
        else:
            self.num_other += 1

    def _text_line(self, lineno: int, msg: str) -> None:
        if TIMING.match(msg):
            self._timing(lineno, *self.timing_slot, msg)
        elif msg.startswith("draft acceptance"):
            self._draft(self.timing_slot[0], msg)
        elif msg.startswith(STARTUP_TEXT):
            self._startup(lineno, self.now, "llama.cpp " + msg[:200])
        elif m := N_CTX.match(msg):
            self.kv_capacity = int(m.group(1))
            self.num_other += 1
        elif m := REQUEST.match(msg):
            self._request(lineno, m.group(1), m.group(2), int(m.group(3)), None)
        else:
            self.num_other += 1

    # --- what lines mean ---

    def _progress(self, lineno: int, slot_id: int, task: int, body: str) -> None:
        m = PROGRESS.match(body)
        if m is None:
            self._bad_line(lineno, "a progress line")
            return
        slot = self._slot(slot_id, task)
        n, tg = self._num(m.group(1), lineno), self._num(m.group(2), lineno)
        tg3 = self._num(m.group(3), lineno) if m.group(3) else None
        slot.busy = True
        if n is None or n <= slot.decoded:
            self.num_other += 1
            return
        tgen = n / tg if tg else None
        if tg3:
            rate = tg3
        elif tgen is not None and tgen > slot.tgen:
            rate = (n - slot.decoded) / (tgen - slot.tgen)
        else:
            rate = None
        if rate is not None:
            i = self._add(lineno, "decode", self.now)
            self._decode_fields(i, slot, rate, 1.0 / rate, n - slot.decoded)
            self._context(slot, i, (slot.decoded + n) / 2)
            slot.last_decode = i
            if self.clock == "busy":
                slot.progress.append((i, tgen if tgen is not None else slot.tgen))
            self.num_step_lines += 1
        else:
            self.num_other += 1
        slot.decoded, slot.tgen = n, tgen if tgen is not None else slot.tgen

    def _timing(self, lineno: int, slot_id: int, task: int, text: str) -> None:
        m = TIMING.match(text)
        if m is None or (m.group(1) != "total" and m.group(3) is None):
            self._bad_line(lineno, "a timing line")
            return
        if m.group(1) == "total":
            self.num_other += 1
            return
        ms, n = self._num(m.group(2), lineno), self._num(m.group(3), lineno)
        per, tps = self._num(m.group(4), lineno), self._num(m.group(5), lineno)
        if ms is None or n is None or ms < 0:
            self.num_other += 1
            return
        slot = self._slot(slot_id, task)
        if m.group(1) == "prompt eval":
            slot.prompt_eval = (ms, n, tps)
            self.num_other += 1  # its row is written with the decode, whose time places it
            return
        self._request_done(lineno, slot, ms, n, per, tps)

    def _request_done(self, lineno: int, slot: _Slot, eval_ms: float, num_out: float, per: Optional[float],
                      tps: Optional[float]) -> None:
        prompt_ms, num_new, input_tps = slot.prompt_eval or (0.0, 0.0, None)
        if self.clock == "busy":
            start = self.busy_s
            self.busy_s += (prompt_ms + eval_ms) / 1000.0
            t_prefill, t_end = start + prompt_ms / 1000.0, self.busy_s
            for i, tgen in slot.progress:
                self.secs[i] = t_prefill + tgen
        else:
            t_end = self.now
            t_prefill = t_end - eval_ms / 1000.0
        if num_new > 0 and input_tps:
            i = self._add(lineno, "prefill", t_prefill)
            self.records.put(i, "new_tokens", num_new)
            self.records.put(i, "input_tps", input_tps)
            self._running(i, slot)
            self._context(slot, i, 0.0, num_new)
        tail, tail_s = num_out - slot.decoded, eval_ms / 1000.0 - slot.tgen
        if slot.decoded == 0 and tps and num_out >= 1:
            rate, step = tps, (per / 1000.0 if per else 1.0 / tps)
        elif slot.decoded > 0 and tail >= 1 and tail_s > 0:
            rate, step = tail / tail_s, tail_s / tail
        else:
            rate = None
        if rate is not None:
            i = self._add(lineno, "decode", t_end)
            self._decode_fields(i, slot, rate, step, tail)
            self._context(slot, i, (slot.decoded + num_out) / 2)
            slot.last_decode = i
        self.num_step_lines += 1
        slot.decoded, slot.tgen = max(num_out, slot.decoded), eval_ms / 1000.0
        slot.prompt_eval, slot.progress = None, []
        self._resolve(slot)

    def _release(self, slot_id: int, context: Optional[float]) -> None:
        slot = self.slots.get(slot_id)
        self.num_other += 1
        if slot is None:
            return
        slot.busy = False
        slot.end_context = context
        self._resolve(slot)

    def _resolve(self, slot: _Slot) -> None:
        """Rows that waited for their request's context get it once the release line gives it."""
        if slot.prompt is None and slot.end_context is not None:
            # The last token sampled is never fed back: the context at release is one short of prompt + output.
            slot.prompt = max(slot.end_context - slot.decoded + 1, 0.0)
        if slot.prompt is None:
            return
        for i, mid, others, num_new in slot.pending:
            if others is not None:
                self.records.put(i, "num_tokens", slot.prompt + mid + others)
            if num_new is not None and slot.prompt >= num_new:
                self.records.put(i, "cached_tokens", slot.prompt - num_new)
        slot.pending = []

    def _draft(self, slot_id: int, text: str) -> None:
        m = DRAFT.match(text)
        slot = self.slots.get(slot_id)
        self.num_other += 1
        if m is None or slot is None or slot.last_decode is None:
            return
        rate = self._num(m.group(1), 0)
        if rate is not None and 0 <= rate <= 1:
            self.records.put(slot.last_decode, "accept_rate", rate)
        mean = self._num(m.group(2), 0) if m.group(2) else None
        if mean is not None:
            self.records.put(slot.last_decode, "accept_len", mean)

    def _idle(self, lineno: int) -> None:
        self._add(lineno, "idle", self.now)
        self.num_step_lines += 1
        for slot in self.slots.values():
            slot.busy = False

    def _startup(self, lineno: int, sec: float, detail: str) -> None:
        i = self._add(lineno, "engine_start", sec)
        self.records.put(i, "detail", detail)
        self.slots.clear()
        self.num_events += 1

    def _request(self, lineno: int, method: str, route: str, status: int, seconds: Optional[float],
                 client: str = "") -> None:
        if not INFERENCE.search(route):
            self.num_other += 1
            return
        i = self._add(lineno, "request", self.now)
        took = f" in {seconds:.3f} s" if seconds is not None else ""
        self.records.put(i, "detail", f"{method} {route} -> {status}{took}" + (f" from {client}" if client else ""))
        self.num_events += 1
        self.num_requests += 1

    # --- helpers ---

    def _slot(self, slot_id: int, task: int) -> _Slot:
        """The slot's request state; a line of another task than the slot's is a new request."""
        slot = self.slots.get(slot_id)
        if slot is None or (task >= 0 and slot.task is not None and slot.task >= 0 and slot.task != task):
            slot = self.slots[slot_id] = _Slot(task)  # a new request without a launch line in the log
        if slot.task is None or slot.task < 0:
            slot.task = task
        return slot

    def _add(self, lineno: int, kind: str, sec: float) -> int:
        self.secs.append(sec)
        return self.records.add(lineno, kind)

    def _decode_fields(self, i: int, slot: _Slot, rate: float, step: float, num_tokens: float) -> None:
        self.records.put(i, "gen_tps", rate)
        self.records.put(i, "step_time_s", step)
        self.records.put(i, "num_decode_tokens", num_tokens)
        self._running(i, slot)

    def _running(self, i: int, slot: _Slot) -> None:
        """Slots busy while the row's numbers were measured: its own (even when its release line
        came first) and every other busy one."""
        if self.has_release:
            busy = sum(other.busy for other in self.slots.values() if other is not slot)
            self.records.put(i, "num_running_reqs", float(busy + 1))

    def _context(self, slot: _Slot, i: int, mid: float, num_new: Optional[float] = None) -> None:
        others: Optional[float] = 0.0
        if self.has_release:  # without release lines, which slots are busy is unknown: own context only
            for other in self.slots.values():
                if other is slot or not other.busy:
                    continue
                if other.prompt is None:
                    others = None
                    break
                others += other.prompt + other.decoded
        if slot.prompt is None:
            slot.pending.append((i, mid, others, num_new))
            return
        if others is not None:
            self.records.put(i, "num_tokens", slot.prompt + mid + others)
        if num_new is not None and slot.prompt >= num_new:
            self.records.put(i, "cached_tokens", slot.prompt - num_new)

    def _num(self, text: Optional[str], lineno: int) -> Optional[float]:
        """A printed number; None for llama.cpp's own `nan`/`inf` (no tokens) and for garbled text."""
        if text is None:
            return None
        text = text.strip().rstrip(",")
        try:
            value = float(text)
        except ValueError:
            value = math.inf
        if math.isfinite(value) and abs(value) <= LIMIT:
            return value
        if text.lstrip("+-").lower() not in ("nan", "inf", "infinity"):
            self.num_bad_values += 1
            if self.num_bad_values <= MAX_WARNINGS:
                logger.warning("%s:%d: expected a number, found %r; left empty", self.path, lineno, text[:40])
        return None

    def _bad_line(self, lineno: int, what: str) -> None:
        self.num_bad_lines += 1
        if self.num_bad_lines <= MAX_WARNINGS:
            logger.warning("%s:%d: %s that does not read (truncated?); line skipped", self.path, lineno, what)


def _int(text: Optional[str], default: Optional[int] = -1) -> Optional[int]:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


def _go_seconds(text: str) -> Optional[float]:
    """Seconds of a Go duration as gin prints it: `2.623718375s`, `414.019µs`, `8m44s`, `1h2m3s`."""
    parts = GO_DURATION.findall(text)
    if not parts or "".join(v + u for v, u in parts) != text:
        return None
    try:
        return sum(float(v) * GO_UNITS[u] for v, u in parts)
    except ValueError:
        return None
