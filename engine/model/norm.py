"""The two RMSNorms of Qwen3-Next.

`RMSNorm` is zero-centred: the weight is stored as an offset from 1 (checkpoints hold zeros
for an identity norm), so the scale is `1 + weight`, applied in float32 before the cast
back. `GatedRMSNorm` (inside linear attention) scales by `weight` itself and then gates the
result with silu(z).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of x with `scale` (float32, [D]) in float32, cast back to x's dtype. F.rms_norm runs
    the reference's pow-mean-add-rsqrt-mul sequence in one call (same bits): at batch-1 decode a
    step runs 21 of these norms, and per-op dispatch is most of their cost."""
    if x.dtype == torch.float32:
        return F.rms_norm(x, (x.shape[-1],), scale, eps)
    return F.rms_norm(x.float(), (x.shape[-1],), scale, eps).type_as(x)  # [..., D]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))  # [D], offset from 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.scale, self.eps)  # [..., D]

    @property
    def scale(self) -> torch.Tensor:
        """1 + weight, float32 [D]: what the norm multiplies by."""
        return 1.0 + self.weight.float()


class GatedRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))  # [D]

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)  # [..., D]
        out = self.weight * xf.to(dtype)  # [..., D]; the reference scales in the input dtype
        out = out * F.silu(gate.float())  # [..., D] float32
        return out.to(dtype)
