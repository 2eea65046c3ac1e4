"""What each llama-server or Ollama line says: unwrapped entries (llamacpp.scan) -> calls on a SlotReader.

The shapes, as the engines print them (docs/diagnostics.md names the sources):

    slot launch_slot_: id  0 | task 5 | processing task[, is_child = 0]
    slot update_slots: id  0 | task 5 | new prompt, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 12   (later: task.n_tokens)
    slot update_slots: id  0 | task 5 | prompt done, n_past = 12, n_tokens = 12          (later: prompt done, n_tokens = 12, ...)
    slot print_timing: id  0 | task 5 | n_decoded = 100, tg = 45.67 t/s[, tg_3s = 46.00 t/s]   (later: n_gen = ...)
    slot print_timing: id  0 | task 5 | prompt eval time = 52.01 ms / 12 tokens (4.33 ms per token, 230.72 tokens per second)
    slot print_timing: id  0 | task 5 |        eval time = ... / 196 tokens (...)        (older: a header line, then bare lines)
    slot print_timing: id  0 | task 5 | draft acceptance = 0.46 (55 accepted / 119 generated)[, mean len = 2.38]
    slot      release: id  0 | task 5 | stop processing: n_past = 207, truncated = 0    (later: n_tokens = ...)
    srv  update_slots: all slots are idle
    srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size[ - ...], i = 0, n_batch = 1024, ret = 1
    update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 256       (early 2024)
    srv  update_slots: failed to decode the batch: KV cache is full - ..., i = 0, n_batch = 1, ret = 1
    update_slots : failed to decode the batch, n_batch = 1, ret = 1                                      (early 2024)
    decode: failed to find a memory slot for batch of size 512                    (the library, 2025 on)
    INFO [print_timings] generation eval time = ... ms / N runs (...) | tid="..." timestamp=... id_slot=0 id_task=5 ...
    INFO [update_slots] slot released | ... id_slot=0 id_task=5 n_ctx=... n_past=... truncated=false
    [GIN] 2025/01/19 - 17:41:15 | 200 |  5.257673085s |  127.0.0.1 | POST     "/api/chat"
"""

from __future__ import annotations

import re

from logformats import identity
from logformats.llamacpp import Entry
from logformats.slots import SlotReader

TIMING = re.compile(
    r"(prompt eval|generation eval|eval|total) time\s*=\s*(\S+) ms(?:\s*/\s*(\d+) (?:tokens|runs)"
    r"\s*\(\s*(\S+) ms per token,\s*(\S+) tokens per second\))?"
)
PROGRESS = re.compile(r"(?:n_decoded|n_gen)\s*=\s*(\d+), tg\s*=\s*(\S+) t/s(?:, tg_3s\s*=\s*(\S+) t/s)?")
NEW_PROMPT = re.compile(r"new prompt, .*?(?:n_prompt_tokens|task\.n_tokens)\s*=\s*(\d+)")
PROMPT_DONE = re.compile(r"prompt done, (?:n_past\s*=\s*(\d+), )?n_tokens\s*=\s*(\d+)")
RELEASE = re.compile(r"stop processing: (?:n_past|n_tokens)\s*=\s*(\d+)")
DRAFT = re.compile(r"draft acceptance(?: rate)?\s*=\s*(\S+) \(.*?\)(?:, mean len\s*=\s*(\S+))?")
# The KV cache had no room for a batch: the server halves the batch and retries (no contiguous
# run of free cells: a full or fragmented cache), and at one token gives up and fails the requests.
KV_NO_SPACE = re.compile(
    r"(?:\w+\s*: )?failed to find (?:free space in the KV cache|a memory slot)"
    r"(?:.*?n_batch\s*=\s*(\d+)|.*?batch of size (\d+))?"
)
KV_FULL = re.compile(r"(?:\w+\s*: )?failed to decode the batch\b(?:.*?n_batch\s*=\s*(\d+))?")
REQUEST = re.compile(r"(?:done )?request: ([A-Z]+) (\S+) \S+ (\d{3})")
# llama-server since 2026: `srv load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'false'`
SLOTS_CTX = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(\w+)')?")
N_CTX = re.compile(r"(?:llama_context|llama_new_context_with_model): +n_ctx += +(\d+)")
GO_DURATION = re.compile(r"([\d.]+)(ms|µs|μs|us|ns|h|m|s)")
GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ns": 1e-9}
# The first lines a starting server prints (the several of one start count once: frames.assign_engine_lives).
STARTUP_TEXT = ("build: ", "build_info: ", "system_info: ", "main: loading model")
STARTUP_OLD = ("build info", "system info", "HTTP server listening")
# Ollama's engine is its runner (a llama-server, or its own runner process), started per model
# load; `Listening on` is the Ollama server, which starts no engine.
STARTUP_OLLAMA = ("starting llama server", "starting llama-server", "starting runner", "llama runner started")


