"""tokdrift's engine against transformers `generate` on the same checkpoint (float32, CPU).

    .venv/bin/python benchmarks/engine_vs_hf.py [--quick] [--configs default,small] [--threads 1,2]
                                                [--tokens 96] [--prompt 256] [--reps 3] [--turns 8]
                                                [--e2e-prompts 256,2048]

Checkpoints: the built-in default (~35M parameters), `small` (an 18M random Qwen3-Next:
vocab 4096, hidden 256, 8 layers, 16 experts top-2) and `large` (161M), the random ones built
with transformers and written with `save_pretrained` to a temporary directory. For each, at
each thread count: decode tok/s at batch 1 and batch 8 (same prompts, greedy, a fixed output
length: `ignore_eos` here, `min_new_tokens` there), and the end-to-end time of a multi-turn
agent session (each turn's prompt = the previous prompt + its output + a new append), where
tokdrift's prefix cache computes only the append and transformers recomputes the context.
tokdrift runs with its default forward path (`forward_path='fast'`).

End to end (`--e2e-prompts`, each length at batch 1 and batch 8): the whole generation, prompt
included, from the call to the last token (`generate` there; `add_request` to the last step here),
as generated tokens per second; and the prefill alone, as prompt tokens per second: tokdrift's
steps until every request has its first token, against one transformers forward over the prompts.

Decode time is measured the same way on both sides: from the first sampled token to the
last (N - 1 forwards), through engine steps here and a logits processor's clock there.
Repetitions alternate between the two (A B A B ...) and the figures are medians.

transformers' Qwen3-Next runs its linear-attention layers through a reference PyTorch
fallback when `flash-linear-attention` and `causal-conv1d` are not installed (they need a
GPU): that is the reference as users get it on a CPU, and this benchmark measures it.

The headline, last: the smallest speedup over every config and thread count, batch 1, batch 8
and session.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import DecodeRun, clock, engine_decode, machine_line, median, prompt_ids, set_threads  # noqa: E402

# A larger Qwen3-Next shape, ~150M parameters: wider, more experts, a real-sized vocab slice.
LARGE = dict(
    vocab_size=8192,
    hidden_size=1024,
    num_hidden_layers=8,
    full_attention_interval=4,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=128,
    linear_num_key_heads=8,
    linear_num_value_heads=16,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_experts=16,
    num_experts_per_tok=4,
    moe_intermediate_size=256,
    shared_expert_intermediate_size=512,
    intermediate_size=2048,
    mlp_only_layers=[0],
    norm_topk_prob=True,
    max_position_embeddings=8192,
    eos_token_id=256,
    tie_word_embeddings=False,
)
# The 18M shape the engine-speed work was judged on: narrow, so per-op cost weighs most.
SMALL = dict(
    LARGE,
    vocab_size=4096,
    hidden_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    num_experts_per_tok=2,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=256,
    intermediate_size=1024,
    mlp_only_layers=[],
)
RANDOM = {"small": SMALL, "large": LARGE}
# --quick: the same kinds of layers, tiny.
TINY = dict(
    LARGE,
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=4,
    full_attention_interval=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=4,
    num_experts_per_tok=2,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    intermediate_size=128,
)


class Side(NamedTuple):
    batch1_tps: float
    batch8_tps: float
    session_s: float
    e2e_tps: dict[tuple[int, int], float]  # (prompt length, batch) -> generated tok/s, prompt included
    prefill_tps: dict[tuple[int, int], float]  # (prompt length, batch) -> prompt tok/s


class Result(NamedTuple):
    name: str
    threads: int
    num_params: int
    tokdrift: Side
    hf: Side
    same_tokens: bool  # greedy batch-1 outputs agree

    def ratio(self, key: str) -> float:
        """tokdrift's speedup over transformers: batch1, batch8 (tok/s), session (seconds), or
        e2e_P_B / prefill_P_B (tok/s at prompt length P and batch B)."""
        if key == "session":
            return self.hf.session_s / self.tokdrift.session_s
        kind, _, shape = key.partition("_")
        if kind in ("e2e", "prefill"):
            prompt, batch = (int(x) for x in shape.split("_"))
            return getattr(self.tokdrift, f"{kind}_tps")[prompt, batch] / getattr(self.hf, f"{kind}_tps")[prompt, batch]
        return getattr(self.tokdrift, f"{key}_tps") / getattr(self.hf, f"{key}_tps")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition (smoke test)")
    parser.add_argument("--configs", default="default,small", help="comma-separated: default, small, large")
    parser.add_argument(
        "--threads", default="1,2", help="comma-separated torch thread counts, both sides (each config runs at each)"
    )
    parser.add_argument("--tokens", type=int, default=96, help="tokens decoded per request")
    parser.add_argument("--prompt", type=int, default=256, help="prompt length in tokens for the decode runs")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per measurement (median)")
    parser.add_argument("--turns", type=int, default=8, help="turns of the agent session")
    parser.add_argument("--append", type=int, default=128, help="tokens appended per turn")
    parser.add_argument("--turn-tokens", type=int, default=16, help="tokens generated per turn")
    parser.add_argument("--system", type=int, default=512, help="first turn's prompt length")
    parser.add_argument(
        "--e2e-prompts", default="256,2048", help="comma-separated prompt lengths of the end-to-end and prefill runs"
    )
    args = parser.parse_args(argv)
    args.e2e_prompts = [int(p) for p in args.e2e_prompts.split(",") if p]
    configs = [c for c in args.configs.split(",") if c]
    threads = [int(t) for t in args.threads.split(",") if t]
    unknown = set(configs) - {"default", *RANDOM}
    if unknown:
        parser.error(f"--configs: unknown {sorted(unknown)}; expected default, small, large")
    if args.quick:
        args.tokens, args.prompt, args.reps, args.turns = 4, 16, 1, 2
        args.append, args.turn_tokens, args.system = 8, 2, 16
        args.e2e_prompts = [16]
        configs, threads = ["tiny"], threads[:1]
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("engine").setLevel(logging.WARNING)
    import transformers

    transformers.logging.set_verbosity_error()
    set_threads(threads[0])
    print(machine_line() + f"; transformers {transformers.__version__}")

    from engine.model.checkpoint import default_checkpoint

    results = []
    for name in configs:
        tmp = Path(tempfile.mkdtemp(prefix=f"tokdrift-{name}-"))
        try:
            if name == "default":
                checkpoint, hf = default_checkpoint(), _load_hf(default_checkpoint())
            else:
                checkpoint, hf = tmp, _random_hf(TINY if name == "tiny" else RANDOM[name], tmp)
            for num_threads in threads:
                set_threads(num_threads)
                r = compare(name, num_threads, checkpoint, hf, args)
                results.append(r)
                t, h = r.tokdrift, r.hf
                print(
                    f"{r.name} ({r.num_params / 1e6:.1f}M params), {num_threads} thread(s): decode batch 1 "
                    f"tokdrift {t.batch1_tps:.1f} tok/s, transformers {h.batch1_tps:.1f} tok/s "
                    f"({t.batch1_tps / h.batch1_tps:.2f}x); batch 8 {t.batch8_tps:.1f} vs {h.batch8_tps:.1f} tok/s "
                    f"({t.batch8_tps / h.batch8_tps:.2f}x); {args.turns}-turn session {t.session_s:.2f} s vs "
                    f"{h.session_s:.2f} s ({h.session_s / t.session_s:.2f}x); same greedy tokens: {r.same_tokens}",
                    flush=True,
                )
                for prompt, batch in sorted(t.e2e_tps):
                    print(
                        f"  prompt {prompt} x batch {batch}: end to end tokdrift {t.e2e_tps[prompt, batch]:.1f} tok/s, "
                        f"transformers {h.e2e_tps[prompt, batch]:.1f} tok/s ({r.ratio(f'e2e_{prompt}_{batch}'):.2f}x); "
                        f"prefill {t.prefill_tps[prompt, batch]:.0f} vs {h.prefill_tps[prompt, batch]:.0f} prompt tok/s "
                        f"({r.ratio(f'prefill_{prompt}_{batch}'):.2f}x)",
                        flush=True,
                    )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    shapes = sorted(results[0].tokdrift.e2e_tps)
    keys = ["batch1", "batch8", "session"] + [f"{kind}_{p}_{b}" for kind in ("e2e", "prefill") for p, b in shapes]
    worst = {key: min(results, key=lambda r: r.ratio(key)) for key in keys}
    print(
        " ".join(f"speedup_{key}={r.ratio(key):.2f}x ({r.name}, {r.threads} thread(s))" for key, r in worst.items())
        + f"; same greedy tokens everywhere: {all(r.same_tokens for r in results)}"
    )


def compare(name: str, threads: int, checkpoint: Path, hf, args) -> Result:
    from engine.runtime.config import EngineConfig
    from engine.runtime.engine import Engine

    longest = max([args.prompt, *args.e2e_prompts])
    max_len = max(args.system + args.turns * (args.append + args.turn_tokens), longest) + 2 * args.tokens + 64
    engine = Engine(EngineConfig(model=str(checkpoint), device="cpu", max_running_requests=8, kv_tokens=8 * max_len))
    num_params = sum(t.numel() for t in hf.parameters())
    one = [prompt_ids(args.prompt, seed=1)]
    eight = [prompt_ids(args.prompt, seed=s) for s in range(2, 10)]
    # warm-up of both sides, and the check that they compute the same thing
    same = _engine_generate(engine, one[0], args.tokens) == _hf_decode(hf, one, args.tokens)[1][0]
    runs: dict[str, list[float]] = {k: [] for k in ("t1", "h1", "t8", "h8", "ts", "hs")}
    for _ in range(args.reps):
        runs["t1"].append(engine_decode(engine, one, args.tokens).tokens_per_s)
        runs["h1"].append(_hf_decode(hf, one, args.tokens)[0].tokens_per_s)
        runs["t8"].append(engine_decode(engine, eight, args.tokens).tokens_per_s)
        runs["h8"].append(_hf_decode(hf, eight, args.tokens)[0].tokens_per_s)
        seed = 100 + len(runs["ts"])  # a fresh session each time: nothing of it is cached yet
        runs["ts"].append(_session(lambda ctx: _engine_generate(engine, ctx, args.turn_tokens), seed, args))
        runs["hs"].append(_session(lambda ctx: _hf_generate(hf, ctx, args.turn_tokens), seed, args))
    e2e: dict[str, dict[tuple[int, int], list[float]]] = {"t": {}, "h": {}}
    pre: dict[str, dict[tuple[int, int], list[float]]] = {"t": {}, "h": {}}
    for rep in range(args.reps):
        for prompt in args.e2e_prompts:
            for batch in (1, 8):
                prompts = [prompt_ids(prompt, seed=1000 * rep + 10 * batch + b + prompt) for b in range(batch)]
                key = (prompt, batch)
                e2e["t"].setdefault(key, []).append(_engine_e2e(engine, prompts, args.tokens))
                e2e["h"].setdefault(key, []).append(_hf_e2e(hf, prompts, args.tokens))
                fresh = [prompt_ids(prompt, seed=1000 * rep + 10 * batch + b + prompt + 500) for b in range(batch)]
                pre["t"].setdefault(key, []).append(_engine_e2e(engine, fresh, 1, prefill=True))
                pre["h"].setdefault(key, []).append(_hf_prefill(hf, fresh))
    med = {k: median(v) for k, v in runs.items()}
    sides = {
        side: Side(
            batch1_tps=med[f"{side}1"],
            batch8_tps=med[f"{side}8"],
            session_s=med[f"{side}s"],
            e2e_tps={k: median(v) for k, v in e2e[side].items()},
            prefill_tps={k: median(v) for k, v in pre[side].items()},
        )
        for side in ("t", "h")
    }
    return Result(
        name=name, threads=threads, num_params=num_params, tokdrift=sides["t"], hf=sides["h"], same_tokens=same
    )


# --- transformers side -------------------------------------------------------------------------


def _load_hf(checkpoint: Path):
    from transformers import Qwen3NextForCausalLM

    return Qwen3NextForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()


def _random_hf(overrides: dict, out_dir: Path):
    """A random transformers Qwen3-Next model, also written to `out_dir` for tokdrift to load."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(0)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**overrides)).eval()
    model.save_pretrained(out_dir)
    return model


