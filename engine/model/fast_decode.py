"""The fast decode step: the reference layers' arithmetic in fewer, larger ops.

At decode every request brings one token, and on a CPU a step costs about as much in
dispatching the ~1,200 small ops of the reference layers, 4–8 µs each, as in its matrix
products (a matrix-vector product per weight). `FastDecode` runs the same model in ~870
ops at batch 1, with:

- fused projections, one matrix product each: Gated DeltaNet's `in_proj_qkvz` + `in_proj_ba`;
  attention's q, k, v; the router, the shared expert's gate and its gate/up rows together;
  a dense MLP's gate and up. The modules' parameters become views into the fused weights,
  so the reference path (prefill, and `decode_path='reference'`) reads the same memory;
- the residual add folded into the output projection (`addmm`);
- per step, once: the rotary table and the attention's gather plan (slot ids, padding mask);
- the linear-attention update as batched matrix products, in place on the gathered state;
  q and k l2-normalised by one `rms_norm` over both (l2norm(x) = rms_norm(x, eps / D) / sqrt(D));
- plain functions over tensors: no module calls in the step;
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

The reference layers (`qwen3_next.py`, proven against transformers) stay the specification:
tests run both paths and compare logits and greedy tokens.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import EngineError
from engine.kernels import cpu as cpu_kernels
from engine.model import delta_rule
from engine.model.attention_backend import TorchAttention
from engine.model.experts import ResidentExperts
from engine.model.forward_batch import ForwardBatch
from engine.model.mlp import MLP
from engine.model.moe import SparseMoE, group_by_expert
from engine.model.norm import rms_norm


def unsupported(model) -> str | None:
    """Why `model` cannot take the fast decode step, or None where it can."""
    if model.model.embed_tokens.weight.device.type == "meta":
        return "the model's weights are not loaded"
    return None


class _Linear(NamedTuple):
    """A projection for `torch.mm(x, weight_t)` / `torch.addmm(bias, x, weight_t)`; where `rows` (the C
    kernel small_gemm) is given, a product of `row_range` rows goes through it (faster there)."""

    weight_t: torch.Tensor  # [I, O] contiguous (input-major, experts.input_major)
    bias: torch.Tensor | None  # [O] or None
    rows: Any = None  # engine/kernels/small_gemm.c's small_gemm, or None
    row_range: tuple[int, int] = (2, 8)  # rows of x it takes, cpu_kernels.small_gemm_rule()

    def plus(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + x @ weight_t (+ bias): [T, O]."""
        if self.bias is None and not self._in_c(x):
            return torch.addmm(residual, x, self.weight_t)
        return self(x).add_(residual)

    def _in_c(self, x: torch.Tensor) -> bool:
        return self.rows is not None and self.row_range[0] <= x.shape[0] <= self.row_range[1] and x.is_contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._in_c(x):
            w = self.weight_t
            out = x.new_empty(x.shape[0], w.shape[1])  # [B, O]
            self.rows(
                x.shape[0],
                w.shape[0],
                w.shape[1],
                x.data_ptr(),
                x.stride(0),
                w.data_ptr(),
                w.stride(0),
                out.data_ptr(),
                out.stride(0),
                torch.get_num_threads(),
            )
            return out if self.bias is None else out.add_(self.bias)
        return torch.mm(x, self.weight_t) if self.bias is None else torch.addmm(self.bias, x, self.weight_t)


def _c_kernel(name: str, *weights: torch.Tensor):
    """The C kernel `name` (engine/kernels/) where the weights are float32 on a CPU and the kernels
    were built; else None."""
    if any(w.device.type != "cpu" or w.dtype != torch.float32 for w in weights):
        return None
    lib = cpu_kernels.load()
    return None if lib is None else getattr(lib, name)


def _fuse(*linears: nn.Module) -> _Linear:
    """One input-major weight (and bias) for several projections of the same input (modules
    with a `weight` [O, I] and maybe a `bias`); their parameters become views of it, so every
    path keeps reading the same memory."""
    weight_t = torch.cat([m.weight.detach().t() for m in linears], dim=1).contiguous()  # [I, sum O]
    biases = [getattr(m, "bias", None) for m in linears]
    bias = None
    if any(b is not None for b in biases):  # a missing bias is zeros
        bias = torch.cat(
            [b.detach() if b is not None else weight_t.new_zeros(m.weight.shape[0]) for m, b in zip(linears, biases)]
        )  # [sum O]
    start = 0
    for m, b in zip(linears, biases):
        rows = m.weight.shape[0]
        m.weight = nn.Parameter(weight_t[:, start : start + rows].t(), requires_grad=False)
        if b is not None:
            m.bias = nn.Parameter(bias[start : start + rows], requires_grad=False)
        start += rows
    return _Linear(weight_t, bias)