def read(reader: SlotReader, entry: Entry, sec: float) -> None:
    reader.at(sec)
    kind, payload, lineno = entry.kind, entry.payload, entry.lineno
    if kind == "slot":
        _slot_line(reader, lineno, *payload)
    elif kind == "srv":
        func, body = payload
        if body.startswith("all slots are idle"):
            reader.idle(lineno)
        elif _kv_space(reader, lineno, body):
            pass
        elif func == "load_model" and body.startswith("loading model"):
            reader.startup(lineno, "llama.cpp " + body[:200])
        elif func == "load_model" and body.startswith("initializing slots"):
            reader.config(lineno, identity.facts(f"{func}: {body}"))
            reader.other()
        elif func == "load_model" and (m := SLOTS_CTX.match(body)):
            # Each slot holds n_ctx_slot tokens; a unified KV cache is one of that size shared by all.
            num_slots, per_slot = int(m.group(1)), int(m.group(2))
            reader.kv_capacity = per_slot if m.group(3) == "true" else num_slots * per_slot
            reader.other()
        elif m := REQUEST.match(body):
            reader.request(lineno, m.group(1), m.group(2), int(m.group(3)), None)
        else:
            reader.other()
    elif kind == "old":
        _old_line(reader, lineno, *payload)
    elif kind == "slog":
        level, msg, rest = payload
        if msg.startswith(STARTUP_OLLAMA):
            reader.startup(lineno, "ollama " + (msg + rest)[:200])
            reader.config(lineno, identity.ollama_runner_facts(rest))
        elif found := identity.facts(f"{msg} {rest.strip()}"):  # the version, the devices
            reader.config(lineno, found)
            reader.other()
        else:
            reader.other()
    elif kind == "gin":
        status, latency, client, method, route = payload
        reader.request(lineno, method, route, status, go_seconds(latency), client)
    elif kind == "text":
        _text_line(reader, lineno, payload)
    else:  # golog, tick: a time and nothing to read
        reader.other()


def _slot_line(reader: SlotReader, lineno: int, func: str, slot_id: int, task: int, body: str) -> None:
    if body.startswith("processing task"):
        reader.launch(slot_id, task)
    elif body.startswith("new prompt"):
        m = NEW_PROMPT.match(body)
        reader.prompt_context(slot_id, task, float(m.group(1)) if m else None)
    elif body.startswith("prompt done"):
        m = PROMPT_DONE.match(body)
        reader.prompt_context(slot_id, task, float(m.group(1) or m.group(2)) if m else None)
    elif body.startswith(("n_decoded", "n_gen")):
        _progress(reader, lineno, slot_id, task, body)
    elif "time" in body[:20] and TIMING.match(body):
        _timing(reader, lineno, slot_id, task, body)
    elif body.startswith("draft acceptance"):
        _draft(reader, slot_id, body)
    elif body.startswith("stop processing"):
        m = RELEASE.match(body)
        reader.release(slot_id, float(m.group(1)) if m else None)
    elif not body and func.startswith("print_timing"):
        reader.block_slot = (slot_id, task)  # the timing block follows on lines of its own
        reader.other()
    else:
        reader.other()


