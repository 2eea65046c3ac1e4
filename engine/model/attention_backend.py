"""Attention over the slot-indexed KV pool: `torch` everywhere, `triton` decode on CUDA.

A backend gets the new tokens' queries and the layer's whole K/V buffers and reads each
request's context through `batch.kv_slots`; the new tokens' K/V are already written.

`gather_s` is the wall time the torch backend spent gathering contexts out of the pool, where
that time is real: on a CPU the gather runs when called (with the C decode kernel, which reads
them in place, the whole kernel's time). On a GPU the call only enqueues it,
so it stays None there (and for the Triton kernel, which gathers inside the kernel).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from engine.errors import EngineError
from engine.model.forward_batch import ForwardBatch

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "torch", "triton")
_Out = TypeVar("_Out")


def _index_select(k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = slots.reshape(-1)
    kb = k_buf.index_select(0, flat).view(*slots.shape, *k_buf.shape[1:])
    vb = v_buf.index_select(0, flat).view(*slots.shape, *v_buf.shape[1:])
    return kb, vb


class TorchAttention:
    name = "torch"

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._timed = torch.device(device).type == "cpu"
        self._gather_s = 0.0

    @property
    def gather_s(self) -> float | None:
        """Seconds spent gathering K/V contexts from the pool since start; None where not measured."""
        return self._gather_s if self._timed else None

    def gather(
        self, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V rows of `slots` (any shape) -> [*slots.shape, Hkv, D] each, timed on a CPU. Through
        index_select on the flattened ids: the same rows as indexing, 4x cheaper on a CPU."""
        return self.read_in_place(_index_select, k_buf, v_buf, slots)

    def read_in_place(self, read: Callable[..., _Out], *args: Any) -> _Out:
        """`read(*args)`, its time counted in `gather_s` on a CPU: a gather, or a decode kernel that
        reads the contexts where they lie in the pool (the gather fused with the attention)."""
        start = time.perf_counter() if self._timed else 0.0
        out = read(*args)
        if self._timed:
            self._gather_s += time.perf_counter() - start
        return out

    def forward(
        self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, batch: ForwardBatch, scale: float
    ) -> torch.Tensor:
        """q [T, Hq, D]; k_buf, v_buf [S, Hkv, D] -> [T, Hq, D]."""
        if batch.is_decode:
            return self.decode(q, k_buf, v_buf, batch, scale)
        return self.extend(q, k_buf, v_buf, batch, scale)

    def extend(
        self,
        q: torch.Tensor,
        k_buf: torch.Tensor,
        v_buf: torch.Tensor,
        batch: ForwardBatch,
        scale: float,
        k_new: torch.Tensor | None = None,
        v_new: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """k_new, v_new [T, Hkv, D]: the new tokens' K/V as written to the pool, where the caller has
        them in the pool's dtype: a request with no prefix reads them there instead of gathering its
        context back out of the pool."""
        out = torch.empty_like(q)  # [T, Hq, D]
        indptr = batch.kv_indptr.tolist()
        fresh_kv = None  # the new tokens' K/V, where they can stand for a fresh request's context
        if k_new is not None and v_new is not None and k_new.dtype == k_buf.dtype == v_new.dtype:
            fresh_kv = k_new, v_new
        for b, (start, end) in enumerate(batch.token_ranges()):
            slots = batch.kv_slots[indptr[b] : indptr[b + 1]]  # [L]
            qb = q[start:end].transpose(0, 1)[None]  # [1, Hq, n, D]
            if fresh_kv is not None and batch.prefix_lens[b] == 0:  # its whole context is this step's tokens
                kb, vb = fresh_kv[0][start:end], fresh_kv[1][start:end]  # [n, Hkv, D] each
            else:
                kb, vb = self.gather(k_buf, v_buf, slots)  # [L, Hkv, D] each
            kb, vb = kb.transpose(0, 1)[None], vb.transpose(0, 1)[None]  # [1, Hkv, L, D]
            n, prefix = end - start, batch.prefix_lens[b]
            if prefix == 0:
                ob = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True, scale=scale, enable_gqa=True)
            else:
                # query i sits at position prefix + i and sees keys 0 .. prefix + i
                key_pos = torch.arange(prefix + n, device=q.device)  # [L]
                query_pos = torch.arange(n, device=q.device) + prefix  # [n]
                mask = key_pos[None, :] <= query_pos[:, None]  # [n, L]
                ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, enable_gqa=True)
            out[start:end] = ob[0].transpose(0, 1)  # [n, Hq, D]
        return out

    def decode(
        self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, batch: ForwardBatch, scale: float
    ) -> torch.Tensor:
        # Pad every context to the longest one and mask:
        #   idx[b, j] = kv_indptr[b] + j (clamped to the request's last slot), valid while j < len[b]
        lens = batch.kv_indptr[1:] - batch.kv_indptr[:-1]  # [B]
        max_len = int(lens.max())
        j = torch.arange(max_len, device=q.device)  # [L]
        idx = torch.minimum(batch.kv_indptr[:-1, None] + j[None, :], batch.kv_indptr[1:, None] - 1)  # [B, L]
        slots = batch.kv_slots[idx]  # [B, L]
        kb, vb = self.gather(k_buf, v_buf, slots)  # [B, L, Hkv, D] each
        kb, vb = kb.transpose(1, 2), vb.transpose(1, 2)  # [B, Hkv, L, D]
        qb = q[:, :, None, :]  # [B, Hq, 1, D]
        if batch.num_requests == 1:
            ob = F.scaled_dot_product_attention(qb, kb, vb, scale=scale, enable_gqa=True)  # [1, Hq, 1, D]
        else:
            mask = (j[None, :] < lens[:, None])[:, None, None, :]  # [B, 1, 1, L]
            ob = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, enable_gqa=True)
        return ob[:, :, 0, :]  # [B, Hq, D]


class TritonAttention(TorchAttention):
    """Decode through the Triton kernel; extend (prefill) through torch."""

    name = "triton"

    def __init__(self, device: torch.device | str = "cuda") -> None:
        from engine.kernels.decode_attention import decode_attention

        super().__init__(device)
        self._timed = False  # decode gathers inside the kernel; extend's gathers are asynchronous on a GPU
        self._decode = decode_attention

    def decode(
        self, q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, batch: ForwardBatch, scale: float
    ) -> torch.Tensor:
        return self._decode(q, k_buf, v_buf, batch.kv_slots, batch.kv_indptr, scale)


def make_attention_backend(name: str, device: torch.device) -> TorchAttention:
    """`auto` is triton on CUDA when triton imports, torch otherwise."""
    if name not in BACKENDS:
        raise EngineError(f"attention backend: expected one of {list(BACKENDS)}, found {name!r}")
    if name == "auto":
        if device.type == "cuda":
            try:
                return TritonAttention(device)
            except ImportError:
                logger.info("triton is not importable; using the torch attention backend")
        return TorchAttention(device)
    if name == "triton":
        try:
            return TritonAttention(device)
        except ImportError as exc:
            raise EngineError(f"attention backend 'triton': triton is not importable ({exc})") from None
    return TorchAttention(device)