def _linear(module: nn.Linear) -> _Linear:
    """A projection left alone, for `_Linear`'s calls (its weight is input-major since loading)."""
    return _Linear(module.weight.detach().t(), None if module.bias is None else module.bias.detach())


class _Step(NamedTuple):
    """What every layer of one forward shares, computed once."""

    batch: ForwardBatch
    cos: torch.Tensor  # [T, 1, R]
    sin_signed: torch.Tensor  # [T, 1, R]: -sin on the first half, +sin on the second (rotate_half's signs)
    kv_slots: torch.Tensor  # decode: [B, L] (or [L] at batch 1), each request's context slots, padded
    kv_mask: torch.Tensor | None  # decode: [B, 1, 1, L] valid keys; None at batch 1 and for an extend
    fresh: list[int]  # requests with no prefix: their linear-attention state starts at zero
    state_slots: list[int]  # each request's linear-attention state slot
    fresh_mask: torch.Tensor  # [B] uint8, 1 for the fresh requests (the C kernel's form of `fresh`)


class FastDecode:
    def __init__(self, model) -> None:
        self.model = model
        mc = model.config
        self.eps = mc.rms_norm_eps
        self.experts = model.experts
        self.layers = []
        for layer in model.model.layers:
            if layer.is_full_attention:
                mixer = _AttentionLayer(layer.self_attn)
            else:
                mixer = _GdnLayer(layer.linear_attn, mc)
            if isinstance(layer.mlp, SparseMoE):
                ffn = _MoeLayer(layer.mlp, model.experts, mc.moe_intermediate_size)
            else:
                ffn = _MlpLayer(layer.mlp)
            self.layers.append(
                (layer.input_layernorm.scale.detach(), mixer, layer.post_attention_layernorm.scale.detach(), ffn)
            )
        self.final_norm = model.model.norm.scale.detach()
        self.small_gemm_products = self._small_gemm()
        scales = [t for in_norm, _, post_norm, _ in self.layers for t in (in_norm, post_norm)] + [self.final_norm]
        fp32_cpu = all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in scales)
        self._rms_norm_lib = cpu_kernels.load() if fp32_cpu else None
        self.kernel_note = self._kernel_note()  # for the startup log

    def _kernel_note(self) -> str:
        """Which of the C kernels (engine/kernels/) this model's steps take, or why none."""
        gdn = [m for _, m, _, _ in self.layers if isinstance(m, _GdnLayer)]
        moe = [f for _, _, _, f in self.layers if isinstance(f, _MoeLayer)]
        attention = [m for _, m, _, _ in self.layers if isinstance(m, _AttentionLayer)]
        lo, hi, _ = cpu_kernels.small_gemm_rule()
        parts = [
            f"gdn_recurrent.c ({sum(m.kernel is not None for m in gdn)} of {len(gdn)} linear-attention layers)",
            f"moe_decode.c ({sum(f.kernel is not None for f in moe)} of {len(moe)} MoE layers)",
            f"small_gemm.c ({self.small_gemm_products} projections at {lo}-{hi} rows)",
            f"rms_norm.c ({'on' if self._rms_norm_lib is not None else 'off'})",
            f"paged_attention.c ({sum(m.kernel is not None for m in attention)} of {len(attention)} full-attention layers)",
        ]
        if any(m.kernel is not None for m in (*gdn, *moe, *attention)) or self._rms_norm_lib:
            return "C kernels: " + ", ".join(parts)
        if not self.layers or self.final_norm.device.type != "cpu":
            return "torch ops (not on a CPU)"
        if self.final_norm.dtype != torch.float32:
            return "torch ops (the C kernels are float32 only)"
        return f"torch ops (C kernels: {cpu_kernels.why_not()})"

    def _small_gemm(self) -> int:
        """Give the projections that this CPU's rule names (cpu_kernels.small_gemm_rule: where it was
        measured faster than MKL) the C kernel small_gemm for a few rows; how many got it."""
        lib = cpu_kernels.load()
        rule = cpu_kernels.small_gemm_rule()
        count = 0
        for _, mixer, _, ffn in self.layers:
            for part in (mixer, ffn):
                for name in _PRODUCTS[type(part)]:
                    linear = getattr(part, name)
                    if (
                        lib is not None
                        and linear.weight_t.device.type == "cpu"
                        and linear.weight_t.dtype == torch.float32
                        and linear.weight_t.is_contiguous()
                        and linear.weight_t.shape[1] >= rule.min_columns
                    ):
                        setattr(
                            part, name, linear._replace(rows=lib.small_gemm, row_range=(rule.min_rows, rule.max_rows))
                        )
                        count += 1
        return count

    def _norm(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """rms_norm(x, scale, eps): through the C kernel on a CPU in float32 (one call instead of six ops)."""
        lib = self._rms_norm_lib
        if lib is None or x.dtype != torch.float32 or not x.is_contiguous() or x.device.type != "cpu":
            return rms_norm(x, scale, self.eps)
        out = torch.empty_like(x)
        lib.rms_norm(
            x.shape[0], x.shape[1], x.data_ptr(), x.stride(0), scale.data_ptr(), self.eps, out.data_ptr(), out.stride(0)
        )
        return out

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv_pool, state_pool, backend) -> torch.Tensor:
        """Logits float32: [B, V] for the last new token of each request, or [T, V] if the batch asked for all."""
        model, norm = self.model, self._norm
        self.experts.begin_step()
        x = model.model.embed_tokens(batch.input_ids)  # [T, H]
        step = self._step(batch, x.dtype, backend)
        for in_norm, mixer, post_norm, ffn in self.layers:
            x = mixer(x, norm(x, in_norm), step, kv_pool, state_pool, backend)  # [T, H], residual added
            x = ffn(x, norm(x, post_norm))  # [T, H], residual added
        if batch.logits_indices.shape[0] != x.shape[0]:
            x = x[batch.logits_indices]  # [B, H]
        x = norm(x.contiguous(), self.final_norm)  # [B or T, H]
        return F.linear(x, model.lm_head_weight).float()  # [B or T, V]

    def _step(self, batch: ForwardBatch, dtype: torch.dtype, backend) -> _Step:
        cos, sin = self.model.rotary.cos_sin(batch.positions, dtype)  # [B, R] each
        half = cos.shape[-1] // 2
        sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)  # [B, R]
        fresh = [b for b, p in enumerate(batch.prefix_lens) if p == 0]
        kv_slots, kv_mask = batch.kv_slots, None  # [L] at batch 1
        if batch.is_decode and batch.num_requests > 1 and type(backend) is TorchAttention:
            # each context padded to the longest one, masked:
            #   idx[b, j] = kv_indptr[b] + j (clamped to the request's last slot), valid while j < len[b]
            lens = batch.kv_indptr[1:] - batch.kv_indptr[:-1]  # [B]
            j = torch.arange(int(lens.max()), device=lens.device)  # [L]
            idx = torch.minimum(batch.kv_indptr[:-1, None] + j[None, :], batch.kv_indptr[1:, None] - 1)  # [B, L]
            kv_slots = batch.kv_slots[idx]  # [B, L]
            kv_mask = (j[None, :] < lens[:, None])[:, None, None, :]  # [B, 1, 1, L]
        return _Step(
            batch=batch,
            cos=cos[:, None, :],
            sin_signed=sin_signed[:, None, :],
            kv_slots=kv_slots,
            kv_mask=kv_mask,
            fresh=fresh,
            state_slots=batch.state_slots.tolist(),
            fresh_mask=torch.tensor([p == 0 for p in batch.prefix_lens], dtype=torch.uint8),
        )


