"""What the expert-thrash fault costs a decode step as the engine ages: two engines with the offload
expert cache (default model unless --model), one healthy and one with the fault, serve the same
steady workload — prompts of the agentic example trace, cut to --prompt-tokens, a new request
admitted whenever one finishes, --concurrency running — stepped alternately so a neighbour's load
lands on both alike. Each decode step at full batch is timed; the early and late medians of each
engine are compared, the headline (late/early of the fault over late/early of the healthy engine,
so drift in the workload itself cancels) last.

    .venv/bin/python benchmarks/bench_expert_thrash.py [--moe-cache-size 96] [--requests 160]
    soak checkpoint /tmp/wide --moe-intermediate-size 768    # experts wide enough for a copy to cost
    .venv/bin/python benchmarks/bench_expert_thrash.py --model /tmp/wide --requests 60
    python3 benchmarks/bench_expert_thrash.py --device cuda    # host tier in pinned memory, slots on the GPU

On the default model the decode step barely moves although the miss rate goes to 1.0 (an expert
copy is cheap beside the step there); docs/faults.md has the figures for both.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _bench import clock, machine_line, median, set_threads

from engine import SamplingParams
from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from replay.materialize import MaterializeConfig, materialize
from replay.trace import read_trace

TRACE = Path(__file__).resolve().parents[1] / "examples" / "opencode.jsonl"


class Lane:
    """One engine, its own queue of the same requests, and what each full-batch decode step cost."""

    def __init__(self, name: str, engine: Engine, requests: list[tuple[list[int], int]], concurrency: int):
        self.name, self.engine, self.queue, self.concurrency = name, engine, list(requests), concurrency
        self.running = []
        self.decode_s: list[float] = []  # full-batch decode steps, in order
        self.misses: list[tuple[int, int]] = []  # (hits, misses) after each of those steps
        self.leaked: list[int] = []  # slots leaked after each of those steps
        self.num_admitted = 0

    def step(self) -> bool:
        self.running = [r for r in self.running if not r.is_finished]
        while len(self.running) < self.concurrency and self.queue:
            prompt, max_tokens = self.queue.pop(0)
            self.num_admitted += 1
            self.running.append(
                self.engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
            )
        if not self.engine.has_work():
            return False
        t0 = clock()
        stats = self.engine.step()
        seconds = clock() - t0
        self.engine.take_updates()
        if stats is not None and stats.phase == "decode" and stats.batch_size == self.concurrency:
            self.decode_s.append(seconds)
            st = self.engine.expert_cache_stats()
            self.misses.append((st.hits, st.misses))
            self.leaked.append(st.leaked_slots)
        return True


def window(lane: Lane, lo: float, hi: float) -> tuple[float, float]:
    """Median decode step and miss rate over the share [lo, hi) of the lane's full-batch steps."""
    n = len(lane.decode_s)
    a, b = int(n * lo), max(int(n * lo) + 1, int(n * hi))
    (h0, m0), (h1, m1) = lane.misses[max(a - 1, 0)], lane.misses[b - 1]
    return median(lane.decode_s[a:b]), (m1 - m0) / max(1, (h1 + m1) - (h0 + m0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="checkpoint directory (default: the built-in model)")
    ap.add_argument("--moe-cache-size", type=int, default=96)
    ap.add_argument("--requests", type=int, default=160)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--prompt-tokens", type=int, default=384)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--share", type=float, default=0.2, help="share of the steps in each of the early and late windows")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (a miss then copies an expert over PCIe)")
    args = ap.parse_args()
    set_threads(args.threads, args.device)
    trace = read_trace(TRACE)
    mc = MaterializeConfig(block_size=trace.header.block_size, max_context=4096)
    calls = [materialize(c, mc) for c in trace.calls]
    requests = []
    for i in range(args.requests):
        p = calls[i % len(calls)]
        # the trace's own output lengths, within 16..96, so requests finish (and prefills arrive) staggered
        requests.append((p.token_ids[-args.prompt_tokens :], min(96, max(16, p.max_output_tokens))))
    lanes = [
        Lane(
            name,
            Engine(
                EngineConfig(
                    model=args.model,
                    device=args.device,
                    kv_tokens=32768,
                    moe_backend="offload",
                    moe_cache_size=args.moe_cache_size,
                    num_threads=args.threads,
                    faults=faults,
                )
            ),
            requests,
            args.concurrency,
        )
        for name, faults in (("healthy", ()), ("expert-thrash", ("expert-thrash",)))
    ]
    active = list(lanes)
    while active:
        active = [lane for lane in active if lane.step()]
    print(machine_line())
    print(
        f"{args.model or 'default model'} on {args.device}, offload expert cache of {args.moe_cache_size} slots, {args.requests} requests of "
        f"{args.prompt_tokens} prompt tokens, {args.concurrency} running; decode steps at batch "
        f"{args.concurrency}, first and last {args.share:.0%} of them (medians)"
    )
    print("  by fifths of the full-batch decode steps: median step ms (miss rate, slots leaked)")
    for i in range(5):
        cells = []
        for lane in lanes:
            step, miss = window(lane, i / 5, (i + 1) / 5)
            cells.append(
                f"{lane.name} {step * 1e3:6.2f} ({miss:.2f}, {lane.leaked[int(len(lane.leaked) * (i + 1) / 5) - 1]:3d})"
            )
        print(f"    {i + 1}/5: " + "   ".join(cells))
    ratios = {}
    for lane in lanes:
        (early, early_miss), (late, late_miss) = window(lane, 0, args.share), window(lane, 1 - args.share, 1)
        st = lane.engine.expert_cache_stats()
        ratios[lane.name] = late / early
        print(
            f"  {lane.name:13s}: early {early * 1e3:6.2f} ms (miss rate {early_miss:.2f}), late {late * 1e3:6.2f} ms "
            f"(miss rate {late_miss:.2f}); late/early {late / early:.2f}x; {len(lane.decode_s)} steps, "
            f"{st.bytes_copied / 2**30:.2f} GiB copied, {st.leaked_slots} slots leaked"
        )
    late_vs = window(lanes[1], 1 - args.share, 1)[0] / window(lanes[0], 1 - args.share, 1)[0]
    print(f"expert-thrash / healthy decode step, late: {late_vs:.2f}x")
    print(f"expert-thrash late/early over healthy late/early: {ratios['expert-thrash'] / ratios['healthy']:.2f}x")


if __name__ == "__main__":
    main()
