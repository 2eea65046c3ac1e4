"""KVPool: the tensors that hold K and V of every full-attention layer, indexed by slot.

A slot holds one token's K (or V) for every KV head. Which slots are free is the
allocator's business (`engine.memory.allocator`); the pool only stores and hands out views.
With paging, slot = page * page_size + offset, so the same layout serves both.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.errors import EngineError


def kv_bytes_per_token(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes one token's K and V take over every full-attention layer (at least 1, so that a
    model without such layers still sizes a pool)."""
    return max(2 * num_layers * num_kv_heads * head_dim * torch.tensor([], dtype=dtype).element_size(), 1)


class KVPool:
    def __init__(
        self,
        num_slots: int,
        layer_ids: Sequence[int],
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_slots <= 0:
            raise EngineError(f"KVPool: num_slots must be > 0, found {num_slots}")
        self.num_slots = num_slots
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        self.layer_ids = tuple(layer_ids)
        self._index = {layer: i for i, layer in enumerate(self.layer_ids)}
        shape = (num_slots, num_kv_heads, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layer_ids]  # each [S, Hkv, D]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in self.layer_ids]  # each [S, Hkv, D]

    def buffers(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V buffers of decoder layer `layer`, each [num_slots, kv_heads, head_dim]."""
        i = self._index[layer]
        return self.k[i], self.v[i]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store K/V of new tokens: slots [T], k and v [T, kv_heads, head_dim]."""
        k_buf, v_buf = self.buffers(layer)
        k_buf.index_copy_(0, slots, k.to(self.dtype))  # [T, Hkv, D]; a forward's new slots are distinct
        v_buf.index_copy_(0, slots, v.to(self.dtype))  # [T, Hkv, D]

    @property
    def bytes_per_slot(self) -> int:
        return 2 * len(self.layer_ids) * self.num_kv_heads * self.head_dim * self.k[0].element_size() if self.k else 0

    @property
    def nbytes(self) -> int:
        return self.bytes_per_slot * self.num_slots