def _old_line(reader: SlotReader, lineno: int, func: str, text: str, kv: dict[str, str]) -> None:
    slot_id = _int(kv.get("id_slot", kv.get("slot_id")))
    task = _int(kv.get("id_task", kv.get("task_id")))
    if text.startswith(("prompt eval time", "generation eval time")):
        _timing(reader, lineno, slot_id, task, text)
    elif text == "slot released":
        n_past = _int_or_none(kv.get("n_past"))
        reader.release(slot_id, float(n_past) if n_past is not None else None)
    elif "processing task" in text:
        reader.launch(slot_id, task)
    elif text.startswith("all slots are idle"):
        reader.idle(lineno)
    elif func == "main" and text.startswith(STARTUP_OLD):
        fields = " ".join(
            f"{k}={v}" for k, v in kv.items() if k not in ("tid", "timestamp", "level", "function", "line", "msg")
        )
        reader.startup(lineno, f"llama.cpp {text} {fields}"[:200])
        found = [("build", kv["build"] + (f" ({kv['commit']})" if "commit" in kv else ""))] if "build" in kv else []
        if "n_threads" in kv:
            found.append(("threads", kv["n_threads"]))
        reader.config(lineno, found)
    elif text == "request" and "path" in kv:
        reader.request(lineno, kv.get("method", ""), kv["path"], _int(kv.get("status"), 0), None)
    elif _kv_space(reader, lineno, text + (f", n_batch = {kv['n_batch']}" if "n_batch" in kv else "")):
        pass
    else:
        reader.other()


def _text_line(reader: SlotReader, lineno: int, msg: str) -> None:
    if TIMING.match(msg):
        _timing(reader, lineno, *reader.block_slot, msg)
    elif msg.startswith("draft acceptance"):
        _draft(reader, reader.block_slot[0], msg)
    elif msg.startswith(STARTUP_TEXT):
        reader.startup(lineno, "llama.cpp " + msg[:200])
        reader.config(lineno, identity.facts(msg))
    elif m := N_CTX.match(msg):
        reader.kv_capacity = int(m.group(1))
        reader.config(lineno, identity.facts(msg))
        reader.other()
    elif found := identity.facts(msg):
        reader.config(lineno, found)
        reader.other()
    elif m := REQUEST.match(msg):
        reader.request(lineno, m.group(1), m.group(2), int(m.group(3)), None)
    elif _kv_space(reader, lineno, msg):
        pass
    else:
        reader.other()


def _kv_space(reader: SlotReader, lineno: int, text: str) -> bool:
    """A line saying the KV cache had no room for a batch: a `kv_no_space` event (the batch is
    retried at the size given), or `kv_full` (the server gave up and failed the requests)."""
    if m := KV_NO_SPACE.match(text):
        size = m.group(1) or m.group(2)
        reader.kv_space(lineno, "kv_no_space", float(size) if size else None, text)
    elif m := KV_FULL.match(text):
        reader.kv_space(lineno, "kv_full", float(m.group(1)) if m.group(1) else None, text)
    else:
        return False
    return True


def _progress(reader: SlotReader, lineno: int, slot_id: int, task: int, body: str) -> None:
    m = PROGRESS.match(body)
    if m is None:
        reader.bad_line(lineno, "a progress line")
        return
    num = reader.number
    tg3 = num(m.group(3), lineno) if m.group(3) else None
    reader.progress(lineno, slot_id, task, num(m.group(1), lineno), num(m.group(2), lineno), tg3)


def _timing(reader: SlotReader, lineno: int, slot_id: int, task: int, text: str) -> None:
    m = TIMING.match(text)
    if m is None or (m.group(1) != "total" and m.group(3) is None):
        reader.bad_line(lineno, "a timing line")
        return
    if m.group(1) == "total":
        reader.other()
        return
    num = reader.number
    ms, n, per, tps = (num(m.group(k), lineno) for k in (2, 3, 4, 5))
    if ms is None or n is None or ms < 0:
        reader.other()
    elif m.group(1) == "prompt eval":
        reader.prompt_eval(slot_id, task, ms, n, tps)
    else:
        reader.request_done(lineno, slot_id, task, ms, n, per, tps)


def _draft(reader: SlotReader, slot_id: int, text: str) -> None:
    m = DRAFT.match(text)
    if m is None:
        reader.other()
        return
    mean = reader.number(m.group(2), 0) if m.group(2) else None
    reader.draft(slot_id, reader.number(m.group(1), 0), mean)


def _int(text: str | None, default: int = -1) -> int:
    found = _int_or_none(text)
    return default if found is None else found


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text)  # type: ignore[arg-type]  # None is one of the texts that is no number
    except (TypeError, ValueError):
        return None


def go_seconds(text: str) -> float | None:
    """Seconds of a Go duration as gin prints it: `2.623718375s`, `414.019µs`, `8m44s`, `1h2m3s`."""
    parts = GO_DURATION.findall(text)
    if not parts or "".join(v + u for v, u in parts) != text:
        return None
    try:
        return sum(float(v) * GO_UNITS[u] for v, u in parts)
    except ValueError:
        return None