class _Clock:
    """A logits processor that only notes when each token's logits arrive."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(clock())
        return scores


def _hf_decode(model, prompts: list[list[int]], max_tokens: int) -> tuple[DecodeRun, list[list[int]]]:
    from transformers import LogitsProcessorList

    ids = torch.tensor(prompts)  # [B, P], prompts of one length: no padding
    clock = _Clock()
    out = _generate(model, ids, max_tokens, logits_processor=LogitsProcessorList([clock]))
    run = DecodeRun((len(clock.times) - 1) * len(prompts), clock.times[-1] - clock.times[0], len(clock.times) - 1)
    return run, out[:, ids.shape[1] :].tolist()


def _hf_e2e(model, prompts: list[list[int]], max_tokens: int) -> float:
    """Generated tokens per second of a whole `generate` call, prompt included."""
    start = clock()
    _generate(model, torch.tensor(prompts), max_tokens)  # [B, P]
    return len(prompts) * max_tokens / (clock() - start)


def _hf_prefill(model, prompts: list[list[int]]) -> float:
    """Prompt tokens per second of one forward over the prompts (what generate's first step runs)."""
    ids = torch.tensor(prompts)  # [B, P]
    start = clock()
    with torch.inference_mode():
        model(ids, attention_mask=torch.ones_like(ids), use_cache=True, logits_to_keep=1)
    return ids.numel() / (clock() - start)


def _hf_generate(model, context: list[int], max_tokens: int) -> list[int]:
    ids = torch.tensor([context])
    return _generate(model, ids, max_tokens)[0, ids.shape[1] :].tolist()


def _generate(model, ids: torch.Tensor, max_tokens: int, **extra) -> torch.Tensor:
    """Greedy `generate` of exactly `max_tokens` new tokens after ids [B, P] (no padding): [B, P + N]."""
    with torch.inference_mode():
        return model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            min_new_tokens=max_tokens,
            do_sample=False,
            pad_token_id=0,
            **extra,
        )


