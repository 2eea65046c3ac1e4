"""Batch-line logs from a trace: FreeToken (full prefix, and a pasted time-only excerpt), tokdrift's
engine, and SGLang (current, the older `Decode batch.` lines, 2024's time-only prefix).

As these engines print them (shared/formats/README.md): a `Prefill batch` line when a prefill
batch is formed; a `Decode batch` line every `decode_log_interval` (40) decode forwards, its
`gen throughput` the tokens generated since the previous decode line over the wall time since
that line (or since the process started), so prefill and idle time inside that window count;
FreeToken's `Scheduler is idle` when the queue runs dry; SGLang's retraction line when the KV
pool overflows; FreeToken's dropped-request warning; the startup lines of each engine start.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np

from logsim.engine import Trace

DECODE_LOG_INTERVAL = 40
MAMBA_SLOTS = 32
FORMATS = ("freetoken", "freetoken-excerpt", "tokdrift", "sglang", "sglang-old", "sglang-2024")


def lines(trace: Trace, fmt: str, start: dt.datetime) -> Iterator[str]:
    """The log of `trace` in `fmt` (FORMATS), its clock starting at `start`."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    records = [
        *_startups(trace, fmt),
        *_prefills(trace, fmt),
        *_decodes(trace, fmt),
        *_events(trace, fmt),
        *_access(trace, fmt),
    ]
    records.sort(key=lambda r: (r[0], r[1]))
    for t, _, level, msg in records:
        yield _prefix(fmt, start + dt.timedelta(seconds=t), level, msg) + msg + "\n"


def _prefix(fmt: str, when: dt.datetime, level: str, msg: str) -> str:
    if fmt in ("freetoken", "tokdrift"):
        return f"[{when:%Y-%m-%d|%H:%M:%S}] {level:<8} "
    if fmt == "freetoken-excerpt":
        return f"{when:%H:%M:%S}  "
    tp = "" if msg.startswith(("server_args", "INFO:")) else " TP0"
    if fmt == "sglang-2024":
        return f"[{when:%H:%M:%S}{tp}] "
    return f"[{when:%Y-%m-%d %H:%M:%S}{tp}] "


def _startups(trace: Trace, fmt: str) -> Iterator[tuple]:
    cap = trace.spec.kv_capacity
    for e in trace.events:
        if e.kind != "start":
            continue
        if fmt == "tokdrift":
            yield e.t, e.seq, "INFO", "tokdrift engine 0.1.0 starting: checkpoints/coder-moe on cuda"
        if fmt in ("freetoken", "tokdrift", "freetoken-excerpt"):
            yield (
                e.t,
                e.seq,
                "INFO",
                (
                    "Resolved config: moe_backend='offload', attention_backend='triton', "
                    "cache_type='hybrid_radix', page_size=1"
                ),
            )
            yield (
                e.t + 0.4,
                e.seq,
                "INFO",
                (
                    f"Cache rebuilt: KV {cap} pages ({cap} tokens, {cap * 20480 / 2**30:.2f} "
                    f"GiB), mamba {MAMBA_SLOTS} slots (1.92 GiB), MoE cache 2519/10240 "
                    f"(4.17 GiB)"
                ),
            )
        else:
            yield (
                e.t,
                e.seq,
                "INFO",
                (
                    f"server_args=ServerArgs(model_path='Qwen/Qwen3-Coder-30B-A3B', tp_size=1, "
                    f"mem_fraction_static=0.85, chunked_prefill_size={trace.spec.max_prefill_tokens}"
                    f", max_running_requests={trace.spec.max_running})"
                ),
            )
            yield e.t + 0.2, e.seq, "INFO", "Load weight begin. avail mem=78.50 GB"
            yield (
                e.t + 0.4,
                e.seq,
                "INFO",
                (
                    f"max_total_num_tokens={cap}, chunked_prefill_size="
                    f"{trace.spec.max_prefill_tokens}, max_prefill_tokens="
                    f"{trace.spec.max_prefill_tokens}, max_running_requests="
                    f"{trace.spec.max_running}, context_len={trace.spec.max_context}"
                ),
            )


