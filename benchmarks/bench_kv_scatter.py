"""What the kv-scatter fault costs a decode step: the same long-context decode on KV slots handed
out contiguously (healthy allocator) and scattered over the pool (kv-scatter, after the pool has
cycled once). Default model, one thread; variants interleaved. On the CPU through the torch
attention backend; with --device cuda through --attention-backend (the Triton kernel reads the
scattered slots in place, the torch backend gathers them first).

    .venv/bin/python benchmarks/bench_kv_scatter.py [--context 8192] [--kv-tokens 262144] [--reps 3]
    python3 benchmarks/bench_kv_scatter.py --device cuda --attention-backend triton
"""

from __future__ import annotations

import argparse

from _bench import engine_decode, machine_line, median, prompt_ids, set_threads

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine


def cycle_pool(engine: Engine) -> None:
    """Use every KV slot once and give them all back, in chunks, as a pool that has served a while."""
    kv = engine.kv_allocator
    chunks = [kv.alloc(1024) for _ in range(kv.num_slots // 1024)]
    for chunk in chunks[::2] + chunks[1::2]:
        kv.free(chunk)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--kv-tokens", type=int, default=262144)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--attention-backend", default="torch", help="torch or triton (CUDA only)")
    args = ap.parse_args()
    set_threads(1, args.device)
    engines = {}
    for name, faults in (("healthy", ()), ("kv-scatter", ("kv-scatter",))):
        engine = Engine(
            EngineConfig(
                kv_tokens=args.kv_tokens,
                cache_type="none",
                attention_backend=args.attention_backend,
                device=args.device,
                faults=faults,
            )
        )
        cycle_pool(engine)
        engines[name] = engine
    steps: dict[str, list[float]] = {name: [] for name in engines}
    forwards: dict[str, list[float]] = {name: [] for name in engines}
    for rep in range(args.reps):
        for name, engine in engines.items():
            prompts = [prompt_ids(args.context, seed=rep * 10 + b) for b in range(args.batch)]
            fwd: list[float] = []
            run = engine_decode(engine, prompts, args.tokens, on_step=lambda s: fwd.append(s.forward_s))
            steps[name].append(run.step_s)
            forwards[name].append(median(fwd))
            fs = engine.fault_stats()
            print(
                f"rep {rep} {name:10s}: decode step {run.step_s * 1e3:7.1f} ms, forward {median(fwd) * 1e3:7.1f} ms "
                f"(free-list disorder {fs.kv_free_list_disorder:.2f})",
                flush=True,
            )
    print(machine_line())
    print(
        f"context {args.context} x batch {args.batch}, KV pool {args.kv_tokens} slots, {args.tokens} tokens, "
        f"{args.reps} reps (medians); {args.device}, {args.attention_backend} attention"
    )
    for name in engines:
        print(
            f"  {name:10s}: decode step {median(steps[name]) * 1e3:.1f} ms, forward {median(forwards[name]) * 1e3:.1f} ms"
        )
    ratio = median(steps["kv-scatter"]) / median(steps["healthy"])
    print(f"kv-scatter decode step / healthy: {ratio:.2f}x")


if __name__ == "__main__":
    main()
