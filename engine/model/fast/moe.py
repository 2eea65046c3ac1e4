"""Sparse MoE on the fast path (`engine.model.moe.SparseMoE`, the specification): the router and the
shared expert's gate and gate/up rows in one product, the routed experts' products grouped by expert
into one buffer with the activation run once; with resident experts on a CPU in float32, the C kernel
moe_decode for up to 8 tokens."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.kernels import cpu as cpu_kernels
from engine.model.experts import ExpertProvider, ResidentExperts
from engine.model.fast.projection import CKernel, Projection, c_kernel, fuse
from engine.model.moe import SparseMoE, group_by_expert


class MoeLayer:
    """Sparse MoE: router and shared expert in one product, routed experts from the provider."""

    PRODUCTS: ClassVar[tuple[str, ...]] = ("proj",)  # its projections, for small_gemm

    def __init__(self, module: SparseMoE, experts: ExpertProvider, inter: int) -> None:
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
            self.proj = fuse(module.gate, module.shared_expert_gate, shared.gate_proj, shared.up_proj)
            self.shared_down_t = shared.down_proj.weight.detach().t()  # [Is, H] contiguous
        else:
            self.proj = Projection(module.gate.weight.detach().t(), None)
        self.kernel = self._kernel()

    def _kernel(self) -> CKernel | None:
        """The C kernel for up to 8 tokens with resident experts in float32 on a CPU, or None."""
        if not self.resident or (kernel := c_kernel("moe_decode", self.proj.weight_t)) is None:
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

    def _in_c(self, x: torch.Tensor, h: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """The layer through the C kernel: x, h [B, H] (B up to 8), p the fused product [B, E (+ 1 + 2Is)]."""
        assert self.kernel is not None  # the caller's test
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

    def __call__(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x + the layer on h: x, h [T, H]."""
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

    def _one_token(self, h: torch.Tensor, top_w: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
        """Experts added in ascending id, as the reference does."""
        picks = sorted(zip(top_ids[0].tolist(), range(top_ids.shape[1])))
        weights = top_w.t()[..., None]  # [k, 1, 1]
        (expert, k), *rest = picks
        out = self._expert(expert, h) * weights[k]  # [1, H]
        for expert, k in rest:
            out.addcmul_(self._expert(expert, h), weights[k])  # [1, H]
        return out

    def _many_tokens(self, h: torch.Tensor, top_w: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
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
