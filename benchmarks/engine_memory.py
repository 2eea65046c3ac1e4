"""Memory of a long run: requests from the example trace through the engine thread as `soak serve`
runs it, with the process's RSS and the engine's own structures printed at intervals.

    .venv/bin/python benchmarks/engine_memory.py [--requests 2000] [--kv-tokens 32768] [--quick]

The sessions of examples/opencode.jsonl replay closed loop, `--concurrency` at a time and without
think time, every loop of the trace with fresh content as a soak's loops have, outputs capped at
`--max-tokens` so that thousands of requests take minutes. They go through `EngineRunner` with the
server's metrics as its observer: the engine steps on its own thread (and malloc arena), streams
text and records steps as it does behind HTTP. Prompts are materialised before the engine starts,
so the driver's own memory does not move while the rows are taken.

Each row: RSS; glibc's heap (in use, and free but kept, `engine.runtime.hostmalloc.heap_stats`);
the engine's structures (`Engine.memory_report()`); the step history and live streams of the
runner; objects the garbage collector tracks. The last line is the growth from the row at
`--warmup` requests to the last: what is left once the caches and the arena have filled.
"""

from __future__ import annotations

import argparse
import gc
import queue
import time
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np
from _bench import machine_line

TRACE = Path(__file__).resolve().parents[1] / "examples" / "opencode.jsonl"
MB = 2**20


class Session(NamedTuple):
    name: str
    prompts: list[np.ndarray]  # token ids, uint16 [prompt len] each
    max_tokens: list[int]


class Row(NamedTuple):
    num_requests: int
    num_steps: int
    rss: int
    heap_in_use: int | None
    heap_free: int | None
    radix_nodes: int
    cached_tokens: int
    index_bytes: int
    heap_entries: int
    steps_held: int
    num_live: int
    gc_objects: int


def sessions(num_requests: int, scale: float, max_tokens: int) -> list[Session]:
    """Enough loops of the trace's sessions for `num_requests` calls, each loop fresh content."""
    from replay.materialize import MaterializeConfig, Materializer, shared_block_ids
    from replay.trace import read_trace

    trace = read_trace(TRACE)
    by_name = defaultdict(list)
    for call in trace.calls:
        by_name[call.session].append(call)
    calls_of = [sorted(calls, key=lambda c: (c.turn, c.t)) for calls in by_name.values()]
    config = MaterializeConfig(
        block_size=trace.header.block_size, scale=scale, max_context=trace.header.meta.get("max_context")
    )
    materialize = Materializer(config, shared_block_ids(trace.calls))
    out: list[Session] = []
    loop, total = 0, 0
    while total < num_requests:
        for i, calls in enumerate(calls_of):
            name = f"s{i}@{loop}"
            prompts = [p for p in (materialize(c, loop=loop, session_key=name) for c in calls) if p is not None]
            out.append(
                Session(
                    name,
                    [np.array(p.token_ids, np.uint16) for p in prompts],
                    [min(max_tokens, p.max_output_tokens) for p in prompts],
                )
            )
            materialize.forget(name)
            total += len(prompts)
        loop += 1
    return out


def take_row(runner, num_requests: int) -> Row:
    import psutil

    from engine.runtime.hostmalloc import heap_stats

    def on_engine(engine):
        gc.collect()  # what is left, not what the next automatic collection would free
        return engine.memory_report(), engine.num_steps, len(gc.get_objects())

    report, num_steps, num_objects = runner.call(on_engine).result(timeout=600)
    heap = heap_stats()
    return Row(
        num_requests=num_requests,
        num_steps=num_steps,
        rss=psutil.Process().memory_info().rss,
        heap_in_use=heap.in_use_bytes if heap else None,
        heap_free=heap.free_bytes if heap else None,
        radix_nodes=report.radix_nodes,
        cached_tokens=report.cached_tokens,
        index_bytes=report.radix_index_bytes,
        heap_entries=report.eviction_heap_entries,
        steps_held=runner.num_steps_held,
        num_live=runner.num_live,
        gc_objects=num_objects,
    )


def print_row(row: Row) -> None:
    mb = lambda v: "-" if v is None else f"{v / MB:.1f}"
    print(
        f"{row.num_requests:>8} {row.num_steps:>7} {row.rss / MB:>7.1f} {mb(row.heap_in_use):>8} "
        f"{mb(row.heap_free):>8} {row.radix_nodes:>6} {row.cached_tokens:>7} {row.index_bytes / 1024:>8.0f} "
        f"{row.heap_entries:>6} {row.steps_held:>6} {row.num_live:>4} {row.gc_objects:>8}",
        flush=True,
    )