def _prefills(trace: Trace, fmt: str) -> Iterator[tuple]:
    cap = trace.spec.kv_capacity
    for p in trace.prefills:
        usage = p.kv / cap
        if fmt == "freetoken-excerpt":
            msg = f"Prefill batch, #new-token: {p.new}, #cached-token: {p.cached}, token usage: {usage:.2f}"
        elif fmt in ("sglang-old", "sglang-2024"):
            hit = 100.0 * p.cached / max(1, p.new + p.cached)
            msg = (
                f"Prefill batch. #new-seq: 1, #new-token: {p.new}, #cached-token: {p.cached}, cache hit rate: "
                f"{hit:.2f}%, token usage: {usage:.2f}, #running-req: {p.num_running}, #queue-req: {p.num_waiting}"
            )
        else:
            mamba = "" if fmt == "sglang" else _mamba(p.num_running + 1)
            msg = (
                f"Prefill batch, #new-seq: 1, #new-token: {p.new}, #cached-token: {p.cached}, token usage: "
                f"{usage:.2f}, {mamba}#running-req: {p.num_running}, #queue-req: {p.num_waiting}, "
                f"input throughput (token/s): {p.new / max(p.t1 - p.t0, 1e-6):.2f}"
            )
        # tokdrift logs a prefill once it ran; the others when the batch is formed.
        yield (p.t1 if fmt == "tokdrift" else p.t0), p.seq, "INFO", msg


def _decodes(trace: Trace, fmt: str) -> Iterator[tuple]:
    """One line every DECODE_LOG_INTERVAL decode forwards of a process, as the engine prints it."""
    cap = trace.spec.kv_capacity
    for life, life_start in enumerate(trace.life_starts):
        idx = np.flatnonzero(trace.f_life == life)
        if len(idx) < DECODE_LOG_INTERVAL:
            continue
        tokens = np.cumsum(trace.f_batch[idx])  # [F] tokens generated by each forward's end
        at = np.arange(DECODE_LOG_INTERVAL - 1, len(idx), DECODE_LOG_INTERVAL)  # [L] forwards that print
        t = trace.f_t[idx[at]]
        since = np.concatenate([[life_start], t[:-1]])
        made = np.diff(np.concatenate([[0], tokens[at]]))
        gen = made / np.maximum(t - since, 1e-6)
        for k, j in enumerate(at):
            f = idx[j]
            batch, kv, waiting = int(trace.f_batch[f]), int(trace.f_kv[f]), int(trace.f_waiting[f])
            usage = kv / cap
            if fmt == "freetoken-excerpt":
                msg = f"Decode batch, #running-req: {batch}, #token: {kv}, gen throughput (token/s): {gen[k]:.2f}"
            elif fmt in ("sglang-old", "sglang-2024"):
                msg = (
                    f"Decode batch. #running-req: {batch}, #token: {kv}, token usage: {usage:.2f}, "
                    f"gen throughput (token/s): {gen[k]:.2f}, #queue-req: {waiting}"
                )
            elif fmt == "sglang":
                msg = (
                    f"Decode batch, #running-req: {batch}, #token: {kv}, token usage: {usage:.2f}, cuda graph: "
                    f"True, gen throughput (token/s): {gen[k]:.2f}, #queue-req: {waiting}"
                )
            else:
                msg = (
                    f"Decode batch, #running-req: {batch}, #token: {kv}, token usage: {usage:.2f}, "
                    f"{_mamba(batch)}gen throughput (token/s): {gen[k]:.2f}, #queue-req: {waiting}"
                )
            yield float(t[k]), int(trace.f_seq[f]), "INFO", msg


def _events(trace: Trace, fmt: str) -> Iterator[tuple]:
    for e in trace.events:
        if e.kind == "idle" and fmt in ("freetoken", "tokdrift"):
            yield e.t, e.seq, "INFO", "Scheduler is idle, waiting for new reqs..."
        elif e.kind == "preemption" and fmt != "freetoken-excerpt":
            yield (
                e.t,
                e.seq,
                "WARNING",
                (
                    f"KV cache pool is full. Retract requests. #retracted_reqs: {e.count}, "
                    f"#new_token_ratio: 0.4000 -> 0.5000"
                ),
            )
        elif e.kind == "drop" and fmt in ("freetoken", "tokdrift"):
            yield (
                e.t,
                e.seq,
                "WARNING",
                (f"Input sequence length {e.count} exceeds {trace.spec.max_context}, request {e.rid} is dropped."),
            )


def _access(trace: Trace, fmt: str) -> Iterator[tuple]:
    """SGLang's uvicorn access line when a request finishes (no reader needs it; real logs have it)."""
    if not fmt.startswith("sglang"):
        return
    for r in trace.requests:
        if r.status == "done":
            yield (
                r.t_done,
                0,
                "INFO",
                f'INFO:     127.0.0.1:{40000 + r.agent} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            )


def _mamba(batch: int) -> str:
    used = min(MAMBA_SLOTS, batch + 4)
    return f"#mamba-slot: {used}/{MAMBA_SLOTS}, mamba usage: {used / MAMBA_SLOTS:.2f}, "
