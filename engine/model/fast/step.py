"""What every layer of one forward shares on the fast path, computed once per forward."""

from __future__ import annotations

from typing import NamedTuple

import torch

from engine.model.attention_backend import TorchAttention
from engine.model.forward_batch import ForwardBatch
from engine.model.rotary import RotaryEmbedding


class Step(NamedTuple):
    """What every layer of one forward shares, computed once."""

    batch: ForwardBatch
    cos: torch.Tensor  # [T, 1, R]
    sin_signed: torch.Tensor  # [T, 1, R]: -sin on the first half, +sin on the second (rotate_half's signs)
    kv_slots: torch.Tensor  # decode: [B, L] (or [L] at batch 1), each request's context slots, padded
    kv_mask: torch.Tensor | None  # decode: [B, 1, 1, L] valid keys; None at batch 1 and for an extend
    fresh: list[int]  # requests with no prefix: their linear-attention state starts at zero
    state_slots: list[int]  # each request's linear-attention state slot
    fresh_mask: torch.Tensor  # [B] uint8, 1 for the fresh requests (the C kernel's form of `fresh`)

    @classmethod
    def plan(
        cls, batch: ForwardBatch, rotary: RotaryEmbedding, dtype: torch.dtype, backend: TorchAttention | None
    ) -> Step:
        """The rotary table in `dtype`, and with the torch backend a decode batch's gather plan."""
        cos, sin = rotary.cos_sin(batch.positions, dtype)  # [B, R] each
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
        return cls(
            batch=batch,
            cos=cos[:, None, :],
            sin_signed=sin_signed[:, None, :],
            kv_slots=kv_slots,
            kv_mask=kv_mask,
            fresh=fresh,
            state_slots=batch.state_slots.tolist(),
            fresh_mask=torch.tensor([p == 0 for p in batch.prefix_lens], dtype=torch.uint8),
        )