def run(runner, all_sessions: list[Session], num_requests: int, concurrency: int, every: int) -> list[Row]:
    """Closed loop: each session sends its next prompt when the previous one has finished."""
    from engine.sampling import SamplingParams

    finished: queue.Queue = queue.Queue()
    pending = iter(all_sessions)
    active: dict[str, tuple[Session, int]] = {}  # request id -> (session, index of its prompt)
    num_sent = num_done = 0

    def send(session: Session, index: int) -> None:
        nonlocal num_sent
        request_id = f"{session.name}#{index}"
        params = SamplingParams(max_tokens=session.max_tokens[index], temperature=0, ignore_eos=True)
        sink = lambda delta, rid=request_id: delta.finished and finished.put(rid)
        runner.submit(request_id, session.prompts[index].tolist(), params, sink).result(timeout=600)
        active[request_id] = (session, index)
        num_sent += 1

    def start_session() -> None:
        for session in pending:
            if session.prompts:
                send(session, 0)
                return

    rows = [take_row(runner, 0)]
    print_row(rows[-1])
    for _ in range(concurrency):
        start_session()
    while num_done < num_requests:
        session, index = active.pop(finished.get(timeout=600))
        num_done += 1
        if num_sent < num_requests:
            if index + 1 < len(session.prompts):
                send(session, index + 1)
            else:
                start_session()
        if num_done % every == 0 or num_done == num_requests:
            rows.append(take_row(runner, num_done))
            print_row(rows[-1])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests to run")
    parser.add_argument("--every", type=int, default=None, help="requests between rows (default: a tenth)")
    parser.add_argument(
        "--warmup", type=int, default=None, help="requests before the growth is measured (default: a quarter)"
    )
    parser.add_argument(
        "--kv-tokens",
        type=int,
        default=32768,
        help="KV pool; small enough that the prefix cache fills and evicts early "
        "(0: sized from memory as `soak serve` does)",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="output cap per request")
    parser.add_argument("--scale", type=float, default=1.0, help="trace lengths times this")
    parser.add_argument("--concurrency", type=int, default=4, help="sessions in flight")
    parser.add_argument("--step-history", type=int, default=65536, help="the server's --step-history")
    parser.add_argument(
        "--warmup-chunks", type=int, default=2, help="the server's --warmup-chunks (0: none, as before 2026-12-03)"
    )
    parser.add_argument("--model", default=None, help="checkpoint directory (default: built-in)")
    parser.add_argument("--quick", action="store_true", help="a tiny run: 40 short requests")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.kv_tokens, args.max_tokens, args.scale = 40, 2048, 4, 0.1
    every = args.every or max(1, args.requests // 10)
    warmup = args.warmup if args.warmup is not None else args.requests // 4
    warmup -= warmup % every  # a row is taken there

    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine
    from engine.server.metrics import ServerMetrics
    from engine.server.runner import EngineRunner

    all_sessions = sessions(args.requests, args.scale, args.max_tokens)
    config = EngineConfig(model=args.model, kv_tokens=args.kv_tokens or None, num_threads=1)
    engine = Engine(config)
    runner = EngineRunner(engine, args.step_history, ServerMetrics("bench"), args.warmup_chunks)
    print(machine_line())
    print(
        f"engine: {engine.kv_allocator.num_slots} KV tokens, {config.mamba_slots} state slots, step history "
        f"{args.step_history}, warm-up {args.warmup_chunks} chunks; {args.requests} requests of {TRACE.name} (scale {args.scale}, outputs <= "
        f"{args.max_tokens} tokens, {args.concurrency} sessions in flight)"
    )
    print(
        f"{'requests':>8} {'steps':>7} {'rss_MB':>7} {'heap_MB':>8} {'kept_MB':>8} {'nodes':>6} {'cached':>7} "
        f"{'index_KB':>8} {'heapq':>6} {'steps':>6} {'live':>4} {'objects':>8}"
    )
    runner.start()
    start = time.perf_counter()
    try:
        rows = run(runner, all_sessions, args.requests, args.concurrency, every)
    finally:
        runner.stop()
    base = next(r for r in rows if r.num_requests >= warmup)
    last = rows[-1]
    span = last.num_requests - base.num_requests
    growth = last.rss - base.rss
    per_1000 = growth / 1024 / span * 1000 if span else 0.0
    print(
        f"ran {args.requests} requests, {last.num_steps} steps in {time.perf_counter() - start:.0f} s; "
        f"heap_MB: malloc in use, kept_MB: freed but kept by malloc, index_KB: radix arrays, "
        f"heapq: eviction heap entries, steps: step history held"
    )
    print(f"rss growth after warm-up: {growth / MB:.1f} MB over {span} requests ({per_1000:.0f} KB per 1000 requests)")


if __name__ == "__main__":
    main()