class _GdnLayer:
    """Gated DeltaNet at decode (`GatedDeltaNet._decode` and the projections around it)."""

    def __init__(self, module, mc) -> None:
        self.layer = module.layer
        self.module = module  # its extend: the causal conv and the chunked delta rule per request
        self.proj = _fuse(module.in_proj_qkvz, module.in_proj_ba)  # the reference's two projections are views of it
        hk, hv, dk, dv = module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim
        self.hk, self.hv, self.dk, self.dv, self.r = hk, hv, dk, dv, hv // hk
        self.conv_dim, self.value_dim = module.conv_dim, module.value_dim
        # The fused projection's columns, per key head [q | k | v | z] then per key head [b | a],
        # put in the order the step reads them: q (all heads) k v | z | b | a.
        group, r = 2 * dk + 2 * self.r * dv, self.r
        qkvz = hk * group
        cols = {name: [] for name in "qkvzba"}
        for h in range(hk):
            base = h * group
            cols["q"] += range(base, base + dk)
            cols["k"] += range(base + dk, base + 2 * dk)
            cols["v"] += range(base + 2 * dk, base + 2 * dk + r * dv)
            cols["z"] += range(base + 2 * dk + r * dv, base + group)
            cols["b"] += range(qkvz + h * 2 * r, qkvz + h * 2 * r + r)
            cols["a"] += range(qkvz + h * 2 * r + r, qkvz + (h + 1) * 2 * r)
        order = torch.tensor([c for name in "qkvzba" for c in cols[name]], device=self.proj.weight_t.device)
        # The step reads the fused weight with its columns in that order: a copy of this layer's
        # projection (the reference keeps the fused one), so that a step of T rows does not gather
        # the columns of its whole product
        self.proj_ordered = _Linear(self.proj.weight_t[:, order].contiguous(), None)
        self.conv_weight = module.conv1d.weight.detach()[:, 0, :]  # [C, K]
        self.neg_a = -module.A_log.detach().float().exp()  # [Hv]
        self.dt_bias = module.dt_bias.detach()  # [Hv]
        # l2norm(x) = rms_norm(x, eps / D) / sqrt(D); q is further scaled by D^-0.5 as the reference does
        self.qk_eps = 1e-6 / dk
        self.qk_scale = torch.full((dk,), dk**-0.5, device=self.proj.weight_t.device)  # [Dk]
        self.q_scale = dk**-0.5
        self.norm_weight = module.norm.weight.detach()  # [Dv]
        self.norm_eps = module.norm.eps
        self.out_proj = _linear(module.out_proj)  # [Hv*Dv, H] contiguous
        self.kernel = self._kernel()

    def _kernel(self):
        """The C kernel gdn_recurrent for float32 weights on a CPU, where it was built; else None."""
        kernel = _c_kernel(
            "gdn_recurrent", self.proj_ordered.weight_t, self.conv_weight, self.dt_bias, self.norm_weight
        )
        if kernel is None:
            return None
        self.conv_weight = self.conv_weight.contiguous()  # [C, K]
        self._conv_wt = self.conv_weight.t().contiguous()  # [K, C]: the token-major conv of an extend
        self.neg_a = self.neg_a.contiguous()
        # y [C] | z [Hv*Dv] | S^T q, S^T k, delta [Dv] each: their addresses, fixed for the layer's life
        self._scratch = torch.empty(self.conv_dim + self.value_dim + 3 * self.dv)
        base, size = self._scratch.data_ptr(), self._scratch.element_size()
        self._scratch_ptrs = (base, *(base + (self.conv_dim + self.value_dim + i * self.dv) * size for i in range(3)))
        return kernel

    def _in_c(self, x, p, step: _Step, conv_buf, rec_buf) -> torch.Tensor:
        """The layer between its two products through the C kernel, states read and written in the
        pool: a decode batch in one call, an extend one call per request (its tokens one after
        another through the recurrence); x + out_proj(out)."""
        batch = step.batch
        out = torch.empty(x.shape[0], self.value_dim)  # [T, Hv*Dv]
        if batch.is_decode:
            self._call(batch.num_requests, 1, p, batch.state_slots, step.fresh_mask, out, conv_buf, rec_buf)
        else:
            for b, (start, end) in enumerate(batch.token_ranges()):
                slots, fresh = batch.state_slots[b : b + 1], step.fresh_mask[b : b + 1]
                self._call(1, end - start, p[start:end], slots, fresh, out[start:end], conv_buf, rec_buf)
        return self.out_proj.plus(x, out)  # [T, H]: x + out_proj(out)

    def _call(self, requests: int, tokens: int, p, slots, fresh, out, conv_buf, rec_buf) -> None:
        """`requests` requests of `tokens` tokens each (rows of p and out, request by request)."""
        # an extend's conv outputs [T, C] and gates [T, 2Hv + Hk], held until the call returns
        ybuf = None if tokens == 1 else torch.empty(tokens * (self.conv_dim + 2 * self.hv + self.hk))
        rc = self.kernel(
            *(requests, tokens, self.hk, self.r, self.dk, self.dv, self.conv_weight.shape[1]),
            *(p.data_ptr(), p.stride(0)),
            *(self.conv_weight.data_ptr(), conv_buf.data_ptr(), rec_buf.data_ptr(), rec_buf.shape[0]),
            *(slots.data_ptr(), fresh.data_ptr(), self.neg_a.data_ptr(), self.dt_bias.data_ptr()),
            self.norm_weight.data_ptr(),
            *(self.dk**-0.5, self.qk_eps, self.q_scale, self.norm_eps, delta_rule.DECAY_FLOOR),
            *self._scratch_ptrs,
            out.data_ptr(),
            self._conv_wt.data_ptr(),
            None if ybuf is None else ybuf.data_ptr(),
        )
        if rc != 0:
            raise EngineError(f"gdn_recurrent: a state slot out of range in {slots.tolist()}")

    def __call__(self, x, h, step: _Step, kv_pool, state_pool, backend) -> torch.Tensor:
        n, hk, hv, dk, dv, r = x.shape[0], self.hk, self.hv, self.dk, self.dv, self.r
        p = self.proj_ordered(h)  # [T, C + Hv*Dv + 2Hv]: q k v | z | b | a
        conv_buf, rec_buf = state_pool.buffers(self.layer)  # [S, C, K-1], [S, Hv, Dk, Dv]
        if self.kernel is not None and p.is_contiguous():
            return self._in_c(x, p, step, conv_buf, rec_buf)
        c, vd = self.conv_dim, self.value_dim
        mixed, z = p[:, :c], p[:, c : c + vd]  # [B, C], [B, Hv*Dv]
        beta = p[:, c + vd : c + vd + hv].sigmoid().float()  # [B, Hv]
        g = self.neg_a * F.softplus(p[:, c + vd + hv :].float() + self.dt_bias)  # [B, Hv] log decay
        if not step.batch.is_decode:  # [T, C] q k v are laid out as the reference's `mixed`
            out = self.module._extend(mixed, g, beta, step.batch, conv_buf, rec_buf, self.conv_weight)  # [T, Hv, Dv]
            return self._output(x, out, z)
        # Batch 1 works on its slot in place. A larger batch always gathers and writes back, even
        # when its slots happen to be one run: slots fragment as a server ages, and a step that
        # got slower with that would be an engine-age effect of the engine's own making.
        in_place = n == 1
        if in_place:
            slot = step.state_slots[0]
            conv_state, state = conv_buf[slot : slot + 1], rec_buf[slot : slot + 1]  # views of the pool
        else:
            conv_state = conv_buf.index_select(0, step.batch.state_slots)  # [B, C, K-1]
            state = rec_buf.index_select(0, step.batch.state_slots)  # [B, Hv, Dk, Dv] float32, a copy
        if step.fresh:  # a request with no prefix starts from zeros, whatever its slot held
            conv_state[step.fresh] = 0
            state[step.fresh] = 0
        window = torch.cat(
            (conv_state.to(self.conv_weight.dtype), mixed[..., None].to(self.conv_weight.dtype)), dim=-1
        )  # [B, C, K]
        y = F.silu((window * self.conv_weight).sum(dim=-1)).to(x.dtype)  # [B, C]
        qk = F.rms_norm(
            y[:, : 2 * hk * dk].float().view(n, 2 * hk, dk), (dk,), self.qk_scale, self.qk_eps
        )  # [B, 2Hk, Dk]: l2-normalised q heads, then k heads
        q = qk[:, :hk] * self.q_scale  # [B, Hk, Dk]
        k = qk[:, hk:]  # [B, Hk, Dk]
        v = y[:, 2 * hk * dk :].float().view(n, hk, r, dv)  # [B, Hk, r, Dv]
        # The delta rule, with the r value heads of each key head (GQA) as a batch dimension:
        #   S' = d S + k delta^T,  delta = beta (v - d S^T k),  o = S'^T q = d S^T q + (q . k) delta
        # so S is read once (q and k against the old state, one batched product), then updated
        # in place: S *= d, S += k delta^T.
        s = state.view(n, hk, r, dk, dv)  # [B, Hk, r, Dk, Dv]
        qk_s = torch.stack((q, k), dim=2)[:, :, None] @ s  # [B, Hk, r, 2, Dv]: S^T q, S^T k
        decay = delta_rule.decay(g).view(n, hk, r, 1)  # [B, Hk, r, 1]; never subnormal
        delta = (v - decay * qk_s[..., 1, :]) * beta.view(n, hk, r, 1)  # [B, Hk, r, Dv]
        qk_dot = (q * k).sum(dim=-1)[:, :, None, None]  # [B, Hk, 1, 1]
        out = torch.addcmul(decay * qk_s[..., 0, :], qk_dot, delta).view(n, hv, dv)  # [B, Hv, Dv]
        s.mul_(decay[..., None])
        k_col = k[:, :, None, :, None].expand(n, hk, r, dk, 1).reshape(n * hv, dk, 1)  # [B*Hv, Dk, 1]
        state.view(n * hv, dk, dv).baddbmm_(k_col, delta.reshape(n * hv, 1, dv))  # S += k delta^T
        if in_place:  # the recurrent state was updated where it lives
            conv_state.copy_(window[..., 1:])
        else:  # back into the slots one request at a time: plain copies, 2x faster than index_copy_ on a CPU
            for i, slot in enumerate(step.state_slots):
                conv_buf[slot].copy_(window[i, :, 1:])
                rec_buf[slot].copy_(state[i])
        return self._output(x, out, z)

    def _output(self, x, out, z) -> torch.Tensor:
        """The gated norm and the output projection, residual added: out [T, Hv, Dv], z [T, Hv*Dv]."""
        n, hv, dv = x.shape[0], self.hv, self.dv
        out = F.rms_norm(out, (dv,), None, self.norm_eps).to(x.dtype) * self.norm_weight  # [T, Hv, Dv]
        out = (out * F.silu(z.float().view(n, hv, dv))).to(x.dtype)  # [T, Hv, Dv]
        return self.out_proj.plus(x, out.reshape(n, self.value_dim))  # [T, H]: x + out_proj(out)


