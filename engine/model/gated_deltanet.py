"""Linear-attention layer: Gated DeltaNet with its short causal conv and gated RMSNorm.

`in_proj_qkvz` output is grouped by key head: for each of the Hk key heads it holds
[q (Dk) | k (Dk) | v (r*Dv) | z (r*Dv)], r = Hv / Hk; `in_proj_ba` likewise [b (r) | a (r)].
q, k, v go through the causal conv (one channel each), then the gated delta rule; z gates
the output norm. Conv window and recurrent state live in the request's state slot.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.memory.state_pool import StatePool
from engine.model import delta_rule
from engine.model.config import ModelConfig
from engine.model.forward_batch import ForwardBatch
from engine.model.norm import GatedRMSNorm


class GatedDeltaNet(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_k_heads = config.linear_num_key_heads
        self.num_v_heads = config.linear_num_value_heads
        self.head_k_dim = config.linear_key_head_dim
        self.head_v_dim = config.linear_value_head_dim
        self.key_dim = config.linear_key_dim
        self.value_dim = config.linear_value_dim
        self.conv_dim = config.linear_conv_dim
        kernel = config.linear_conv_kernel_dim
        hidden = config.hidden_size
        self.conv1d = nn.Conv1d(
            self.conv_dim, self.conv_dim, kernel, groups=self.conv_dim, bias=False, padding=kernel - 1
        )  # only its weight [C, 1, K] is used
        self.in_proj_qkvz = nn.Linear(hidden, 2 * self.key_dim + 2 * self.value_dim, bias=False)
        self.in_proj_ba = nn.Linear(hidden, 2 * self.num_v_heads, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))  # [Hv]
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))  # [Hv]
        self.norm = GatedRMSNorm(self.head_v_dim, config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, state_pool: StatePool) -> torch.Tensor:
        num_tokens = x.shape[0]
        r = self.num_v_heads // self.num_k_heads
        qkvz = self.in_proj_qkvz(x).view(num_tokens, self.num_k_heads, -1)  # [T, Hk, 2Dk + 2rDv]
        ba = self.in_proj_ba(x).view(num_tokens, self.num_k_heads, 2 * r)  # [T, Hk, 2r]
        q, k, v, z = torch.split(
            qkvz, [self.head_k_dim, self.head_k_dim, r * self.head_v_dim, r * self.head_v_dim], dim=-1
        )
        b, a = torch.split(ba, [r, r], dim=-1)  # [T, Hk, r] each
        z = z.reshape(num_tokens, self.num_v_heads, self.head_v_dim)  # [T, Hv, Dv]
        mixed = torch.cat(
            (q.reshape(num_tokens, -1), k.reshape(num_tokens, -1), v.reshape(num_tokens, -1)), dim=-1
        )  # [T, C]
        beta = b.reshape(num_tokens, self.num_v_heads).sigmoid()  # [T, Hv]
        g = -self.A_log.float().exp() * F.softplus(
            a.reshape(num_tokens, self.num_v_heads).float() + self.dt_bias
        )  # [T, Hv] log decay
        conv_buf, rec_buf = state_pool.buffers(self.layer)  # [S, C, K-1], [S, Hv, Dk, Dv]
        weight = self.conv1d.weight[:, 0, :]  # [C, K]
        if batch.is_decode:
            core = self._decode(mixed, g, beta, batch, conv_buf, rec_buf, weight)  # [T, Hv, Dv]
        else:
            core = self._extend(mixed, g, beta, batch, conv_buf, rec_buf, weight)  # [T, Hv, Dv]
        core = self.norm(core, z)  # [T, Hv, Dv]
        out: torch.Tensor = self.out_proj(core.reshape(num_tokens, self.value_dim))  # [T, H]
        return out

    def _split_qkv(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        n = mixed.shape[0]
        q, k, v = torch.split(mixed, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return (
            q.reshape(n, self.num_k_heads, self.head_k_dim),  # [n, Hk, Dk]
            k.reshape(n, self.num_k_heads, self.head_k_dim),  # [n, Hk, Dk]
            v.reshape(n, self.num_v_heads, self.head_v_dim),
        )  # [n, Hv, Dv]

    def _decode(
        self,
        mixed: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        batch: ForwardBatch,
        conv_buf: torch.Tensor,
        rec_buf: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        return self._recurrent(mixed, g, beta, batch.state_slots, batch.prefix_lens, conv_buf, rec_buf, weight)

    def _recurrent(
        self,
        mixed: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        slots: torch.Tensor,
        prefix_lens: Sequence[int],
        conv_buf: torch.Tensor,
        rec_buf: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        """One token each for the requests in `slots` [B] (mixed [B, C], g and beta [B, Hv])."""
        fresh = [b for b, p in enumerate(prefix_lens) if p == 0]
        # index_select / index_copy_ rather than advanced indexing: the same copies without the
        # general gather/scatter machinery (4x cheaper on a [B, Hv, Dk, Dv] state on the CPU)
        conv_state = conv_buf.index_select(0, slots)  # [B, C, K-1]
        rec_state = rec_buf.index_select(0, slots)  # [B, Hv, Dk, Dv]
        if fresh:  # a request with no prefix starts from zeros, whatever its slot held
            conv_state[fresh] = 0
            rec_state[fresh] = 0
        mixed, conv_state = delta_rule.causal_conv_step(mixed, conv_state, weight)  # [B, C], [B, C, K-1]
        q, k, v = self._split_qkv(mixed)
        out, rec_state = delta_rule.recurrent_step(q, k, v, g, beta, rec_state)  # [B, Hv, Dv], [B, Hv, Dk, Dv]
        conv_buf.index_copy_(0, slots, conv_state.to(conv_buf.dtype))  # state slots are distinct
        rec_buf.index_copy_(0, slots, rec_state.to(rec_buf.dtype))
        return out

    def _extend(
        self,
        mixed: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        batch: ForwardBatch,
        conv_buf: torch.Tensor,
        rec_buf: torch.Tensor,
        weight: torch.Tensor,
    ) -> torch.Tensor:
        out = torch.empty(
            mixed.shape[0], self.num_v_heads, self.head_v_dim, dtype=mixed.dtype, device=mixed.device
        )  # [T, Hv, Dv]
        slots = batch.state_slots.tolist()
        ranges = batch.token_ranges()
        # In a mixed batch the requests that decode (one token each) take the recurrent step
        # together, as a decode batch does, rather than one padded chunk each.
        singles = [b for b, (start, end) in enumerate(ranges) if end - start == 1]
        together = singles if len(singles) > 1 else []
        if together:
            at = torch.tensor([ranges[b][0] for b in together], device=mixed.device)  # [B1]
            out[at] = self._recurrent(
                mixed[at],
                g[at],
                beta[at],
                batch.state_slots[together],
                [batch.prefix_lens[b] for b in together],
                conv_buf,
                rec_buf,
                weight,
            )
        for b, (start, end) in enumerate(ranges):
            if b in together:
                continue
            slot, has_prefix = slots[b], batch.prefix_lens[b] > 0
            conv_state = conv_buf[slot] if has_prefix else torch.zeros_like(conv_buf[slot])  # [C, K-1]
            y, conv_buf[slot] = delta_rule.causal_conv(mixed[start:end], conv_state, weight)  # [n, C]
            q, k, v = self._split_qkv(y)
            state = rec_buf[slot] if has_prefix else None  # [Hv, Dk, Dv]
            out[start:end], rec_buf[slot] = delta_rule.chunked(q, k, v, g[start:end], beta[start:end], state)
        return out
