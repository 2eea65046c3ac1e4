"""Engine logs and scrape series with a known truth, for tests and benchmarks.

A small simulation of a coding agent against an engine whose decode step costs
`a + b * batch + c * context` seconds, optionally slowed by a factor from an onset (right
after a large prefill appended onto a long cached branch) until a restart. The same
simulated steps are rendered in each format diag reads, so a test can check that every
reader and the analysis recover the same truth.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

FORMATS = ("freetoken", "tokdrift", "sglang", "sglang-old", "vllm", "prometheus")


@dataclass(frozen=True, kw_only=True)
class Scenario:
    hours: float = 2.0
    start: dt.datetime = dt.datetime(2026, 9, 23, 9, 0, 0)
    base_step_s: float = 0.012  # a: weights read once per step
    per_seq_s: float = 0.001  # b
    per_token_s: float = 1.5e-7  # c: attention over one context token
    batch: int = 2  # sessions decoding together
    context_start: int = 20_000  # tokens per session at the start of a session
    context_reset: int | None = 40_000  # a session this long is replaced by a fresh one; None: grows
    append: tuple[int, int] = (500, 3000)  # tokens appended per turn
    lines_per_turn: tuple[int, int] = (4, 10)  # decode lines per turn
    forwards_per_line: int = 40  # FreeToken's --decode-log-interval
    onset_h: float | None = None  # engine-age slowdown begins
    slowdown: float = 4.0  # step time multiplier after the onset
    restart_h: float | None = None
    restart_cures: bool = True  # False: the slowdown survives the restart (not engine age after all)
    idle_every: int = 7  # an idle gap after every this many turns
    idle_s: float = 45.0
    noise: float = 0.03
    kv_capacity: int = 262_144
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hours <= 0:
            raise ValueError(f"hours must be > 0, got {self.hours}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.slowdown < 1:
            raise ValueError(f"slowdown must be >= 1 (a multiplier on step time), got {self.slowdown}")


class Record(NamedTuple):
    t: dt.datetime
    kind: str  # start, prefill, decode, idle
    batch: int
    context: int  # KV tokens in use
    new_tokens: int
    cached_tokens: int
    gen_tps: float  # as the engine prints it: tokens since the last line / wall time since it
    step_s: float  # true step time
    tokens: int  # tokens generated in the window


def simulate(sc: Scenario) -> Iterator[Record]:
    rng = random.Random(sc.seed)
    t = sc.start
    end = sc.start + dt.timedelta(hours=sc.hours)
    onset_at = sc.start + dt.timedelta(hours=sc.onset_h) if sc.onset_h is not None else None
    restart_at = sc.start + dt.timedelta(hours=sc.restart_h) if sc.restart_h is not None else None
    yield Record(
        t=t, kind="start", batch=0, context=0, new_tokens=0, cached_tokens=0, gen_tps=0.0, step_s=0.0, tokens=0
    )
    ctx = [sc.context_start + rng.randint(0, 5000) for _ in range(sc.batch)]
    degraded, turn, last_line = False, 0, t
    while t < end:
        if restart_at is not None and t >= restart_at:
            restart_at, degraded = None, degraded and not sc.restart_cures
            t += dt.timedelta(seconds=20)
            yield Record(
                t=t, kind="start", batch=0, context=0, new_tokens=0, cached_tokens=0, gen_tps=0.0, step_s=0.0, tokens=0
            )
            ctx = [sc.context_start + rng.randint(0, 5000) for _ in range(sc.batch)]
            last_line = t
        i = turn % sc.batch
        if sc.context_reset is not None and ctx[i] > sc.context_reset:
            ctx[i] = sc.context_start + rng.randint(0, 5000)
            new, cached = ctx[i], 0
        else:
            new = rng.randint(*sc.append)
            cached = ctx[i]
            ctx[i] += new
        if onset_at is not None and not degraded and t >= onset_at:
            new, cached = 5792, 121_712  # the seed's trigger: a large append onto a long branch
            ctx[i] = new + cached
            degraded, onset_at = True, None
        t += dt.timedelta(seconds=new * 2e-5)
        yield Record(
            t=t,
            kind="prefill",
            batch=sc.batch,
            context=sum(ctx),
            new_tokens=new,
            cached_tokens=cached,
            gen_tps=0.0,
            step_s=0.0,
            tokens=0,
        )
        for _ in range(rng.randint(*sc.lines_per_turn)):
            step = sc.base_step_s + sc.per_seq_s * sc.batch + sc.per_token_s * sum(ctx)
            step *= (sc.slowdown if degraded else 1.0) * (1.0 + rng.gauss(0.0, sc.noise))
            t += dt.timedelta(seconds=step * sc.forwards_per_line)
            tokens = sc.batch * sc.forwards_per_line
            ctx = [c + sc.forwards_per_line for c in ctx]
            wall = (t - last_line).total_seconds()
            yield Record(
                t=t,
                kind="decode",
                batch=sc.batch,
                context=sum(ctx),
                new_tokens=0,
                cached_tokens=0,
                gen_tps=tokens / wall,
                step_s=step,
                tokens=tokens,
            )
            last_line = t
        turn += 1
        if sc.idle_every and turn % sc.idle_every == 0:
            yield Record(
                t=t,
                kind="idle",
                batch=0,
                context=sum(ctx),
                new_tokens=0,
                cached_tokens=0,
                gen_tps=0.0,
                step_s=0.0,
                tokens=0,
            )
            t += dt.timedelta(seconds=sc.idle_s)


def write(sc: Scenario, fmt: str, path: Path) -> Path:
    """Render the scenario in one format (FORMATS) to `path`."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        if fmt in ("vllm", "prometheus"):
            f.writelines(_windows(sc, fmt))
        else:
            f.writelines(_lines(sc, fmt))
    return path


