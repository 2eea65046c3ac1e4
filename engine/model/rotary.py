"""Partial rotary embedding: only the first `rotary_dim` channels of each head rotate."""

from __future__ import annotations

import torch


class RotaryEmbedding:
    def __init__(self, head_dim: int, rotary_dim: int, theta: float) -> None:
        self.head_dim = head_dim
        self.rotary_dim = rotary_dim
        exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device="cpu").float() / rotary_dim  # [R/2]
        self.inv_freq = 1.0 / (theta**exponents)  # [R/2] float32, on the CPU even when built under a meta device

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin for each position, [T, R] in `dtype` (computed in float32)."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions.float()[:, None] * self.inv_freq[None, :]  # [T, R/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, R]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)  # [..., R]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D]; cos, sin [T, R] with R <= D. Channels past R pass through."""
    rot_dim = cos.shape[-1]
    cos, sin = cos[:, None, :], sin[:, None, :]  # [T, 1, R]
    x_rot, x_pass = x[..., :rot_dim], x[..., rot_dim:]  # [T, H, R], [T, H, D - R]
    x_rot = x_rot * cos + _rotate_half(x_rot) * sin  # [T, H, R]
    return torch.cat((x_rot, x_pass), dim=-1)  # [T, H, D]
