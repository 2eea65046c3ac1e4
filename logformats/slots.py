"""llama-server's slots -> steps rows: each request's prompt and decode, with the context of every busy slot.

llama-server runs each request in a slot; messages.py reads what a line says and calls this.

- `prompt eval` is a prefill row: new_tokens, input_tps, and cached_tokens = the context at
  the end of the prompt minus the tokens computed, once the context is known.
- A progress line is a decode row for the window since the slot's previous one (`tg_3s`, or
  where a build prints only the cumulative `tg`, the window's tokens over the decode time
  `tg` implies); `eval` is a decode row for the rest of the request (the whole of it without
  progress lines). gen_tps is that request's own rate and step_time_s its time per token: a
  slot's rate is not divided by the batch as an engine-wide rate would be.
- num_running_reqs: slots busy at the time (not known in a log without release lines).
- With the stamps of `--log-timestamps` (the relative clock), each row's window is placed among
  the other requests' prompts and decodes (overlap.py: the slots share one batch): a decode row's
  num_running_reqs is the slots decoding over its window on average, and a window that held
  other slots' prompt tokens is `mixed`, its input_tps theirs (no decode step's time: each step
  beside a prompt took that prompt's time); a prefill row's num_running_reqs is the slots at work
  beside it, itself included, and one that shared its window with other slots' work is `mixed`
  too (its `prompt eval time` holds theirs). Without stamps, a prefill row is mixed where another
  slot was busy at its line.
- num_tokens: the context of every busy slot. llama.cpp's KV cache is shared by its slots, so
  one slot's decode cost depends on what the others hold; the row's own slot counts at the
  middle of the window, the others as last known. A request's context is known from its
  `prompt done` line, or else from its release line (context at the end minus its output).

Times are seconds on the file's clock (llamacpp.clocks). On the busy clock a request's rows are
placed when its timing block arrives: its prompt, then its decode, each for as long as it took.
"""

from __future__ import annotations

import logging
import math
import re

import numpy as np

from logformats import overlap
from logformats.records import MAX_WARNINGS, Records
from logformats.text import Readable
from rundir.schema import StepPhase

logger = logging.getLogger(__name__)

LIMIT = 1e12  # a count, or a time in ms, beyond this is a garbled number
MIN_WINDOW_S = 1e-3  # a row's window shorter than this (a stamp's resolution) says nothing of its company
MIN_PROMPT_TOKENS = 1.0  # other slots' prompt tokens inside a decode window from which it is mixed
SHARED_SHARE = 0.05  # other slots at work for this share of a prefill's window (on average): it is mixed
# Inference routes of Ollama and llama-server; health checks and model pulls are not requests.
INFERENCE = re.compile(
    r"/api/(?:chat|generate|embed|embeddings)\b|/v1/(?:chat/completions|completions|embeddings|"
    r"responses|messages)\b|^/(?:completion|completions|infill|embedding)\b"
)


class _Slot:
    """One request's state in its slot. It outlives the release line, which some builds print
    before the request's timing block, until the slot's next task."""

    __slots__ = (
        "task",
        "busy",
        "prompt",
        "end_context",
        "decoded",
        "tgen",
        "prompt_eval",
        "last_decode",
        "pending",
        "progress",
        "key",
        "spans",
    )

    def __init__(self, task: int | None, key: int) -> None:
        self.task = task
        self.key = key  # the request's number in the file (overlap.Work.request)
        self.busy = True
        self.prompt: float | None = None  # context when decoding began
        self.end_context: float | None = None  # context at the release line
        self.decoded = 0.0  # tokens generated so far, as last printed
        self.tgen = 0.0  # decode seconds so far, as last implied
        self.prompt_eval: tuple[float, float, float | None] | None = None  # ms, tokens, tokens/s
        self.last_decode: int | None = None  # record of the slot's last decode row
        self.pending: list[tuple[int, float, float | None, float | None]] = []  # rows awaiting the context
        self.progress: list[tuple[int, float]] = []  # (record, decode s) of progress rows awaiting a busy time
        self.spans: list[int] = []  # the request's progress rows in SlotReader.spans


def _holds(slot: _Slot) -> float | None:
    """The KV tokens a slot's last request left: its context at release, else as far as read."""
    if slot.end_context is not None:
        return slot.end_context
    return slot.prompt + slot.decoded if slot.prompt is not None else None


