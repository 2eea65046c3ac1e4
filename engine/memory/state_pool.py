"""StatePool: per-request linear-attention state (conv window + recurrent matrix), by slot.

Each linear-attention layer keeps, per slot, the last `kernel - 1` inputs of its causal
conv and the Gated DeltaNet recurrent state. States are kept in float32 whatever the model
dtype, as the reference computes the delta rule in float32. The radix cache snapshots a
request's state by copying its slot (`copy_slot`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from engine.errors import EngineError


class StatePool:
    def __init__(
        self,
        num_slots: int,
        layer_ids: Sequence[int],
        conv_dim: int,
        conv_kernel: int,
        num_value_heads: int,
        key_head_dim: int,
        value_head_dim: int,
        device: torch.device | str = "cpu",
    ) -> None:
        if num_slots <= 0:
            raise EngineError(f"StatePool: num_slots must be > 0, found {num_slots}")
        self.num_slots = num_slots
        self.layer_ids = tuple(layer_ids)
        self._index = {layer: i for i, layer in enumerate(self.layer_ids)}
        self.device = torch.device(device)
        conv_shape = (num_slots, conv_dim, conv_kernel - 1)
        rec_shape = (num_slots, num_value_heads, key_head_dim, value_head_dim)
        self.conv = [torch.zeros(conv_shape, device=device) for _ in self.layer_ids]  # each [S, C, K-1]
        self.recurrent = [torch.zeros(rec_shape, device=device) for _ in self.layer_ids]  # each [S, Hv, Dk, Dv]

    def buffers(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Conv state [num_slots, conv_dim, kernel - 1] and recurrent state [num_slots, Hv, Dk, Dv]."""
        i = self._index[layer]
        return self.conv[i], self.recurrent[i]

    def copy_slot(self, src: int, dst: int) -> None:
        """Make slot `dst` hold the same state as slot `src`, in every layer."""
        self._check(src)
        self._check(dst)
        for conv, rec in zip(self.conv, self.recurrent):
            conv[dst].copy_(conv[src])  # [C, K-1]
            rec[dst].copy_(rec[src])  # [Hv, Dk, Dv]

    def reset(self, slot: int) -> None:
        """Zero slot `slot` in every layer: the state of an empty context."""
        self._check(slot)
        for conv, rec in zip(self.conv, self.recurrent):
            conv[slot].zero_()
            rec[slot].zero_()

    @property
    def bytes_per_slot(self) -> int:
        return sum(
            c[0].numel() * c.element_size() + r[0].numel() * r.element_size() for c, r in zip(self.conv, self.recurrent)
        )

    def _check(self, slot: int) -> None:
        if not 0 <= slot < self.num_slots:
            raise EngineError(f"StatePool: slot must be in [0, {self.num_slots}), found {slot}")
