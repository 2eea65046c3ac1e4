"""tokdrift's batch-1 decode against this machine's memory bandwidth, and its prefill against the
machine's matrix-product rate.

    .venv/bin/python benchmarks/roofline.py [--quick] [--tokens 64] [--prompt 256] [--reps 5]
    .venv/bin/python benchmarks/roofline.py --prefill 2048 [--reps 5]

At batch 1 a decode step is a chain of matrix-vector products: every weight it touches is
read once and used for one multiply-add, so the step cannot beat (bytes it must read) /
(memory bandwidth). This script measures both and reports the engine's step time as a
fraction of that limit:

- bandwidth: a large float32 tensor copy (`dst.copy_(src)`, larger than the last-level
  cache), counted as bytes read + bytes written; also a read-only pass (`sum`) and a
  matrix-vector product (`mv`, the decode's own kind of kernel) over the same tensor; all
  with the decode's torch thread count. The limit uses the fastest of the three, so the
  fraction is never flattered by a slow way of moving memory;
- bytes per step: the dense weights (every parameter but the embedding table, of which one
  row is read), the routed experts a batch-1 step picks (top-k of each MoE layer: one token
  picks k distinct experts), K/V of the full-attention layers at the context used, and the
  linear-attention state (conv window + recurrent matrix) of each Gated DeltaNet layer;
- step time: engine steps at batch 1 (`Engine.step`, scheduling and sampling included).

Bandwidth and decode repetitions alternate, medians are reported, and the headline,
last, is the fraction of the roofline reached.

With `--prefill N` it measures a prefill instead: one prompt of N tokens through `Engine.step`
(one step when N fits a chunk), against the rate of a plain `torch.mm` of the prefill's own kind
([N, hidden] by [hidden, 4 hidden], float32, same threads). Its floating-point work:

- every matrix product and batched product the forward runs, counted by torch's own
  `FlopCounterMode` over one such prefill;
- the full-attention layers' two products, Q K^T and P V, which the CPU's flash kernel runs and
  the counter has no formula for: counted by formula, causal (query i reads keys 0..i), so
  2 D Hq N (N + 1) a layer (D the head size, Hq the query heads), as model-FLOPs figures count them.

Not counted: elementwise work, norms, the router's top-k, and the linear-attention layers'
recurrence (~7 Dk Dv a token a value head, run token by token in a C kernel); so the fraction
is a floor. The products-only fraction is printed beside it. Matrix products and prefills
alternate; the headline, last, is the prefill's share of the mm rate.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import clock, engine_decode, machine_line, median, prompt_ids, set_threads  # noqa: E402


class StepBytes(NamedTuple):
    dense: int  # weights every step reads
    experts: float  # routed experts picked per step, on average
    kv: float  # K and V at the average context
    state: int  # linear-attention state, read (and written back) once per step

    @property
    def total(self) -> float:
        return self.dense + self.experts + self.kv + self.state


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (smoke test)")
    parser.add_argument("--model", default=None, help="checkpoint directory (default: the built-in one)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens decoded per repetition")
    parser.add_argument("--prompt", type=int, default=256, help="prompt length in tokens")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (median)")
    parser.add_argument("--copy-mb", type=int, default=1024, help="size of the copied tensor in MiB")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for the copy and the decode")
    parser.add_argument("--prefill", type=int, default=0, help="measure a prefill of this many tokens instead")
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.prompt, args.reps, args.copy_mb = 4, 16, 1, 64
        args.prefill = min(args.prefill, 64)
    set_threads(args.threads)
    logging.getLogger("engine").setLevel(logging.WARNING)
    print(machine_line())
    if args.prefill:
        prefill_roofline(args.model, args.prefill, args.reps)
        return

    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine

    engine = Engine(
        EngineConfig(
            model=args.model,
            device="cpu",
            max_running_requests=1,
            kv_tokens=args.prompt + args.tokens + 64,
            cache_type="none",
        )
    )
    from engine.model.moe import SparseMoE

    moe_layers = sum(isinstance(layer.mlp, SparseMoE) for layer in engine.model.model.layers)
    picked_per_step = moe_layers * engine.model_config.num_experts_per_tok  # one token: k distinct a layer
    engine_decode(engine, [prompt_ids(args.prompt, 0)], 2)  # warm-up
    src = torch.randn(args.copy_mb * 2**20 // 4)  # [N] float32
    dst = torch.empty_like(src)
    matrix = src.view(-1, 4096)  # [N / 4096, 4096]
    vector = torch.randn(4096)  # [4096]
    bandwidths: dict[str, list[float]] = {"copy": [], "read": [], "mv": []}
    step_times, gemv_times, experts_per_step, forward_shares = [], [], [], []
    chain = _gemv_chain(engine)
    for rep in range(args.reps):
        bandwidths["copy"].append(_bandwidth(lambda d=dst, s=src: d.copy_(s), 2 * src.numel() * 4))
        bandwidths["read"].append(_bandwidth(lambda s=src: s.sum(), src.numel() * 4))
        bandwidths["mv"].append(_bandwidth(lambda m=matrix: torch.mv(m, vector), src.numel() * 4))
        shares: list[float] = []
        run = engine_decode(
            engine,
            [prompt_ids(args.prompt, rep + 1)],
            args.tokens,
            on_step=lambda stats: shares.append(stats.forward_s / stats.duration_s),
        )
        step_times.append(run.step_s)
        forward_shares.append(median(shares))
        gemv_times.append(_time_chain(chain, picked_per_step))
        experts_per_step.append(picked_per_step)
    del src, dst, matrix
    bw_by_kind = {kind: median(values) for kind, values in bandwidths.items()}
    fastest = max(bw_by_kind, key=bw_by_kind.get)
    bw, step_s = bw_by_kind[fastest], median(step_times)
    avg_context = args.prompt + args.tokens / 2
    need = _step_bytes(engine, median(experts_per_step), avg_context)
    limit_s = need.total / bw
    print(
        f"memory bandwidth ({args.copy_mb} MiB tensor, {args.threads} thread(s)): copy {bw_by_kind['copy'] / 1e9:.2f} "
        f"GB/s (read + write), read {bw_by_kind['read'] / 1e9:.2f} GB/s, mv {bw_by_kind['mv'] / 1e9:.2f} GB/s; "
        f"limit from {fastest}"
    )
    print(
        f"bytes per decode step: {need.total / 1e6:.1f} MB = dense weights {need.dense / 1e6:.1f} + routed experts "
        f"{need.experts / 1e6:.1f} ({median(experts_per_step):.0f} picked) + KV {need.kv / 1e6:.2f} "
        f"(context {avg_context:.0f}) + linear-attention state {need.state / 1e6:.2f}"
    )
    gemv_s = median(gemv_times)
    print(
        f"where the step goes: the same matrix-vector products alone (F.linear over the step's weights, "
        f"back to back) {gemv_s * 1e3:.2f} ms = {gemv_s / step_s:.0%} of the step, {need.total / gemv_s / 1e9:.2f} GB/s; "
        f"model forward {median(forward_shares):.0%} of the step, the rest scheduling and sampling"
    )
    print(
        f"roofline step {limit_s * 1e3:.2f} ms ({1 / limit_s:.0f} tok/s); tokdrift batch-1 step "
        f"{step_s * 1e3:.2f} ms ({1 / step_s:.0f} tok/s; runs {', '.join(f'{t * 1e3:.1f}' for t in step_times)} ms)"
    )
    copy_limit_s = need.total / bw_by_kind["copy"]
    print(f"against the copy bandwidth alone: {copy_limit_s / step_s:.0%} of its limit ({copy_limit_s * 1e3:.2f} ms)")
    print(f"roofline_fraction={limit_s / step_s:.0%} (batch-1 decode vs the {fastest}-bandwidth limit)")


def prefill_roofline(model: str | None, num_tokens: int, reps: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from engine import SamplingParams
    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine

    engine = Engine(
        EngineConfig(model=model, device="cpu", max_running_requests=1, kv_tokens=num_tokens + 64, cache_type="none")
    )
    params = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)

    def prefill(seed: int) -> float:
        engine.add_request(prompt_ids(num_tokens, seed, engine.model_config.vocab_size), params)
        t0 = clock()
        while engine.has_work():
            engine.step()
        seconds = clock() - t0
        engine.take_updates()
        return seconds

    prefill(0)  # warm-up
    counter = FlopCounterMode(display=False)
    with counter:
        prefill(1)
    products = counter.get_total_flops()
    mc = engine.model_config
    attention = len(mc.full_attention_layers) * 2 * mc.head_dim * mc.num_attention_heads * num_tokens * (num_tokens + 1)
    flops = products + attention
    hidden = mc.hidden_size
    a, b = torch.randn(num_tokens, hidden), torch.randn(hidden, 4 * hidden)
    mm_flops = 2 * num_tokens * hidden * 4 * hidden
    rates, times = [], []
    for rep in range(reps):
        rates.append(mm_flops / _best(lambda: torch.mm(a, b)))
        times.append(prefill(rep + 2))
    rate, seconds = median(rates), median(times)
    print(
        f"prefill of {num_tokens} tokens: {flops / 1e9:.2f} GFLOP = {products / 1e9:.2f} in matrix products "
        f"(FlopCounterMode) + {attention / 1e9:.2f} in causal attention ({len(mc.full_attention_layers)} layers, "
        f"by formula); matrix-product rate ({num_tokens}x{hidden} by {hidden}x{4 * hidden}) {rate / 1e9:.1f} "
        f"GFLOP/s (runs {', '.join(f'{r / 1e9:.1f}' for r in rates)})"
    )
    print(
        f"tokdrift prefill {seconds * 1e3:.0f} ms ({num_tokens / seconds:.0f} tok/s; runs "
        f"{', '.join(f'{t * 1e3:.0f}' for t in times)} ms) = {flops / seconds / 1e9:.1f} GFLOP/s"
    )
    print(f"matrix products alone: {products / rate / seconds:.0%} of the mm rate")
    print(f"prefill_roofline_fraction={flops / rate / seconds:.0%} (prefill of {num_tokens} tokens vs the mm rate)")


def _best(fn, repeats: int = 3) -> float:
    """Seconds of the fastest of `repeats` calls of `fn`."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def _bandwidth(fn, num_bytes: int, repeats: int = 3) -> float:
    """Bytes per second of the fastest of `repeats` calls of `fn`, which moves `num_bytes`."""
    return num_bytes / _best(fn, repeats)


