"""What the eviction-scan fault costs a decode step once the KV pool is full: the same workload on
a healthy engine and on one with `faults=("eviction-scan",)`, stepped in turn (A B A B ...) so a
neighbour's load lands on both alike. Default model, CPU.

The workload fills the pool: distinct prompts that share nothing, greedy, eos ignored, four
running at a time; every finished request stays cached, so from about the tenth request on
each admission and each decode that needs a KV slot must evict. Step time is the engine's own
`StepStats.duration_s` (wall time); "before full" is a decode step before the engine's first
eviction, "after full" one after it.

    .venv/bin/python benchmarks/bench_eviction_scan.py [--requests 40] [--prompt 1500] [--kv-tokens 16384]
"""

from __future__ import annotations

import argparse
from typing import NamedTuple

from _bench import machine_line, median, prompt_ids, set_threads

from engine import SamplingParams
from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine


class Step(NamedTuple):
    full: bool  # the engine had evicted before this step
    decode: bool  # the step decoded at least one token
    duration_s: float
    evict_s: float
    evictable_tokens: int  # after the step


class Variant:
    def __init__(self, name: str, engine: Engine) -> None:
        self.name, self.engine = name, engine
        self.steps: list[Step] = []

    def step(self) -> None:
        full = self.engine.cache.eviction_counters().num_calls > 0
        stats = self.engine.step()
        if stats is not None:
            self.steps.append(
                Step(
                    full=full,
                    decode=stats.num_decode_tokens > 0,
                    duration_s=stats.duration_s,
                    evict_s=stats.evict_s or 0.0,
                    evictable_tokens=self.engine.cache.evictable_tokens,
                )
            )

    def decode_median(self, full: bool, field: str = "duration_s") -> float | None:
        values = [getattr(s, field) for s in self.steps if s.decode and s.full == full]
        return median(values) if values else None

    def prefill_median(self, full: bool) -> float | None:
        values = [s.duration_s for s in self.steps if not s.decode and s.full == full]
        return median(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40, help="requests in the workload")
    ap.add_argument("--prompt", type=int, default=1500, help="prompt tokens per request (distinct prompts)")
    ap.add_argument("--output", type=int, default=64, help="output tokens per request")
    ap.add_argument("--kv-tokens", type=int, default=16384, help="KV pool size in tokens")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()
    set_threads(args.threads)
    variants = [
        Variant(
            name,
            Engine(
                EngineConfig(
                    kv_tokens=args.kv_tokens, mamba_slots=16, max_running_requests=4, device="cpu", faults=faults
                )
            ),
        )
        for name, faults in (("healthy", ()), ("eviction-scan", ("eviction-scan",)))
    ]
    params = SamplingParams(max_tokens=args.output, temperature=0, ignore_eos=True)
    requests = {
        v.name: [v.engine.add_request(prompt_ids(args.prompt, seed=i + 1), params) for i in range(args.requests)]
        for v in variants
    }
    while any(v.engine.has_work() for v in variants):
        for v in variants:
            if v.engine.has_work():
                v.step()
    healthy, fault = variants
    same = [r.output_ids for r in requests["healthy"]] == [r.output_ids for r in requests["eviction-scan"]]

    print(machine_line().split("; timed in")[0] + "; step times: StepStats.duration_s (wall time)")
    print(
        f"{args.requests} requests x {args.prompt} prompt + {args.output} output tokens, 4 running, "
        f"KV pool {args.kv_tokens} tokens, page_size 1; same greedy tokens: {same}"
    )
    for v in variants:
        ev = v.engine.cache.eviction_counters()
        evicted = v.engine.cache.cache_report().evicted_tokens
        n_full = sum(s.decode and s.full for s in v.steps)
        print(
            f"  {v.name:13s}: decode step before full {v.decode_median(False) * 1e3:6.1f} ms, after full "
            f"{v.decode_median(True) * 1e3:6.1f} ms (eviction {v.decode_median(True, 'evict_s') * 1e3:5.2f} ms of it, "
            f"{n_full} steps); prefill step before/after full {v.prefill_median(False):5.2f} / "
            f"{v.prefill_median(True):5.2f} s; {ev.num_calls} evict calls, {evicted} tokens evicted, "
            f"{ev.num_visited / max(evicted, 1):.0f} visited per token evicted, evictable after full "
            f"{v.decode_median(True, 'evictable_tokens'):.0f} tokens"
        )
    for v in variants:
        print(
            f"  {v.name:13s} decode step after full / before full: "
            f"{v.decode_median(True) / v.decode_median(False):.2f}x"
        )
    print(f"  before full, eviction-scan / healthy: {fault.decode_median(False) / healthy.decode_median(False):.2f}x")
    print(
        f"  prefill step after full, eviction-scan / healthy: "
        f"{fault.prefill_median(True) / healthy.prefill_median(True):.2f}x"
    )
    print(
        f"eviction-scan decode step after the pool is full / healthy: "
        f"{fault.decode_median(True) / healthy.decode_median(True):.2f}x"
    )


if __name__ == "__main__":
    main()
