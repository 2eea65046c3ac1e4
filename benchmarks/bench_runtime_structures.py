"""Costs of the engine's index structures, measured against each other in one run.

    .venv/bin/python benchmarks/bench_runtime_structures.py [--leaves 4000]

Prints: the allocator's summary() on a fragmented 256K-slot pool; alloc/free with the event
tracer off and on; and, last, the headline: cost per eviction of the incremental LRU heap
versus the full-tree scan, on the same tree.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from engine.cache import make_prefix_cache
from engine.memory.allocator import SlotAllocator


def per_call(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def bench_summary() -> None:
    a = SlotAllocator(262144)
    slots = a.alloc(262144)
    rng = np.random.default_rng(0)
    a.free(slots[rng.random(262144) < 0.3])  # ~79K scattered free slots
    s = a.summary()
    dt = per_call(a.summary, 50)
    print(
        f"allocator summary(): {dt * 1e3:.2f} ms on 262144 slots "
        f"({s.num_free_runs} free runs, fragmentation {s.fragmentation:.3f})"
    )


def bench_tracer() -> None:
    def churn(a: SlotAllocator) -> None:
        held = [a.alloc(16) for _ in range(64)]
        for s in held:
            a.free(s)

    off = SlotAllocator(4096)
    on = SlotAllocator(4096)
    on.enable_events(maxlen=1024)
    t_off = per_call(lambda: churn(off), 200)
    t_on = per_call(lambda: churn(on), 200)
    print(f"alloc+free x64: tracer off {t_off * 1e6:.0f} us, on {t_on * 1e6:.0f} us (on/off {t_on / t_off:.2f})")


def build_tree(policy: str, leaves: int, seed: int = 0):
    rng = random.Random(seed)
    kv = SlotAllocator(leaves * 16 + 1024)
    cache = make_prefix_cache("radix", kv, None, policy)
    for i in range(leaves):  # a shared system prompt, then per-session branches
        tokens = [0] * 8 + [rng.randrange(1000) for _ in range(8)]
        slots = kv.alloc(len(tokens))
        res = cache.insert(tokens, slots)
        kv.free(res.dup_kv_slot_ids)
    return cache


def bench_eviction(leaves: int) -> None:
    times = {}
    for policy in ("lru", "lru_scan"):
        cache = build_tree(policy, leaves)
        n_evict = 200
        t0 = time.perf_counter()
        for _ in range(n_evict):
            cache.evict(1)
        times[policy] = (time.perf_counter() - t0) / n_evict
    print(
        f"eviction per leaf, tree of ~{leaves} leaves: lru {times['lru'] * 1e6:.1f} us, "
        f"lru_scan {times['lru_scan'] * 1e6:.1f} us"
    )
    print(
        f"headline: the full-tree scan costs {times['lru_scan'] / times['lru']:.0f}x the "
        f"incremental heap per eviction at {leaves} leaves"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leaves", type=int, default=4000, help="leaves in the eviction tree")
    args = ap.parse_args()
    bench_summary()
    bench_tracer()
    bench_eviction(args.leaves)


if __name__ == "__main__":
    main()