def _gemv_chain(engine) -> tuple[list, list]:
    """(weight, input vector) pairs for the matrices a decode step multiplies: the dense 2-D
    weights but the embedding table, and every routed expert's two matrices (a pass takes as
    many experts as a step picks)."""
    model = engine.model
    embed = model.model.embed_tokens.weight
    dense = [(w, torch.randn(1, w.shape[1])) for w in model.parameters() if w.dim() == 2 and w is not embed]
    experts = []
    for w in getattr(engine.experts, "_weights", {}).values():
        experts.append([(w.gate_up, torch.randn(1, w.gate_up.shape[1])), (w.down, torch.randn(1, w.down.shape[1]))])
    return dense, experts  # [O, I] weights with [1, I] inputs


def _time_chain(chain: tuple[list, list], num_experts: int, repeats: int = 3) -> float:
    """Median seconds of one back-to-back pass of F.linear over the dense weights and `num_experts` experts."""
    dense, experts = chain
    pairs = dense + [pair for expert in experts[:num_experts] for pair in expert]
    times = []
    for _ in range(repeats):
        t0 = clock()
        for w, x in pairs:
            torch.nn.functional.linear(x, w)  # [1, O]
        times.append(clock() - t0)
    return median(times)


def _step_bytes(engine, experts_per_step: float, context: float) -> StepBytes:
    model, mc = engine.model, engine.model_config
    embed = model.model.embed_tokens.weight
    dense = sum(p.numel() * p.element_size() for p in model.parameters()) - embed.numel() * embed.element_size()
    dense += embed.shape[1] * embed.element_size()  # one embedding row
    expert_bytes = 3 * mc.moe_intermediate_size * mc.hidden_size * embed.element_size()
    kv = context * engine.kv_pool.bytes_per_slot
    state = engine.state_pool.bytes_per_slot
    return StepBytes(dense, experts_per_step * expert_bytes, kv, state)


if __name__ == "__main__":
    main()
