"""vLLM's log and a saved series of its Prometheus scrapes, from a trace.

The log (vllm/v1/metrics/loggers.py, LoggingStatLogger): every 10 s the API server prints the
prompt and generation tokens of the interval over the interval's wall time — prefill and idle
time inside it count — with the running and waiting requests and the KV usage at that moment.
An interval with no tokens is printed once after a busy one, then the server goes quiet until
work comes back. `Preemptions: N` appears when the interval had some (shared/formats/README.md).

The scrapes: `/metrics` read every `every_s` seconds, each block headed `# scrape_time: T`, with
vLLM's gauges, counters (`_total`) and the inter-token-latency histogram, which times every token
of every request from the one before it (a prefill the engine ran in between counts). A restart
starts the counters again at zero; a scrape while the engine is down fails and is not saved.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np

from logsim.engine import Trace

INTERVAL_S = 10.0
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
LABELS = '{engine="0",model_name="Qwen/Qwen3-Coder-30B-A3B"}'


class _State:
    """The engine's state at any time, from the trace: running, waiting, KV tokens."""

    def __init__(self, trace: Trace) -> None:
        t = [
            trace.f_t,
            np.array([p.t1 for p in trace.prefills]),
            np.array([e.t for e in trace.events if e.kind in ("idle", "start")]),
        ]
        running = [
            trace.f_batch,
            np.array([p.num_running + 1 for p in trace.prefills]),
            np.zeros(len(t[2]), dtype=np.int64),
        ]
        waiting = [trace.f_waiting, np.array([p.num_waiting for p in trace.prefills]), running[2]]
        kv = [trace.f_kv, np.array([p.kv for p in trace.prefills]), running[2]]
        order = np.argsort(np.concatenate(t), kind="stable")
        self.t = np.concatenate(t)[order]
        self.running = np.concatenate(running)[order].astype(np.int64)
        self.waiting = np.concatenate(waiting)[order].astype(np.int64)
        self.kv = np.concatenate(kv)[order].astype(np.int64)

    def at(self, when: float) -> tuple[int, int, int]:
        k = int(np.searchsorted(self.t, when, side="right")) - 1
        return (0, 0, 0) if k < 0 else (int(self.running[k]), int(self.waiting[k]), int(self.kv[k]))


def _lives(trace: Trace) -> list[tuple[int, float, float]]:
    """(life, start, end) of each engine process."""
    ends = trace.life_starts[1:] + [trace.end_s]
    downtime = trace.spec.restart_downtime_s
    return [
        (k, s, e - (downtime if k + 1 < len(trace.life_starts) else 0.0))
        for k, (s, e) in enumerate(zip(trace.life_starts, ends))
    ]


