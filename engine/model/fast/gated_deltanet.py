"""Gated DeltaNet on the fast path (`engine.model.gated_deltanet.GatedDeltaNet`, the specification): its
two input projections in one product with the columns in the order the step reads them, the delta rule
as batched products on the gathered state (or in its slot at batch 1), the residual folded into
out_proj; on a CPU in float32, the C kernel gdn_recurrent between the two products, on the states in
the pool."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model import delta_rule
from engine.model.attention_backend import TorchAttention
from engine.model.fast.projection import CKernel, Projection, c_kernel, fuse, unfused
from engine.model.fast.step import Step
from engine.model.gated_deltanet import GatedDeltaNet


class GdnLayer:
    """Gated DeltaNet (`GatedDeltaNet`): its projections, the causal conv, the delta rule, the gated norm."""

    PRODUCTS: ClassVar[tuple[str, ...]] = ("proj_ordered", "out_proj")  # its projections, for small_gemm

    def __init__(self, module: GatedDeltaNet) -> None:
        self.layer = module.layer
        self.module = module  # its extend: the causal conv and the chunked delta rule per request
        self.proj = fuse(module.in_proj_qkvz, module.in_proj_ba)  # the reference's two projections are views of it
        hk, hv, dk, dv = module.num_k_heads, module.num_v_heads, module.head_k_dim, module.head_v_dim
        self.hk, self.hv, self.dk, self.dv, self.r = hk, hv, dk, dv, hv // hk
        self.conv_dim, self.value_dim = module.conv_dim, module.value_dim
        # The fused projection's columns, per key head [q | k | v | z] then per key head [b | a],
        # put in the order the step reads them: q (all heads) k v | z | b | a.
        group, r = 2 * dk + 2 * self.r * dv, self.r
        qkvz = hk * group
        cols: dict[str, list[int]] = {name: [] for name in "qkvzba"}
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
        self.proj_ordered = Projection(self.proj.weight_t[:, order].contiguous(), None)
        self.conv_weight = module.conv1d.weight.detach()[:, 0, :]  # [C, K]
        self.neg_a = -module.A_log.detach().float().exp()  # [Hv]
        self.dt_bias = module.dt_bias.detach()  # [Hv]
        # l2norm(x) = rms_norm(x, eps / D) / sqrt(D); q is further scaled by D^-0.5 as the reference does
        self.qk_eps = 1e-6 / dk
        self.qk_scale = torch.full((dk,), dk**-0.5, device=self.proj.weight_t.device)  # [Dk]
        self.q_scale = dk**-0.5
        self.norm_weight = module.norm.weight.detach()  # [Dv]
        self.norm_eps = module.norm.eps
        self.out_proj = unfused(module.out_proj)  # [Hv*Dv, H] contiguous
        self.kernel = self._kernel()

    def _kernel(self) -> CKernel | None:
        """The C kernel gdn_recurrent for float32 weights on a CPU, where it was built; else None."""
        kernel = c_kernel("gdn_recurrent", self.proj_ordered.weight_t, self.conv_weight, self.dt_bias, self.norm_weight)
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

    def _in_c(
        self, x: torch.Tensor, p: torch.Tensor, step: Step, conv_buf: torch.Tensor, rec_buf: torch.Tensor
    ) -> torch.Tensor:
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

    def _call(
        self,
        requests: int,
        tokens: int,
        p: torch.Tensor,
        slots: torch.Tensor,
        fresh: torch.Tensor,
        out: torch.Tensor,
        conv_buf: torch.Tensor,
        rec_buf: torch.Tensor,
    ) -> None:
        """`requests` requests of `tokens` tokens each (rows of p and out, request by request)."""
        assert self.kernel is not None  # the caller's test
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

    def __call__(
        self,
        x: torch.Tensor,
        h: torch.Tensor,
        step: Step,
        kv_pool: KVPool,
        state_pool: StatePool,
        backend: TorchAttention,
    ) -> torch.Tensor:
        """x + out_proj(the layer on h): x, h [T, H]; the requests' states updated in their slots."""
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

    def _output(self, x: torch.Tensor, out: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The gated norm and the output projection, residual added: out [T, Hv, Dv], z [T, Hv*Dv]."""
        n, hv, dv = x.shape[0], self.hv, self.dv
        out = F.rms_norm(out, (dv,), None, self.norm_eps).to(x.dtype) * self.norm_weight  # [T, Hv, Dv]
        out = (out * F.silu(z.float().view(n, hv, dv))).to(x.dtype)  # [T, Hv, Dv]
        return self.out_proj.plus(x, out.reshape(n, self.value_dim))  # [T, H]: x + out_proj(out)
