"""The Qwen3-Next hybrid decoder: embeddings, decoder layers, final norm, LM head.

Module and parameter names follow transformers' `Qwen3NextForCausalLM` (minus the expert
weights, which live in the `ExpertProvider`), so a checkpoint's state dict maps one to one.
Hidden states are flat over the batch: [T, H] with T the new tokens of every request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model.attention import GatedAttention
from engine.model.attention_backend import TorchAttention
from engine.model.config import FULL_ATTENTION, ModelConfig
from engine.model.experts import ExpertProvider
from engine.model.forward_batch import ForwardBatch
from engine.model.gated_deltanet import GatedDeltaNet
from engine.model.mlp import MLP
from engine.model.moe import SparseMoE
from engine.model.norm import RMSNorm
from engine.model.rotary import RotaryEmbedding

if TYPE_CHECKING:  # engine.model.fast imports this module
    from engine.model.fast import FastLayers


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, experts: ExpertProvider) -> None:
        super().__init__()
        self.is_full_attention = config.layer_types[layer] == FULL_ATTENTION
        if self.is_full_attention:
            self.self_attn = GatedAttention(config, layer)
        else:
            self.linear_attn = GatedDeltaNet(config, layer)
        self.mlp: SparseMoE | MLP
        if config.is_moe_layer(layer):
            self.mlp = SparseMoE(
                layer,
                config.hidden_size,
                config.num_experts,
                config.num_experts_per_tok,
                config.norm_topk_prob,
                config.shared_expert_intermediate_size,
                experts,
            )
        else:
            self.mlp = MLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        batch: ForwardBatch,
        kv_pool: KVPool,
        state_pool: StatePool,
        backend: TorchAttention,
    ) -> torch.Tensor:
        h = self.input_layernorm(x)  # [T, H]
        if self.is_full_attention:
            h = self.self_attn(h, cos, sin, batch, kv_pool, backend)  # [T, H]
        else:
            h = self.linear_attn(h, batch, state_pool)  # [T, H]
        x = x + h  # [T, H]
        out: torch.Tensor = x + self.mlp(self.post_attention_layernorm(x))  # [T, H]
        return out


class Backbone(nn.Module):
    """transformers' `Qwen3NextModel`: held as `.model` so the parameter names match."""

    def __init__(self, config: ModelConfig, experts: ExpertProvider) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i, experts) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Qwen3NextForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, experts: ExpertProvider) -> None:
        super().__init__()
        self.config = config
        self.experts = experts
        self.model = Backbone(config, experts)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(config.head_dim, config.rotary_dim, config.rope_theta)
        self.fast_layers: FastLayers | None = None  # set by engine.model.fast.use_fast_layers

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.config.tie_word_embeddings else self.lm_head.weight

    @torch.inference_mode()
    def forward(
        self, batch: ForwardBatch, kv_pool: KVPool, state_pool: StatePool, backend: TorchAttention
    ) -> torch.Tensor:
        """Logits float32: [B, V] for the last new token of each request, or [T, V] if the batch asked for all."""
        if self.fast_layers is not None:  # decode, prefill, extend and mixed batches alike
            return self.fast_layers.forward(batch, kv_pool, state_pool, backend)
        self.experts.begin_step()
        x = self.model.embed_tokens(batch.input_ids)  # [T, H]
        cos, sin = self.rotary.cos_sin(batch.positions, x.dtype)  # [T, R] each
        for layer in self.model.layers:
            x = layer(x, cos, sin, batch, kv_pool, state_pool, backend)  # [T, H]
        if batch.logits_indices.shape[0] != x.shape[0]:
            x = x[batch.logits_indices]  # [B, H]
        x = self.model.norm(x)  # [B or T, H]
        return torch.nn.functional.linear(x, self.lm_head_weight).float()  # [B or T, V]
