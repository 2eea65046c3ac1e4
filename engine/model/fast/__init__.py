"""The fast path: the reference layers' arithmetic in fewer, larger ops, for every forward.

It was made for decode, where every request brings one token and on a CPU a step costs about as
much in dispatching the ~1,200 small ops of the reference layers, 4–8 µs each, as in its matrix
products (a matrix-vector product per weight). `FastLayers` runs the same model in ~870 ops at
batch 1, with:

- fused projections, one matrix product each: Gated DeltaNet's `in_proj_qkvz` + `in_proj_ba`;
  attention's q, k, v; the router, the shared expert's gate and its gate/up rows together;
  a dense MLP's gate and up. The modules' parameters become views into the fused weights,
  so the reference path (`forward_path='reference'`) reads the same memory;
- the residual add folded into the output projection (`addmm`);
- per forward, once: the rotary table and the attention's gather plan (slot ids, padding mask);
- the linear-attention update as batched matrix products, in place on the gathered state;
  q and k l2-normalised by one `rms_norm` over both (l2norm(x) = rms_norm(x, eps / D) / sqrt(D));
- plain functions over tensors: no module calls in the forward;
- on a CPU in float32, where a C compiler built them (engine/kernels/cpu.py), C kernels for what
  remains of a step past its products: Gated DeltaNet between its two products, on the states
  in the pool (gdn_recurrent.c), the MoE layer for up to 8 tokens (moe_decode.c), the products
  MKL reads slowly at a few rows (small_gemm.c: the wide projections at 2-8 rows on Intel, every
  projection at 1-8 rows on AMD, cpu_kernels.small_gemm_rule), the residual norms (rms_norm.c) and
  decode attention read in place from the KV pool (paged_attention.c); the torch ops otherwise
  (docs/engine-model.md, "C kernels on the CPU").

The same layers take prefill, extend (an append onto a cached prefix) and mixed batches: the
fused projections, the folded residuals and the MoE's grouped expert products serve T tokens as
they serve B; attention runs the backend's extend (causal over each request's context), and the
linear-attention layers the C recurrence where it is built, else the reference's extend (the
causal conv and the chunked delta rule per request, a mixed batch's decoding requests together
through the recurrent step).

One module per part: `projection` (fused, input-major, small_gemm), `step` (what a forward's layers
share), a layer kind each beside the reference module it stands for (`attention`, `gated_deltanet`,
`moe`, `mlp`), and `layers` (`FastLayers`: the forward over them). The reference layers
(`qwen3_next.py`, proven against transformers) stay the specification: tests run both paths and
compare logits and greedy tokens.
"""

from engine.model.fast.layers import FastLayers, unsupported, use_fast_layers

__all__ = ["FastLayers", "unsupported", "use_fast_layers"]