def _lines(sc: Scenario, fmt: str) -> Iterator[str]:
    cap = sc.kv_capacity
    for r in simulate(sc):
        if fmt in ("freetoken", "tokdrift"):
            head = f"[{r.t:%Y-%m-%d|%H:%M:%S}] INFO     "
        else:
            head = f"[{r.t:%Y-%m-%d %H:%M:%S} TP0] "
        usage = r.context / cap
        if r.kind == "start":
            if fmt in ("freetoken", "tokdrift"):
                if fmt == "tokdrift":
                    yield head + "tokdrift engine 0.1.0 starting\n"
                yield head + (
                    "Resolved config: moe_backend='offload', attention_backend='triton', "
                    "cache_type='hybrid_radix', page_size=1\n"
                )
                yield head + (
                    f"Cache rebuilt: KV {cap} pages ({cap} tokens, 4.69 GiB), mamba 32 slots (1.92 GiB), "
                    f"MoE cache 2519/10240 (4.17 GiB)\n"
                )
            else:
                yield head + f"server_args=ServerArgs(model_path='m', max_total_num_tokens={cap})\n"
                yield head + "Load weight begin. avail mem=70.00 GB\n"
        elif r.kind == "prefill":
            if fmt == "sglang-old":
                hit = 100.0 * r.cached_tokens / max(1, r.new_tokens + r.cached_tokens)
                yield head + (
                    f"Prefill batch. #new-seq: 1, #new-token: {r.new_tokens}, #cached-token: "
                    f"{r.cached_tokens}, cache hit rate: {hit:.2f}%, token usage: {usage:.2f}, "
                    f"#running-req: {r.batch - 1}, #queue-req: 0\n"
                )
            else:
                yield head + (
                    f"Prefill batch, #new-seq: 1, #new-token: {r.new_tokens}, #cached-token: "
                    f"{r.cached_tokens}, token usage: {usage:.2f}, #mamba-slot: {r.batch + 4}/32, "
                    f"mamba usage: {(r.batch + 4) / 32:.2f}, #running-req: {r.batch - 1}, #queue-req: 0, "
                    f"input throughput (token/s): {r.new_tokens / 0.5:.2f}\n"
                )
        elif r.kind == "decode":
            if fmt == "sglang-old":
                yield head + (
                    f"Decode batch. #running-req: {r.batch}, #token: {r.context}, token usage: {usage:.2f}, "
                    f"gen throughput (token/s): {r.gen_tps:.2f}, #queue-req: 0\n"
                )
            elif fmt == "sglang":
                yield head + (
                    f"Decode batch, #running-req: {r.batch}, #full token: {r.context}, full token usage: "
                    f"{usage:.2f}, mamba num: {r.batch + 4}, mamba usage: {(r.batch + 4) / 32:.2f}, "
                    f"cuda graph: True, gen throughput (token/s): {r.gen_tps:.2f}, #queue-req: 0\n"
                )
            else:
                yield head + (
                    f"Decode batch, #running-req: {r.batch}, #token: {r.context}, token usage: {usage:.2f}, "
                    f"#mamba-slot: {r.batch + 4}/32, mamba usage: {(r.batch + 4) / 32:.2f}, "
                    f"gen throughput (token/s): {r.gen_tps:.2f}, #queue-req: 0\n"
                )
        elif r.kind == "idle" and fmt in ("freetoken", "tokdrift"):
            yield head + "Scheduler is idle, waiting for new reqs...\n"


