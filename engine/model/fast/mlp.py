"""The dense SwiGLU MLP on the fast path (`engine.model.mlp.MLP`, the specification): gate and up in one
product, the residual folded into down."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from engine.model.fast.projection import fuse, unfused
from engine.model.mlp import MLP


class MlpLayer:
    """The dense SwiGLU MLP, gate and up in one product."""

    PRODUCTS: ClassVar[tuple[str, ...]] = ("proj", "down")  # its projections, for small_gemm

    def __init__(self, module: MLP) -> None:
        self.proj = fuse(module.gate_proj, module.up_proj)
        self.inter = module.gate_proj.weight.shape[0]
        self.down = unfused(module.down_proj)  # [I, H] contiguous

    def __call__(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """x + down(SwiGLU(h)): x, h [T, H]."""
        gate_up = self.proj(h)  # [B, 2I]
        act = F.silu(gate_up[:, : self.inter]) * gate_up[:, self.inter :]  # [B, I]
        return self.down.plus(x, act)  # [B, H]: x + down(act)
