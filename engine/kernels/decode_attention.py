"""Triton decode attention over the slot-indexed KV pool (one new token per request, GQA).

One program per (request, query head). It walks the request's context in blocks of
BLOCK_N slots, gathers K/V rows through the slot ids and keeps an online softmax
(running max m, running sum l, running output acc) in float32:

    kv_slots  [ r0: s s s s s | r1: s s s | ... ]   kv_indptr [0, 5, 8, ...]
                 block 0 ^^^^ block 1 ^           (masked past the request's end)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit  # type: ignore[untyped-decorator]  # triton ships no type information
def _decode_attention_kernel(  # type: ignore[no-untyped-def]  # Triton reads a kernel's annotations: tl.constexpr, no others
    Q,
    K,
    V,
    Slots,
    Indptr,
    Out,
    scale,
    stride_qb,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_ob,
    stride_oh,
    GROUP: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kv_h = h // GROUP
    start = tl.load(Indptr + b)
    end = tl.load(Indptr + b + 1)
    d = tl.arange(0, BLOCK_D)  # [BD]
    d_mask = d < HEAD_DIM
    q = tl.load(Q + b * stride_qb + h * stride_qh + d, mask=d_mask, other=0.0).to(tl.float32)  # [BD]
    m_i = tl.full((), float("-inf"), tl.float32)
    l_i = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)  # [BD]
    for n0 in range(start, end, BLOCK_N):
        offs = n0 + tl.arange(0, BLOCK_N)  # [BN]
        n_mask = offs < end
        slots = tl.load(Slots + offs, mask=n_mask, other=0).to(tl.int64)  # [BN]
        mask2 = n_mask[:, None] & d_mask[None, :]  # [BN, BD]
        k = tl.load(K + slots[:, None] * stride_ks + kv_h * stride_kh + d[None, :], mask=mask2, other=0.0).to(
            tl.float32
        )  # [BN, BD]
        s = tl.sum(k * q[None, :], axis=1) * scale  # [BN]
        s = tl.where(n_mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new)  # [BN]
        v = tl.load(V + slots[:, None] * stride_vs + kv_h * stride_vh + d[None, :], mask=mask2, other=0.0).to(
            tl.float32
        )  # [BN, BD]
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)  # [BD]
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    out = acc / l_i  # [BD]
    tl.store(Out + b * stride_ob + h * stride_oh + d, out.to(Out.dtype.element_ty), mask=d_mask)


def decode_attention(
    q: torch.Tensor,
    k_buf: torch.Tensor,
    v_buf: torch.Tensor,
    kv_slots: torch.Tensor,
    kv_indptr: torch.Tensor,
    scale: float,
    block_n: int = 64,
) -> torch.Tensor:
    """q [B, Hq, D]; k_buf, v_buf [S, Hkv, D]; kv_slots [N]; kv_indptr [B + 1] -> out [B, Hq, D]."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_buf.shape[1]
    assert q.stride(-1) == 1 and k_buf.stride(-1) == 1 and v_buf.stride(-1) == 1, "last dim must be contiguous"
    out = torch.empty((batch, num_heads, head_dim), dtype=q.dtype, device=q.device)  # [B, Hq, D]
    _decode_attention_kernel[(batch, num_heads)](
        q,
        k_buf,
        v_buf,
        kv_slots,
        kv_indptr,
        out,
        scale,
        q.stride(0),
        q.stride(1),
        k_buf.stride(0),
        k_buf.stride(1),
        v_buf.stride(0),
        v_buf.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP=num_heads // num_kv_heads,
        HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim),
        BLOCK_N=block_n,
    )
    return out
