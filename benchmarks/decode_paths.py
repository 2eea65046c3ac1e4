"""The engine's fast path against its reference layers at decode, on one checkpoint.

    .venv/bin/python benchmarks/decode_paths.py [--quick] [--model DIR] [--threads 1] [--reps 5]

Three engines in one process, the same checkpoint: `forward_path='fast'`, `'reference'`, and the
fast path with its C kernels switched off (`fast-torch`: torch ops throughout,
engine/kernels/cpu.py); decode tok/s at batch 1 and batch 8 (256-token prompts, greedy, a
fixed output length), repetitions alternating between them, medians. All must give the same
greedy tokens; the script checks that on every run. The headline, last: fast / reference.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import engine_decode, machine_line, median, prompt_ids, set_threads  # noqa: E402

PATHS = ("reference", "fast-torch", "fast")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (smoke test)")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the built-in one)")
    parser.add_argument("--tokens", type=int, default=48, help="tokens decoded per request")
    parser.add_argument("--prompt", type=int, default=256, help="prompt length in tokens")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.prompt, args.reps = 4, 16, 1
    set_threads(args.threads)
    logging.getLogger("engine").setLevel(logging.WARNING)
    print(machine_line())

    import os

    from engine.kernels import cpu as cpu_kernels
    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine

    engines = {}
    for path in PATHS:
        os.environ["TOKDRIFT_CPU_KERNELS"] = "0" if path == "fast-torch" else "1"
        cpu_kernels.reset()
        engines[path] = Engine(
            EngineConfig(
                model=args.model,
                device="cpu",
                max_running_requests=8,
                kv_tokens=8 * (args.prompt + args.tokens + 8),
                forward_path=path.split("-")[0],
            )
        )
    os.environ.pop("TOKDRIFT_CPU_KERNELS")
    print(f"fast path: {engines['fast'].model.fast_layers.kernel_note}")
    batches = {1: [prompt_ids(args.prompt, seed=1)], 8: [prompt_ids(args.prompt, seed=s) for s in range(2, 10)]}
    runs: dict[tuple[str, int], list[float]] = {(p, b): [] for p in PATHS for b in batches}
    same = True
    for _ in range(args.reps):
        for size, prompts in batches.items():
            tokens = {}
            for path, engine in engines.items():
                outputs: list[list[int]] = []
                runs[(path, size)].append(engine_decode(engine, prompts, args.tokens, outputs=outputs).tokens_per_s)
                tokens[path] = outputs
            same = same and tokens["fast"] == tokens["reference"] == tokens["fast-torch"]
    ratios = {}
    for size in batches:
        ref, fast = median(runs[("reference", size)]), median(runs[("fast", size)])
        torch_ops = median(runs[("fast-torch", size)])
        ratios[size] = fast / ref
        print(
            f"batch {size}: reference {ref:.1f} tok/s, fast without the C kernels {torch_ops:.1f} tok/s, fast "
            f"{fast:.1f} tok/s ({ratios[size]:.2f}x; the kernels {fast / torch_ops:.2f}x); runs "
            + "; ".join(f"{p} {', '.join(f'{v:.0f}' for v in runs[(p, size)])}" for p in PATHS)
        )
    print(f"fast_vs_reference batch1={ratios[1]:.2f}x batch8={ratios[8]:.2f}x; same greedy tokens: {same}")


if __name__ == "__main__":
    main()
