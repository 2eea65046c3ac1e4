"""Gated attention on the fast path (`engine.model.attention.GatedAttention`, the specification): q, k
and v in one product, both norms and the rotary in one op each, the residual folded into o_proj; at
decode with the torch backend on a CPU in float32, the C kernel paged_attention reads each request's
context where it lies in the pool."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model.attention import GatedAttention
from engine.model.attention_backend import TorchAttention
from engine.model.fast.projection import CKernel, c_kernel, fuse, unfused
from engine.model.fast.step import Step
from engine.model.forward_batch import ForwardBatch


class AttentionLayer:
    """Gated attention (`GatedAttention`) with the torch or Triton backend."""

    PRODUCTS: ClassVar[tuple[str, ...]] = ("proj", "o_proj")  # its projections, for small_gemm

    def __init__(self, module: GatedAttention) -> None:
        self.layer = module.layer
        self.hq, self.hkv, self.d = module.num_heads, module.num_kv_heads, module.head_dim
        self.scale = module.scale
        self.proj = fuse(module.q_proj, module.k_proj, module.v_proj)
        # q heads then k heads normalised in one op: each head's own scale
        self.qk_norm = torch.cat(
            (module.q_norm.scale.detach().expand(self.hq, -1), module.k_norm.scale.detach().expand(self.hkv, -1))
        )  # [Hq + Hkv, D]
        self.eps = module.q_norm.eps
        self.o_proj = unfused(module.o_proj)
        self.kernel = self._kernel()

    def _kernel(self) -> CKernel | None:
        """The C kernel paged_attention for float32 weights on a CPU, where it was built; else None."""
        return c_kernel("paged_attention", self.proj.weight_t)

    def __call__(
        self,
        x: torch.Tensor,
        h: torch.Tensor,
        step: Step,
        kv_pool: KVPool,
        state_pool: StatePool,
        backend: TorchAttention,
    ) -> torch.Tensor:
        """x + o_proj(attention(h)): x, h [T, H]; the new tokens' K/V written into the pool."""
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

    def _in_place(self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor) -> bool:
        """Whether the C kernel can read these: float32, heads of D floats in a row, whole buffers."""
        return (
            self.kernel is not None
            and q.dtype == k_buf.dtype == v_buf.dtype == torch.float32
            and q.stride(2) == 1
            and q.stride(1) == self.d
            and k_buf.is_contiguous()
            and v_buf.is_contiguous()
        )

    def _in_c(self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, batch: ForwardBatch) -> torch.Tensor:
        """Each request's context read where it lies in the pool (no gather, no padding, no mask)."""
        assert self.kernel is not None  # _in_place said so
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

    def _attend(
        self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, step: Step, backend: TorchAttention
    ) -> torch.Tensor:
        """A batch's contexts gathered, padded to the longest and masked (`step.kv_slots`, `step.kv_mask`)."""
        n, length = q.shape[0], step.kv_slots.shape[-1]
        kb, vb = backend.gather(k_buf, v_buf, step.kv_slots)  # [(B,) L, Hkv, D] each
        kb = kb.view(n, length, self.hkv, self.d).transpose(1, 2)  # [B, Hkv, L, D]
        vb = vb.view(n, length, self.hkv, self.d).transpose(1, 2)  # [B, Hkv, L, D]
        out = F.scaled_dot_product_attention(
            q[:, :, None, :], kb, vb, attn_mask=step.kv_mask, scale=self.scale, enable_gqa=True
        )  # [B, Hq, 1, D]
        return out[:, :, 0, :]
