"""Full-attention layer: gated attention with q/k RMSNorm, partial RoPE and GQA.

The q projection carries, per head, the query and an output gate side by side:
`q_proj(x)` viewed as [T, Hq, 2D] is [query | gate]; the attention output is scaled by
sigmoid(gate) before `o_proj`. K/V are written into the KV pool at the new tokens' slots
and read back through the batch's slot ids.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.memory.kv_pool import KVPool
from engine.model.attention_backend import TorchAttention
from engine.model.config import ModelConfig
from engine.model.forward_batch import ForwardBatch
from engine.model.norm import RMSNorm
from engine.model.rotary import apply_rotary


class GatedAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.scale = self.head_dim**-0.5
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.num_heads * self.head_dim * 2, bias=bias)
        self.k_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        kv_pool: KVPool,
        backend: TorchAttention,
    ) -> torch.Tensor:
        num_tokens = x.shape[0]
        q_gate = self.q_proj(x).view(num_tokens, self.num_heads, 2 * self.head_dim)  # [T, Hq, 2D]
        q, gate = q_gate.chunk(2, dim=-1)  # [T, Hq, D], [T, Hq, D]
        gate = gate.reshape(num_tokens, self.num_heads * self.head_dim)  # [T, Hq*D]
        q = self.q_norm(q)  # [T, Hq, D]
        k = self.k_norm(self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim))  # [T, Hkv, D]
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)  # [T, Hkv, D]
        q = apply_rotary(q, cos, sin)  # [T, Hq, D]
        k = apply_rotary(k, cos, sin)  # [T, Hkv, D]
        kv_pool.write(self.layer, batch.new_kv_slots, k, v)
        k_buf, v_buf = kv_pool.buffers(self.layer)  # [S, Hkv, D] each
        out = backend.forward(q, k_buf, v_buf, batch, self.scale)  # [T, Hq, D]
        out = out.reshape(num_tokens, -1) * torch.sigmoid(gate)  # [T, Hq*D]
        y: torch.Tensor = self.o_proj(out)  # [T, H]
        return y