class SlotReader:
    """Requests in slots -> records, each with a time (seconds on the file's clock)."""

    def __init__(self, path: Readable, clock: str, has_release: bool, held: dict[int, float] | None = None) -> None:
        self.path = path
        # KV tokens each idle slot held when an earlier piece of the same log ended (a soak reads
        # the log as it grows): theirs until the slot's next task shows up here.
        self.held_before: dict[int, float] = dict(held or {})
        self.clock = clock
        self.has_release = has_release
        self.records = Records()
        self.secs: list[float] = []
        self.slots: dict[int, _Slot] = {}
        self.block_slot: tuple[int, int] = (-1, -1)  # (slot, task) of a timing block whose lines name none
        self.busy_s = 0.0
        self.now = 0.0
        self.kv_capacity: int | None = None
        self.num_step_lines = self.num_events = self.num_other = self.num_bad_lines = self.num_bad_values = 0
        self.num_requests = 0
        self.num_slot_requests = 0
        # Each row's window and each request's prefill and decode, on the file's clock (shared_batches).
        self.spans: list[tuple[int, int, float, float, float]] = []  # (record, request, start, end, own prompt tokens)
        self.work: list[tuple[int, bool, float, float, float]] = []  # (request, decode, start, end, prompt tokens)
        self.prefills: list[int] = []  # records of the prefill rows
        self.served: set[int] = set()  # slots that ran a request

    def at(self, sec: float) -> None:
        """The time of the line read next (on the busy clock, the busy time so far)."""
        self.now = self.busy_s if self.clock == "busy" else sec

    # --- a request's life ---

    def launch(self, slot_id: int, task: int) -> None:
        self.slots[slot_id] = self._new_slot(task)
        self.num_other += 1

    def prompt_context(self, slot_id: int, task: int, tokens: float | None) -> None:
        """The request's context once its prompt is in (`new prompt`, `prompt done`)."""
        slot = self._slot(slot_id, task)
        slot.busy = True
        if tokens is not None:
            slot.prompt = tokens
        self.num_other += 1

    def progress(
        self, lineno: int, slot_id: int, task: int, n: float | None, tg: float | None, tg3: float | None
    ) -> None:
        slot = self._slot(slot_id, task)
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
            i = self._add(lineno, StepPhase.DECODE, self.now)
            self._decode_fields(i, slot, rate, 1.0 / rate, n - slot.decoded)
            self._context(slot, i, (slot.decoded + n) / 2)
            slot.last_decode = i
            if self.clock == "busy":
                slot.progress.append((i, tgen if tgen is not None else slot.tgen))
            else:
                slot.spans.append(len(self.spans))
                self.spans.append((i, slot.key, self.now - (n - slot.decoded) / rate, self.now, 0.0))
            self.num_step_lines += 1
        else:
            self.num_other += 1
        slot.decoded, slot.tgen = n, tgen if tgen is not None else slot.tgen

    def prompt_eval(self, slot_id: int, task: int, ms: float, num_new: float, tps: float | None) -> None:
        """Kept until the decode's line: its time places the prefill."""
        self._slot(slot_id, task).prompt_eval = (ms, num_new, tps)
        self.num_other += 1

    def request_done(
        self, lineno: int, slot_id: int, task: int, eval_ms: float, num_out: float, per: float | None, tps: float | None
    ) -> None:
        slot = self._slot(slot_id, task)
        self.served.add(slot_id)
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
        if self.clock != "busy":
            self._place(slot, t_prefill - prompt_ms / 1000.0, t_prefill, t_end, num_new if input_tps else 0.0)
        if num_new > 0 and input_tps:
            i = self._add(lineno, StepPhase.PREFILL, t_prefill)
            self.records.put(i, "new_tokens", num_new)
            self.records.put(i, "input_tps", input_tps)
            self._running(i, slot)
            self.prefills.append(i)
            self._context(slot, i, 0.0, num_new)
            if self.clock != "busy":
                self.spans.append((i, slot.key, t_prefill - prompt_ms / 1000.0, t_prefill, num_new))
        tail, tail_s = num_out - slot.decoded, eval_ms / 1000.0 - slot.tgen
        # One token is no decode to time (llama.cpp prints it as 0.00 ms, a million tokens a second).
        if slot.decoded == 0 and tps and num_out >= 2 and eval_ms > 0:
            rate, step = tps, (per / 1000.0 if per else 1.0 / tps)
        elif slot.decoded > 0 and tail >= 1 and tail_s > 0:
            rate, step = tail / tail_s, tail_s / tail
        else:
            rate = None
        if rate is not None:
            i = self._add(lineno, StepPhase.DECODE, t_end)
            self._decode_fields(i, slot, rate, step, tail)
            self._context(slot, i, (slot.decoded + num_out) / 2)
            slot.last_decode = i
            if self.clock != "busy":
                self.spans.append((i, slot.key, max(t_end - tail * step, t_prefill), t_end, 0.0))
        self.num_step_lines += 1
        slot.decoded, slot.tgen = max(num_out, slot.decoded), eval_ms / 1000.0
        slot.prompt_eval, slot.progress = None, []
        self._resolve(slot)

    def shared_batches(self) -> None:
        """Each row's company over its window (overlap.py, the module's text): the slots decoding or
        prefilling beside it, and a window that shared its batches with other slots' work made
        `mixed` (a decode beside their prompts; a prefill beside any of their work). The windows are
        placed on llama.cpp's own stamps (`--log-timestamps`, to the microsecond) only: a wall
        clock's lines without a stamp of their own take the next one's, and the busy clock lays
        requests end to end. Without stamps, a server whose log shows more than one slot serving
        may have shared any prompt's batches: every prefill row is mixed (its time is not known
        to be its own)."""
        if self.clock != "relative" and len(self.served) > 1:
            for i in self.prefills:
                self.records.kinds[i] = StepPhase.MIXED
        if self.clock != "relative" or not self.spans or not self.work:
            return
        rows = np.array(self.spans, dtype=float)  # [rows, (record, request, start, end, own prompt tokens)]
        rows = rows[rows[:, 3] - rows[:, 2] >= MIN_WINDOW_S]
        work = np.array(self.work, dtype=float)  # [entries, (request, decode, start, end, tokens)]
        found = overlap.company(
            rows[:, 1].astype(np.int64),
            rows[:, 2],
            rows[:, 3],
            overlap.Work(
                request=work[:, 0].astype(np.int64),
                decode=work[:, 1] > 0,
                start=work[:, 2],
                end=work[:, 3],
                tokens=work[:, 4],
            ),
        )
        for k, i in enumerate(rows[:, 0].astype(np.int64).tolist()):
            decoding, prefilling = float(found.slots_decoding[k]), float(found.slots_prefilling[k])
            span = float(rows[k, 3] - rows[k, 2])
            other_prompt = float(found.other_prompt[k])
            if self.records.kinds[i] == StepPhase.PREFILL:
                # Rounded: a window alone reads 1 exactly.
                self.records.put(i, "num_running_reqs", round(1.0 + decoding + prefilling, 3))
                if decoding + prefilling >= SHARED_SHARE:
                    self.records.kinds[i] = StepPhase.MIXED
                continue
            self.records.put(i, "num_running_reqs", round(1.0 + decoding, 3))
            if other_prompt >= MIN_PROMPT_TOKENS:
                self.records.kinds[i] = StepPhase.MIXED
                self.records.put(i, "input_tps", other_prompt / span)

    def draft(self, slot_id: int, rate: float | None, mean_len: float | None) -> None:
        """Speculative decoding's acceptance, onto the slot's last decode row."""
        slot = self.slots.get(slot_id)
        self.num_other += 1
        if slot is None or slot.last_decode is None:
            return
        if rate is not None and 0 <= rate <= 1:
            self.records.put(slot.last_decode, "accept_rate", rate)
        if mean_len is not None:
            self.records.put(slot.last_decode, "accept_len", mean_len)

    def release(self, slot_id: int, context: float | None) -> None:
        slot = self.slots.get(slot_id)
        self.num_other += 1
        if slot is None:
            return
        slot.busy = False
        slot.end_context = context
        self._resolve(slot)

    # --- the engine ---

    def idle(self, lineno: int) -> None:
        self._add(lineno, StepPhase.IDLE, self.now)
        self.num_step_lines += 1
        for slot in self.slots.values():
            slot.busy = False

    def startup(self, lineno: int, detail: str) -> None:
        self._start(lineno, self.now, detail)
        self.held_before.clear()

    def config(self, lineno: int, facts: list[tuple[str, str]]) -> None:
        """What a start-up line says the engine is (logformats.identity): `engine_config` events."""
        for key, value in facts:
            i = self._add(lineno, "engine_config", self.now)
            self.records.put(i, "detail", f"{key}={value}")
            self.num_events += 1

    def new_life(self, lineno: int, origin: float, first: bool = False) -> None:
        """A process start the relative stamps count from (their 0.00.000.000); the `first` of a
        piece of the log may be the process an earlier piece read, so what its slots held stays
        (its start-up lines, if here, clear it)."""
        self._start(lineno, origin, "engine start (llama.cpp's stamps count from it)")
        if not first:
            self.held_before.clear()

    def request(
        self, lineno: int, method: str, route: str, status: int, seconds: float | None, client: str = ""
    ) -> None:
        """An access line: a `request` event for an inference route, with its latency where printed."""
        if not INFERENCE.search(route):
            self.num_other += 1
            return
        i = self._add(lineno, "request", self.now)
        took = f" in {seconds:.3f} s" if seconds is not None else ""
        self.records.put(i, "detail", f"{method} {route} -> {status}{took}" + (f" from {client}" if client else ""))
        self.num_events += 1
        self.num_requests += 1

    def kv_space(self, lineno: int, kind: str, batch: float | None, text: str) -> None:
        """The KV cache had no room for a batch (`kv_no_space`: retried smaller; `kv_full`: failed);
        `batch` is the size the line names (the retry's, or the one that did not fit)."""
        i = self._add(lineno, kind, self.now)
        self.records.put(i, "count", 1.0)
        if batch is not None:
            self.records.put(i, "limit", batch)
        self.records.put(i, "detail", text[:200])
        self.num_events += 1

    # --- lines that say nothing, or nothing readable ---

    def other(self) -> None:
        self.num_other += 1

    def number(self, text: str | None, lineno: int) -> float | None:
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

    def bad_line(self, lineno: int, what: str) -> None:
        self.num_bad_lines += 1
        if self.num_bad_lines <= MAX_WARNINGS:
            logger.warning("%s:%d: %s that does not read (truncated?); line skipped", self.path, lineno, what)

    # --- helpers ---

    def _slot(self, slot_id: int, task: int) -> _Slot:
        """The slot's request state; a line of another task than the slot's is a new request."""
        slot = self.slots.get(slot_id)
        if slot is None or (task >= 0 and slot.task is not None and slot.task >= 0 and slot.task != task):
            slot = self.slots[slot_id] = self._new_slot(task)  # a new request without a launch line in the log
        if slot.task is None or slot.task < 0:
            slot.task = task
        return slot

    def _new_slot(self, task: int) -> _Slot:
        self.num_slot_requests += 1
        return _Slot(task, self.num_slot_requests)

    def _place(self, slot: _Slot, start: float, t_prefill: float, t_end: float, prompt_tokens: float) -> None:
        """The request's prefill and decode on the clock (shared_batches); its progress rows' windows
        start no earlier than its decode."""
        if prompt_tokens > 0 and t_prefill > start:
            self.work.append((slot.key, False, start, t_prefill, prompt_tokens))
        if t_end > t_prefill:
            self.work.append((slot.key, True, t_prefill, t_end, 0.0))
        for k in slot.spans:
            i, key, a, b, own = self.spans[k]
            self.spans[k] = (i, key, max(a, t_prefill), b, own)
        slot.spans = []

    def _start(self, lineno: int, sec: float, detail: str) -> None:
        i = self._add(lineno, "engine_start", sec)
        self.records.put(i, "detail", detail)
        self.slots.clear()
        self.num_events += 1

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

    def _context(self, slot: _Slot, i: int, mid: float, num_new: float | None = None) -> None:
        others: float | None = 0.0
        if self.has_release:  # without release lines, which slots are busy is unknown: own context only
            self._idle_held(slot, i)
            busy = [other for other in self.slots.values() if other is not slot and other.busy]
            # One busy slot whose prompt is unknown leaves what the others hold unknown.
            others = None if any(o.prompt is None for o in busy) else sum((o.prompt or 0.0) + o.decoded for o in busy)
        if slot.prompt is None:
            slot.pending.append((i, mid, others, num_new))
            return
        self._put_context(i, slot.prompt, mid, others, num_new)

    def _idle_held(self, slot: _Slot, i: int) -> None:
        """KV tokens the idle slots still hold: each keeps its last conversation for prompt caching
        until its next task. Where the KV cache is one buffer for all slots (llama.cpp before
        per-slot streams), a decode attends up to the highest cell used, theirs included."""
        held = sum(tokens for slot_id, tokens in self.held_before.items() if slot_id not in self.slots)
        for other in self.slots.values():
            if other is not slot and not other.busy:
                held += _holds(other) or 0.0
        self.records.put(i, "idle_slot_tokens", held)

    def holdings(self) -> dict[int, float]:
        """KV tokens each slot holds at the end of what was read (a busy one: its context so far),
        for the reader of the log's next piece (`held`)."""
        out = {slot_id: tokens for slot_id, tokens in self.held_before.items() if slot_id not in self.slots}
        for slot_id, slot in self.slots.items():
            tokens = _holds(slot)
            if tokens is not None:
                out[slot_id] = tokens
        return out

    def _resolve(self, slot: _Slot) -> None:
        """Rows that waited for their request's context get it once the release line gives it."""
        if slot.prompt is None and slot.end_context is not None:
            # The last token sampled is never fed back: the context at release is one short of prompt + output.
            slot.prompt = max(slot.end_context - slot.decoded + 1, 0.0)
        if slot.prompt is None:
            return
        for i, mid, others, num_new in slot.pending:
            self._put_context(i, slot.prompt, mid, others, num_new)
        slot.pending = []

    def _put_context(self, i: int, prompt: float, mid: float, others: float | None, num_new: float | None) -> None:
        if others is not None:
            self.records.put(i, "num_tokens", prompt + mid + others)
        if num_new is not None and prompt >= num_new:
            self.records.put(i, "cached_tokens", prompt - num_new)
