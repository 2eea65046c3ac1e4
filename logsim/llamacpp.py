"""llama.cpp's server (current, with `--log-prefix --log-timestamps`; 2024's `INFO [function]` form)
and Ollama (journald, its own slog and gin lines, llama-server's bare lines), from a trace.

As llama-server prints a request (tools/server/server-context.cpp; docs/diagnostics.md names the
files): its slot launches the task, logs the new prompt (`task.n_tokens`, the whole context) and
`prompt done`; once it has decoded 100 tokens it prints `n_decoded = N, tg = X t/s` at most every
3 s, tg being the tokens so far over the time since the prompt was done; at the end the timing
block — `prompt eval time` over the tokens it computed, `eval time` over the tokens it decoded —
and `stop processing` with the context at release; `all slots are idle` when no slot is busy.
Each agent keeps its slot (llama-server picks the slot whose cache shares the prompt). The 2024
server printed no progress lines and `key=value` fields with a Unix `timestamp=`. Ollama starts
llama-server with `--no-log-prefix --no-log-timestamps` and passes its lines through its own log,
which journald stamps; gin prints one access line per request.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np

from logsim.engine import Request, Trace

FORMATS = ("llama.cpp", "llama.cpp-2024", "ollama")
PROGRESS_MIN_TOKENS = 100
PROGRESS_EVERY_S = 3.0
N_CTX = 131_072
HOST = "gpu-box"


def lines(trace: Trace, fmt: str, start: dt.datetime) -> Iterator[str]:
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    slots = _slots(trace)
    records: list[tuple[float, int, int, str]] = []  # (t, order, life, text)
    for e in trace.events:
        if e.kind == "start":
            records += [(e.t + k * 0.01, e.seq, e.life, text) for k, text in enumerate(_startup(fmt, trace, slots))]
    for r in trace.requests:
        if r.status == "done":
            records += _request(fmt, trace, r, slots)
    records += _idle(fmt, trace)
    records.sort(key=lambda x: (x[0], x[1]))
    for t, _, life, text in records:
        yield _wrap(fmt, start, t, trace.life_starts[life], text)


def _slots(trace: Trace) -> int:
    return max(1, min(trace.spec.max_running, max(r.agent for r in trace.requests) + 1 if trace.requests else 1))


def _wrap(fmt: str, start: dt.datetime, t: float, life_start: float, text: str) -> str:
    """Prefixes of every physical line of one message: llama.cpp stamps only the first."""
    when = start + dt.timedelta(seconds=t)
    # Stamps some lines carry in their text: the 2024 server's Unix time (its clock taken as UTC),
    # Ollama's slog time and gin's.
    text = (
        text.replace("@UNIX@", str(int(when.replace(tzinfo=dt.timezone.utc).timestamp())))
        .replace("@ISO@", f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 1000:03d}Z")
        .replace("@GIN@", f"{when:%Y/%m/%d - %H:%M:%S}")
    )
    first, *rest = text.split("\n")
    if fmt == "llama.cpp":
        us = int(round((t - life_start) * 1e6))
        stamp = f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d}"
        level = "W" if first.startswith("W ") else "I"
        first = f"{stamp} {level} {first[2:] if first.startswith('W ') else first}"
        return "\n".join([first, *rest]) + "\n"
    if fmt == "ollama":
        head = f"{when:%b %d %H:%M:%S} {HOST} ollama[2817]: "
        return "".join(head + line + "\n" for line in [first, *rest])
    return "\n".join([first, *rest]) + "\n"


def _startup(fmt: str, trace: Trace, num_slots: int) -> list[str]:
    if fmt == "llama.cpp-2024":
        return [
            _old("main", "build info", 0, build="2715", commit='"f4ab2a41"'),
            _old("main", "system info", 0, n_threads="8", total_threads="16"),
            f"llama_new_context_with_model: n_ctx      = {N_CTX}",
            _old("init", "initializing slots", 0, n_slots=str(num_slots)),
            _old("main", "HTTP server listening", 0, port='"8080"', hostname='"127.0.0.1"'),
            _old("update_slots", "all slots are idle", 0),
        ]
    out = []
    if fmt == "ollama":
        out.append(
            f'time=@ISO@ level=INFO source=server.go:398 msg="starting llama server" '
            f'cmd="/usr/lib/ollama/llama-server --model /usr/share/ollama/.ollama/models/blobs/sha256-e8ad '
            f'--ctx-size {N_CTX} --parallel {num_slots} --port 35253 --no-log-prefix --no-log-timestamps"'
        )
    out += [
        "build: 6092 (c81de6e1) with cc (GCC) 13.3.0 for x86_64-linux-gnu",
        "system_info: n_threads = 16 (n_threads_batch = 16) / 32 | CUDA : ARCHS = 890 | USE_GRAPHS = 1 |",
        "main: loading model",
        "srv    load_model: loading model 'models/qwen3-coder-30b-a3b-q4_k_m.gguf'",
        f"llama_context: n_ctx         = {N_CTX}",
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
        "srv  update_slots: all slots are idle",
    ]
    if fmt == "ollama":
        out.append('time=@ISO@ level=INFO source=server.go:637 msg="llama runner started in 4.02 seconds"')
    return out


def _request(fmt: str, trace: Trace, r: Request, num_slots: int) -> list[tuple[float, int, int, str]]:
    slot = r.agent % num_slots
    prompt = r.cached + r.new
    token_t = np.concatenate([[r.t_first], *[trace.f_t[a:b] for a, b in r.spans]])  # [generated]
    n_gen = len(token_t)
    eval_ms = (token_t[-1] - r.t_first) * 1e3
    prompt_ms = r.prefill_s * 1e3
    key = r.rid * 10
    out: list[tuple[float, int, int, str]] = []
    if fmt == "llama.cpp-2024":
        out.append(
            (
                r.t_prefill,
                key,
                r.life,
                _old(
                    "launch_slot_with_task",
                    "slot is processing task",
                    r.t_prefill,
                    id_slot=str(slot),
                    id_task=str(r.task),
                ),
            )
        )
        out.append(
            (
                r.t_prefill,
                key + 1,
                r.life,
                _old(
                    "update_slots",
                    "kv cache rm [p0, end)",
                    r.t_prefill,
                    id_slot=str(slot),
                    id_task=str(r.task),
                    p0=str(r.cached),
                ),
            )
        )
        end = float(token_t[-1])
        ids = {"id_slot": str(slot), "id_task": str(r.task)}
        out += [
            (
                end,
                key + 2,
                r.life,
                _old(
                    "print_timings",
                    f"prompt eval time     = {prompt_ms:10.2f} ms / {r.new:5d} "
                    f"tokens ({prompt_ms / max(r.new, 1):8.2f} ms per token, "
                    f"{1e3 * r.new / max(prompt_ms, 1e-9):8.2f} tokens per second)",
                    end,
                    **ids,
                    t_prompt_processing=f"{prompt_ms:.3f}",
                    n_prompt_tokens_processed=str(r.new),
                ),
            ),
            (
                end,
                key + 3,
                r.life,
                _old(
                    "print_timings",
                    f"generation eval time = {eval_ms:10.2f} ms / {n_gen:5d} runs "
                    f"  ({eval_ms / n_gen:8.2f} ms per token, "
                    f"{1e3 * n_gen / max(eval_ms, 1e-9):8.2f} tokens per second)",
                    end,
                    **ids,
                    t_token_generation=f"{eval_ms:.3f}",
                    n_decoded=str(n_gen),
                ),
            ),
            (
                end,
                key + 4,
                r.life,
                _old("print_timings", f"          total time = {prompt_ms + eval_ms:10.2f} ms", end, **ids),
            ),
            (
                end,
                key + 5,
                r.life,
                _old(
                    "update_slots",
                    "slot released",
                    end,
                    **ids,
                    n_ctx=str(N_CTX // num_slots),
                    n_past=str(prompt + n_gen - 1),
                    n_system_tokens="0",
                    n_cache_tokens=str(prompt + n_gen - 1),
                    truncated="false",
                ),
            ),
            (
                end,
                key + 7,
                r.life,
                _old(
                    "log_server_request",
                    "request",
                    end,
                    remote_addr='"127.0.0.1"',
                    remote_port=str(40000 + r.agent),
                    status="200",
                    method='"POST"',
                    path='"/completion"',
                    params="{}",
                ),
            ),
        ]
        return out
    tag = f"id {slot:2d} | task {r.task} | "
    out += [
        (r.t_prefill, key, r.life, f"slot launch_slot_: {tag}processing task"),
        (
            r.t_prefill,
            key + 1,
            r.life,
            f"slot update_slots: {tag}new prompt, n_ctx_slot = {N_CTX // num_slots}, "
            f"n_keep = 0, task.n_tokens = {prompt}",
        ),
        (
            r.t_prefill,
            key + 2,
            r.life,
            f"slot update_slots: {tag}n_tokens = {r.cached}, memory_seq_rm [{r.cached}, end)",
        ),
        (
            r.t_first,
            key + 3,
            r.life,
            f"slot update_slots: {tag}prompt done, n_tokens = {prompt}, batch.n_tokens = {r.new}",
        ),
    ]
    last_print = -np.inf
    for n in range(PROGRESS_MIN_TOKENS, n_gen + 1):
        t = float(token_t[n - 1])
        if t - last_print >= PROGRESS_EVERY_S and t > r.t_first:
            last_print = t
            out.append(
                (t, key + 4, r.life, f"slot print_timing: {tag}n_decoded = {n:6d}, tg = {n / (t - r.t_first):6.2f} t/s")
            )
    end = float(token_t[-1])
    block = (
        f"slot print_timing: {tag}\n"
        f"prompt eval time = {prompt_ms:10.2f} ms / {r.new:5d} tokens ({prompt_ms / max(r.new, 1):8.2f} ms per "
        f"token, {1e3 * r.new / max(prompt_ms, 1e-9):8.2f} tokens per second)\n"
        f"       eval time = {eval_ms:10.2f} ms / {n_gen:5d} tokens ({eval_ms / n_gen:8.2f} ms per token, "
        f"{1e3 * n_gen / max(eval_ms, 1e-9):8.2f} tokens per second)\n"
        f"      total time = {prompt_ms + eval_ms:10.2f} ms / {r.new + n_gen:5d} tokens"
    )
    out += [
        (end, key + 5, r.life, block),
        (
            end,
            key + 6,
            r.life,
            f"slot      release: {tag}stop processing: n_tokens = {prompt + n_gen - 1}, truncated = 0",
        ),
        (end, key + 7, r.life, "srv  log_server_r: done request: POST /v1/chat/completions 127.0.0.1 200"),
    ]
    if fmt == "ollama":
        when = end - r.arrival
        out.append(
            (end, key + 8, r.life, f'[GIN] @GIN@ | 200 | {when:13.9f}s |       127.0.0.1 | POST     "/api/chat"')
        )
    return out


def _idle(fmt: str, trace: Trace) -> list[tuple[float, int, int, str]]:
    """`all slots are idle` when the last busy slot releases (the engine's idle spells)."""
    out = []
    for e in trace.events:
        if e.kind == "idle" and e.t > trace.life_starts[e.life] + 1.0:
            text = (
                _old("update_slots", "all slots are idle", e.t)
                if fmt == "llama.cpp-2024"
                else "srv  update_slots: all slots are idle"
            )
            out.append((e.t, 1 << 40, e.life, text))  # after the release lines of the same instant
    return out


def _old(function: str, message: str, t: float, **fields: str) -> str:
    """The 2024 server's text line; `timestamp` is filled in when the line is placed (`_wrap`)."""
    kv = " ".join(f"{k}={v}" for k, v in fields.items())
    return f'INFO [{function:>24}] {message} | tid="140302184869888" timestamp=@UNIX@' + (f" {kv}" if kv else "")