def _windows(sc: Scenario, fmt: str, every_s: float = 10.0) -> Iterator[str]:
    """vLLM stats lines or Prometheus scrapes: 10 s windows over the simulated steps."""
    cap = sc.kv_capacity
    gen = prompt = 0  # in the window
    itl_sum = itl_count = gen_total = prompt_total = 0.0
    busy = 0.0  # decode seconds in the window
    batch = context = 0
    window_end = None
    for r in simulate(sc):
        if r.kind == "start":
            if fmt == "vllm":
                yield f"(APIServer pid=4120) INFO {r.t:%m-%d %H:%M:%S} [api_server.py:1] vLLM API server version 0.11.0\n"
                yield f"(EngineCore_DP0 pid=4188) INFO {r.t:%m-%d %H:%M:%S} [kv_cache_utils.py:1] GPU KV cache size: {cap:,} tokens\n"
            itl_sum = itl_count = gen_total = prompt_total = 0.0  # a new process starts its counters at 0
            window_end = r.t + dt.timedelta(seconds=every_s)
            gen = prompt = 0
            busy = 0.0
            continue
        while r.t >= window_end:
            if gen and fmt == "vllm":
                # Throughput over busy time: idle windows are not logged by vLLM.
                yield (
                    f"(APIServer pid=4120) INFO {window_end:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: "
                    f"Avg prompt throughput: {prompt / every_s:.1f} tokens/s, Avg generation throughput: "
                    f"{gen / max(busy, 1e-9):.1f} tokens/s, Running: {batch} reqs, Waiting: 0 reqs, "
                    f"GPU KV cache usage: {100 * context / cap:.1f}%, Prefix cache hit rate: 80.0%\n"
                )
            elif fmt == "prometheus":
                yield (
                    f"# scrape_time: {window_end:%Y-%m-%dT%H:%M:%S}\n"
                    f'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name="m"}} {batch}\n'
                    f'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name="m"}} 0\n'
                    f'# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name="m"}} {context / cap:.4f}\n'
                    f'# TYPE vllm:generation_tokens counter\nvllm:generation_tokens_total{{model_name="m"}} {gen_total}\n'
                    f'# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total{{model_name="m"}} {prompt_total}\n'
                    f"# TYPE vllm:inter_token_latency_seconds histogram\n"
                    f'vllm:inter_token_latency_seconds_bucket{{le="+Inf",model_name="m"}} {itl_count}\n'
                    f'vllm:inter_token_latency_seconds_sum{{model_name="m"}} {itl_sum}\n'
                    f'vllm:inter_token_latency_seconds_count{{model_name="m"}} {itl_count}\n'
                )
            window_end += dt.timedelta(seconds=every_s)
            gen = prompt = 0
            busy = 0.0
        if r.kind == "prefill":
            prompt += r.new_tokens
            prompt_total += r.new_tokens
        elif r.kind == "decode":
            gen += r.tokens
            gen_total += r.tokens
            busy += r.step_s * sc.forwards_per_line
            per_seq = r.tokens // r.batch
            itl_sum += r.step_s * per_seq * r.batch
            itl_count += per_seq * r.batch
            batch, context = r.batch, r.context