class _AttentionLayer:
    """Gated attention at decode (`GatedAttention` with the torch or Triton backend)."""

    def __init__(self, module) -> None:
        self.layer = module.layer
        self.hq, self.hkv, self.d = module.num_heads, module.num_kv_heads, module.head_dim
        self.scale = module.scale
        self.proj = _fuse(module.q_proj, module.k_proj, module.v_proj)
        # q heads then k heads normalised in one op: each head's own scale
        self.qk_norm = torch.cat(
            (module.q_norm.scale.detach().expand(self.hq, -1), module.k_norm.scale.detach().expand(self.hkv, -1))
        )  # [Hq + Hkv, D]
        self.eps = module.q_norm.eps
        self.o_proj = _linear(module.o_proj)
        self.kernel = self._kernel()

    def _kernel(self):
        """The C kernel paged_attention for float32 weights on a CPU, where it was built; else None."""
        return _c_kernel("paged_attention", self.proj.weight_t)

    def __call__(self, x, h, step: _Step, kv_pool, state_pool, backend) -> torch.Tensor:
        n, hq, hkv, d = x.shape[0], self.hq, self.hkv, self.d
        p = self.proj(h)  # [B, Hq*2D + 2*Hkv*D]
        q_gate = p[:, : hq * 2 * d].view(n, hq, 2 * d)  # [B, Hq, 2D]: per head [query | gate]
        k = p[:, hq * 2 * d : hq * 2 * d + hkv * d].view(n, hkv, d)  # [B, Hkv, D]
        v = p[:, hq * 2 * d + hkv * d :].view(n, hkv, d)  # [B, Hkv, D]
        qk = torch.cat((q_gate[..., :d], k), dim=1)  # [B, Hq + Hkv, D]
        if qk.dtype == torch.float32:
            qk = F.rms_norm(qk, (d,), None, self.eps) * self.qk_norm  # [B, Hq + Hkv, D]
        else:
            qk = (F.rms_norm(qk.float(), (d,), None, self.eps) * self.qk_norm).type_as(qk)
        rot = step.cos.shape[-1]
        x_rot = qk[..., :rot]  # [B, Hq + Hkv, R]
        # x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1] = roll(x) with the signs on sin
        qk[..., :rot] = torch.addcmul(x_rot * step.cos, x_rot.roll(rot // 2, dims=-1), step.sin_signed)
        q, k = qk[:, :hq], qk[:, hq:]  # [B, Hq, D], [B, Hkv, D]
        kv_pool.write(self.layer, step.batch.new_kv_slots, k, v)
        k_buf, v_buf = kv_pool.buffers(self.layer)  # [S, Hkv, D] each
        if not step.batch.is_decode:
            out = backend.extend(q, k_buf, v_buf, step.batch, self.scale, k, v)  # [T, Hq, D], causal per request
        elif type(backend) is TorchAttention and self._in_place(q, k_buf, v_buf):
            out = backend.read_in_place(self._in_c, q, k_buf, v_buf, step.batch)  # [B, Hq, D]
        elif type(backend) is TorchAttention:
            out = self._attend(q, k_buf, v_buf, step, backend)  # [B, Hq, D]
        else:
            out = backend.decode(q, k_buf, v_buf, step.batch, self.scale)  # [B, Hq, D]
        out = out.reshape(n, hq * d) * torch.sigmoid(q_gate[..., d:].reshape(n, hq * d))  # [B, Hq*D]
        return self.o_proj.plus(x, out)  # [B, H]: x + o_proj(out)

    def _in_place(self, q, k_buf, v_buf) -> bool:
        """Whether the C kernel can read these: float32, heads of D floats in a row, whole buffers."""
        return (
            self.kernel is not None
            and q.dtype == k_buf.dtype == v_buf.dtype == torch.float32
            and q.stride(2) == 1
            and q.stride(1) == self.d
            and k_buf.is_contiguous()
            and v_buf.is_contiguous()
        )

    def _in_c(self, q, k_buf, v_buf, batch: ForwardBatch) -> torch.Tensor:
        """Each request's context read where it lies in the pool (no gather, no padding, no mask)."""
        n, threads = q.shape[0], torch.get_num_threads()
        out = torch.empty(n, self.hq, self.d)  # [B, Hq, D]
        scores = torch.empty(threads * self.hq // self.hkv * batch.kv_slots.shape[0])  # [threads, r, longest] at most
        rc = self.kernel(
            *(n, self.hq, self.hkv, self.d, self.scale, q.data_ptr(), q.stride(0)),
            *(
                k_buf.data_ptr(),
                v_buf.data_ptr(),
                k_buf.shape[0],
                batch.kv_indptr.data_ptr(),
                batch.kv_slots.data_ptr(),
            ),
            *(scores.data_ptr(), out.data_ptr(), threads),
        )
        if rc != 0:
            raise EngineError(f"paged_attention: {'an empty context' if rc == 1 else 'a KV slot out of range'}")
        return out

    def _attend(self, q, k_buf, v_buf, step: _Step, backend: TorchAttention) -> torch.Tensor:
        n, length = q.shape[0], step.kv_slots.shape[-1]
        kb, vb = backend.gather(k_buf, v_buf, step.kv_slots)  # [(B,) L, Hkv, D] each
        kb = kb.view(n, length, self.hkv, self.d).transpose(1, 2)  # [B, Hkv, L, D]
        vb = vb.view(n, length, self.hkv, self.d).transpose(1, 2)  # [B, Hkv, L, D]
        out = F.scaled_dot_product_attention(
            q[:, :, None, :], kb, vb, attn_mask=step.kv_mask, scale=self.scale, enable_gqa=True
        )  # [B, Hq, 1, D]
        return out[:, :, 0, :]


class _MoeLayer:
    """Sparse MoE at decode: router and shared expert in one product, routed experts from the provider."""

    def __init__(self, module: SparseMoE, experts, inter: int) -> None:
        self.layer = module.layer
        self.experts = experts
        self.num_experts, self.top_k = module.gate.weight.shape[0], module.gate.top_k
        self.norm_topk_prob = module.gate.norm_topk_prob
        self.inter = inter  # routed experts' intermediate size
        # resident weights stay put, so a step may hold several at once; an expert cache's may be
        # overwritten by its next miss
        self.resident = isinstance(experts, ResidentExperts)
        self._expert = module._expert  # the reference's: get, gate/up, SwiGLU, down
        self.has_shared = module.has_shared
        if self.has_shared:
            shared = module.shared_expert
            self.shared_inter = shared.gate_proj.weight.shape[0]
            self.proj = _fuse(module.gate, module.shared_expert_gate, shared.gate_proj, shared.up_proj)
            self.shared_down_t = shared.down_proj.weight.detach().t()  # [Is, H] contiguous
        else:
            self.proj = _Linear(module.gate.weight.detach().t(), None)
        self.kernel = self._kernel()

    def _kernel(self):
        """The C kernel for up to 8 tokens with resident experts in float32 on a CPU, or None."""
        if not self.resident or (kernel := _c_kernel("moe_decode", self.proj.weight_t)) is None:
            return None
        weights = [self.experts.get(self.layer, e) for e in range(self.num_experts)]
        if not all(w.gate_up.t().is_contiguous() and w.down.t().is_contiguous() for w in weights):
            return None  # the kernel reads input-major weights
        if self.has_shared and not self.shared_down_t.is_contiguous():
            return None
        self._gate_up_ptrs = torch.tensor([w.gate_up.data_ptr() for w in weights], dtype=torch.int64)
        self._down_ptrs = torch.tensor([w.down.data_ptr() for w in weights], dtype=torch.int64)
        self._weights = weights  # the addresses above stay valid while these are held
        self._scratch, self._scratch_threads = torch.empty(0), 0  # sized on the first call
        return kernel

    def _in_c(self, x, h, p) -> torch.Tensor:
        out = torch.empty_like(x)  # [B, H]
        si = self.shared_inter if self.has_shared else 0
        threads = torch.get_num_threads()
        if threads > self._scratch_threads:  # routed, picks, shared [T, ...] | per thread: rows, gate/up, act
            hidden, t = x.shape[1], cpu_kernels.MOE_DECODE_MAX_TOKENS
            shared = t * ((2 + self.top_k) * hidden + si)
            self._scratch = torch.empty(shared + threads * t * (hidden + 3 * self.inter))
            self._scratch_threads = threads
        rc = self.kernel(
            *(x.shape[0], x.shape[1], self.inter, self.num_experts, self.top_k, int(bool(self.norm_topk_prob))),
            *(p.data_ptr(), p.stride(0), h.data_ptr(), x.data_ptr()),
            *(self._gate_up_ptrs.data_ptr(), self._down_ptrs.data_ptr()),
            *(si, self.shared_down_t.data_ptr() if si else None, self._scratch.data_ptr(), out.data_ptr(), threads),
        )
        if rc != 0:
            raise EngineError(
                f"moe_decode: {x.shape[0]} tokens, top {self.top_k} of {self.num_experts}: out of its bounds"
            )
        return out

    def __call__(self, x, h) -> torch.Tensor:
        n, e = x.shape[0], self.num_experts
        p = self.proj(h)  # [B, E (+ 1 + 2Is)]: router logits | shared gate | shared gate, up
        if (
            self.kernel is not None
            and n <= cpu_kernels.MOE_DECODE_MAX_TOKENS
            and x.is_contiguous()
            and h.is_contiguous()
        ):
            return self._in_c(x, h, p)
        probs = torch.softmax(p[:, :e], dim=-1, dtype=torch.float32)  # [B, E]
        top_w, top_ids = torch.topk(probs, self.top_k, dim=-1)  # [B, k], [B, k]
        if self.norm_topk_prob:
            top_w = top_w / top_w.sum(dim=-1, keepdim=True)  # [B, k]
        top_w = top_w.to(x.dtype)
        out = self._one_token(h, top_w, top_ids) if n == 1 else self._many_tokens(h, top_w, top_ids)  # [B, H]
        if self.has_shared:
            si = self.shared_inter
            act = F.silu(p[:, e + 1 : e + 1 + si]) * p[:, e + 1 + si :]  # [B, Is]
            out.addcmul_(torch.sigmoid(p[:, e : e + 1]), torch.mm(act, self.shared_down_t))  # routed + gate * shared
        return x + out  # [B, H]

    def _one_token(self, h, top_w, top_ids) -> torch.Tensor:
        """Experts added in ascending id, as the reference does."""
        picks = sorted(zip(top_ids[0].tolist(), range(top_ids.shape[1])))
        weights = top_w.t()[..., None]  # [k, 1, 1]
        out = None
        for expert, k in picks:
            y = self._expert(expert, h)  # [1, H]
            out = y * weights[k] if out is None else out.addcmul_(y, weights[k])
        return out

    def _many_tokens(self, h, top_w, top_ids) -> torch.Tensor:
        """(token, pick) pairs grouped by expert with one stable sort (`SparseMoE._many_tokens`); each
        expert's products written into one buffer, the activation run once over all of them."""
        order, token_idx, groups = group_by_expert(top_ids)
        hs = h.index_select(0, token_idx)  # [B*k, H]: the same rows as indexing, 2x cheaper on a CPU
        start = groups[-1][2]  # B*k
        weights = [self.experts.get(self.layer, expert) for expert, _, _ in groups] if self.resident else None
        y = h.new_empty(start, h.shape[1])  # [B*k, H]
        if weights is None:  # an expert cache: each expert's weights used before the next get
            for expert, a, b in groups:
                y[a:b] = self._expert(expert, hs[a:b])
        else:
            gate_up = h.new_empty(start, 2 * self.inter)  # [B*k, 2I]
            for w, (_, a, b) in zip(weights, groups):
                torch.mm(hs[a:b], w.gate_up.t(), out=gate_up[a:b])
            act = F.silu(gate_up[:, : self.inter]) * gate_up[:, self.inter :]  # [B*k, I]
            for w, (_, a, b) in zip(weights, groups):
                torch.mm(act[a:b], w.down.t(), out=y[a:b])
        y.mul_(top_w.reshape(-1)[order, None])  # [B*k, H]
        return torch.zeros_like(h).index_add_(0, token_idx, y)  # [B, H]


class _MlpLayer:
    """The dense SwiGLU MLP, gate and up in one product."""

    def __init__(self, module: MLP) -> None:
        self.proj = _fuse(module.gate_proj, module.up_proj)
        self.inter = module.gate_proj.weight.shape[0]
        self.down = _linear(module.down_proj)  # [I, H] contiguous

    def __call__(self, x, h) -> torch.Tensor:
        gate_up = self.proj(h)  # [B, 2I]
        act = F.silu(gate_up[:, : self.inter]) * gate_up[:, self.inter :]  # [B, I]
        return self.down.plus(x, act)  # [B, H]: x + down(act)


# each layer kind's projections as the fast step reads them (_Linear attributes)
_PRODUCTS = {
    _GdnLayer: ("proj_ordered", "out_proj"),
    _AttentionLayer: ("proj", "o_proj"),
    _MoeLayer: ("proj",),
    _MlpLayer: ("proj", "down"),
}