def log_lines(trace: Trace, start: dt.datetime) -> Iterator[str]:
    state = _State(trace)
    cap = trace.spec.kv_capacity
    first = [p for p in trace.prefills if not p.recompute]
    gen = _cumulative([*trace.f_t, *(p.t1 for p in first)], [*trace.f_batch, *(1 for _ in first)])
    prompt_tokens = _cumulative([p.t1 for p in trace.prefills], [p.new for p in trace.prefills])
    hits = _cumulative([p.t1 for p in trace.prefills], [p.cached for p in trace.prefills])
    queries = _cumulative([p.t1 for p in trace.prefills], [p.cached + p.new for p in trace.prefills])
    preempt = [(e.t, e.count) for e in trace.events if e.kind == "preemption"]
    done = sorted(r.t_done for r in trace.requests if r.status == "done")

    def cum(series: tuple[np.ndarray, np.ndarray], when: float) -> float:
        k = int(np.searchsorted(series[0], when, side="right"))
        return float(series[1][k - 1]) if k else 0.0

    records: list[tuple[float, int, str]] = []
    for life, t0, t1 in _lives(trace):
        api, core = 4120 + 100 * life, 4188 + 100 * life

        def stamp(seconds: float) -> str:
            return f"{start + dt.timedelta(seconds=seconds):%m-%d %H:%M:%S}"

        records += [
            (t0, 0, f"INFO {stamp(t0)} [__init__.py:241] Automatically detected platform cuda."),
            (t0, 1, f"(APIServer pid={api}) INFO {stamp(t0)} [api_server.py:1805] vLLM API server version 0.10.1.1"),
            (
                t0,
                2,
                f"(EngineCore_0 pid={core}) INFO {stamp(t0)} [core.py:71] Initializing a V1 LLM engine "
                f"(v0.10.1.1) with config: model='Qwen/Qwen3-Coder-30B-A3B', max_seq_len={trace.spec.max_context}",
            ),
            (
                t0,
                3,
                f"(EngineCore_0 pid={core}) INFO {stamp(t0)} [kv_cache_utils.py:833] GPU KV cache size: {cap:,} tokens",
            ),
            (
                t0,
                4,
                f"(APIServer pid={api}) INFO {stamp(t0)} [api_server.py:1857] Starting vLLM API server 0 on "
                f"http://0.0.0.0:8000",
            ),
        ]
        last_prompt = last_gen = 0.0
        prev = t0
        t = t0 + INTERVAL_S
        while t <= t1:
            prompt_tps = (cum(prompt_tokens, t) - cum(prompt_tokens, prev)) / (t - prev)
            gen_tps = (cum(gen, t) - cum(gen, prev)) / (t - prev)
            if any((prompt_tps, gen_tps, last_prompt, last_gen)):  # vLLM stays quiet while idle
                running, waiting, kv = state.at(t)
                num_pre = sum(c for s, c in preempt if prev < s <= t)
                asked = cum(queries, t) - cum(queries, t0)
                hit = cum(hits, t) - cum(hits, t0)
                records.append(
                    (
                        t,
                        5,
                        f"(APIServer pid={api}) INFO {stamp(t)} [loggers.py:123] Engine 000: "
                        f"Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: "
                        f"{gen_tps:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
                        + (f"Preemptions: {num_pre}, " if num_pre else "")
                        + f"GPU KV cache usage: {100 * kv / cap:.1f}%, Prefix cache hit rate: "
                        f"{100 * hit / asked if asked else 0.0:.1f}%",
                    )
                )
            last_prompt, last_gen = prompt_tps, gen_tps
            prev, t = t, t + INTERVAL_S
        records += [
            (s, 6, f'(APIServer pid={api}) INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
            for s in done
            if t0 <= s <= t1
        ]
    records.sort(key=lambda r: (r[0], r[1]))
    for _, _, text in records:
        yield text + "\n"


def scrape_blocks(trace: Trace, start: dt.datetime, every_s: float = INTERVAL_S) -> Iterator[str]:
    state = _State(trace)
    cap = trace.spec.kv_capacity
    tokens = _token_times(trace)
    for life, t0, t1 in _lives(trace):
        pre = [p for p in trace.prefills if p.life == life]
        first = [p for p in pre if not p.recompute]
        reqs = [r for r in trace.requests if r.life == life and r.t_first == r.t_first]
        done = [r for r in reqs if r.status == "done"]
        mine = trace.f_life == life
        itl_t, itl_v = tokens[life]
        series = {  # name: (times, cumulative values), each counter's whole life
            "queries": _cumulative([p.t1 for p in pre], [p.new + p.cached for p in pre]),
            "hits": _cumulative([p.t1 for p in pre], [p.cached for p in pre]),
            "prompt": _cumulative([p.t1 for p in pre], [p.new for p in pre]),
            "generation": _cumulative(
                [*trace.f_t[mine], *(p.t1 for p in first)], [*trace.f_batch[mine], *(1 for _ in first)]
            ),
            "preemptions": _cumulative(
                [e.t for e in trace.events if e.kind == "preemption" and e.life == life],
                [e.count for e in trace.events if e.kind == "preemption" and e.life == life],
            ),
            "itl": (itl_t, np.cumsum(itl_v)),
            "ttft": _cumulative([r.t_first for r in reqs], [r.t_first - r.arrival for r in reqs]),
            "decode_time": _cumulative([r.t_done for r in done], [r.t_done - r.t_first for r in done]),
            "decode_tokens": _cumulative([r.t_done for r in done], [r.generated for r in done]),
        }
        buckets = [np.sort(itl_t[itl_v <= le]) for le in ITL_BUCKETS]
        t = t0 + 3.0
        while t <= t1:
            running, waiting, kv = state.at(t)
            n = {name: int(np.searchsorted(times, t, side="right")) for name, (times, _) in series.items()}
            v = {name: (float(values[n[name] - 1]) if n[name] else 0.0) for name, (_, values) in series.items()}
            out = [f"# scrape_time: {start + dt.timedelta(seconds=t):%Y-%m-%dT%H:%M:%S}"]
            out += _metric("num_requests_running", "gauge", "Number of requests in model execution batches.", running)
            out += _metric("num_requests_waiting", "gauge", "Number of requests waiting to be processed.", waiting)
            out += _metric("kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", kv / cap)
            out += _metric(
                "prefix_cache_queries",
                "counter",
                "Prefix cache queries, in terms of number of queried tokens.",
                v["queries"],
            )
            out += _metric(
                "prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.", v["hits"]
            )
            out += _metric(
                "num_preemptions", "counter", "Cumulative number of preemption from the engine.", v["preemptions"]
            )
            out += _metric("prompt_tokens", "counter", "Number of prefill tokens processed.", v["prompt"])
            out += _metric("generation_tokens", "counter", "Number of generation tokens processed.", v["generation"])
            out += _histogram(
                "inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                [int(np.searchsorted(b, t, side="right")) for b in buckets],
                n["itl"],
                v["itl"],
            )
            out += _histogram(
                "time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                None,
                n["ttft"],
                v["ttft"],
            )
            out += _histogram(
                "request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
                None,
                n["decode_time"],
                v["decode_time"],
            )
            out += _histogram(
                "request_generation_tokens",
                "Number of generation tokens processed.",
                None,
                n["decode_tokens"],
                v["decode_tokens"],
            )
            yield "\n".join(out) + "\n"
            t += every_s


def _cumulative(times, values) -> tuple[np.ndarray, np.ndarray]:
    """(times in order, running total of values): a counter's value at any time by searchsorted."""
    t = np.asarray(times, dtype=float)
    order = np.argsort(t, kind="stable")
    return t[order], np.cumsum(np.asarray(values, dtype=float)[order])


def _token_times(trace: Trace) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per engine life: every token's time after each request's first, and its latency from the one before."""
    per_life: dict[int, tuple[list, list]] = {k: ([], []) for k in range(len(trace.life_starts))}
    for r in trace.requests:
        if r.t_first != r.t_first:
            continue
        times = np.concatenate([[r.t_first], *[trace.f_t[a:b] for a, b in r.spans]])  # [tokens]
        times_l, values_l = per_life[r.life]
        times_l.append(times[1:])
        values_l.append(np.diff(times))
    out = {}
    for life, (times_l, values_l) in per_life.items():
        t = np.concatenate(times_l) if times_l else np.zeros(0)
        v = np.concatenate(values_l) if values_l else np.zeros(0)
        order = np.argsort(t, kind="stable")
        out[life] = (t[order], v[order])
    return out


def _metric(name: str, kind: str, help_text: str, value: float) -> list[str]:
    sample = f"vllm:{name}_total" if kind == "counter" else f"vllm:{name}"
    return [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} {kind}", f"{sample}{LABELS} {float(value)}"]


def _histogram(name: str, help_text: str, counts, count: int, total: float) -> list[str]:
    out = [f"# HELP vllm:{name} {help_text}", f"# TYPE vllm:{name} histogram"]
    inner = LABELS[1:-1]
    for le, n in zip(ITL_BUCKETS, counts or ()):
        out.append(f'vllm:{name}_bucket{{{inner},le="{le}"}} {float(n)}')
    out.append(f'vllm:{name}_bucket{{{inner},le="+Inf"}} {float(count)}')
    out += [f"vllm:{name}_count{LABELS} {float(count)}", f"vllm:{name}_sum{LABELS} {total}"]
    return out