# --- tokdrift side -----------------------------------------------------------------------------


def _engine_generate(engine, context: list[int], max_tokens: int) -> list[int]:
    from engine import SamplingParams

    request = engine.add_request(context, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
    while engine.has_work():
        engine.step()
    engine.take_updates()
    return list(request.output_ids)


def _engine_e2e(engine, prompts: list[list[int]], max_tokens: int, prefill: bool = False) -> float:
    """Generated tokens per second from adding the requests to their last token, prompt included;
    with `prefill`, prompt tokens per second until every request has its first token."""
    from engine import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    start = clock()
    requests = [engine.add_request(list(p), params) for p in prompts]
    while engine.has_work():
        engine.step()
        if prefill and all(r.output_ids for r in requests):
            break
    seconds = clock() - start
    while engine.has_work():
        engine.step()
    engine.take_updates()
    if prefill:
        return sum(len(p) for p in prompts) / seconds
    return sum(len(r.output_ids) for r in requests) / seconds


def _session(generate, seed: int, args) -> float:
    """Seconds for an agent session: turn t's prompt is turn t-1's prompt + its output + an append."""
    context = prompt_ids(args.system, seed)
    start = clock()
    for turn in range(args.turns):
        output = generate(context)
        context = context + output + prompt_ids(args.append, seed * 1000 + turn)
    return clock() - start


if __name__ == "__main__":
    main()
