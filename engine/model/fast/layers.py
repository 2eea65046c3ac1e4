"""`FastLayers`: the model's forward through the fast path's layers, the norms between them and the
head; which C kernels it took, for the startup log."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from engine.kernels import cpu as cpu_kernels
from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model.attention_backend import TorchAttention
from engine.model.fast.attention import AttentionLayer
from engine.model.fast.gated_deltanet import GdnLayer
from engine.model.fast.mlp import MlpLayer
from engine.model.fast.moe import MoeLayer
from engine.model.fast.step import Step
from engine.model.forward_batch import ForwardBatch
from engine.model.moe import SparseMoE
from engine.model.norm import rms_norm
from engine.model.qwen3_next import DecoderLayer, Qwen3NextForCausalLM


def use_fast_layers(model: Qwen3NextForCausalLM) -> str | None:
    """Take every forward of `model` through `FastLayers` from now on; why not, where it cannot. The
    fast package knows the model, not the other way round: the model only holds what this sets."""
    reason = unsupported(model)
    if reason is None and model.fast_layers is None:
        model.fast_layers = FastLayers(model)
    return reason


def unsupported(model: Qwen3NextForCausalLM) -> str | None:
    """Why `model` cannot take the fast path, or None where it can."""
    if model.model.embed_tokens.weight.device.type == "meta":
        return "the model's weights are not loaded"
    return None


class Layer(NamedTuple):
    """One decoder layer on the fast path: x + mixer(norm(x)), then x + ffn(norm(x))."""

    in_norm: torch.Tensor  # [H] float32, the input norm's scale
    mixer: AttentionLayer | GdnLayer
    post_norm: torch.Tensor  # [H] float32, the post-attention norm's scale
    ffn: MoeLayer | MlpLayer


class FastLayers:
    """The model's layers on the fast path, for every forward: decode, prefill, extend and mixed batches."""

    def __init__(self, model: Qwen3NextForCausalLM) -> None:
        self.model = model
        mc = model.config
        self.eps = mc.rms_norm_eps
        self.experts = model.experts
        self.layers: list[Layer] = []
        for layer in model.model.layers:
            assert isinstance(layer, DecoderLayer)  # what Backbone holds (an nn.ModuleList gives Modules)
            if layer.is_full_attention:
                mixer: AttentionLayer | GdnLayer = AttentionLayer(layer.self_attn)
            else:
                mixer = GdnLayer(layer.linear_attn)
            if isinstance(layer.mlp, SparseMoE):
                ffn: MoeLayer | MlpLayer = MoeLayer(layer.mlp, model.experts, mc.moe_intermediate_size)
            else:
                ffn = MlpLayer(layer.mlp)
            self.layers.append(
                Layer(layer.input_layernorm.scale.detach(), mixer, layer.post_attention_layernorm.scale.detach(), ffn)
            )
        self.final_norm = model.model.norm.scale.detach()
        self.small_gemm_products = self._small_gemm()
        scales = [t for in_norm, _, post_norm, _ in self.layers for t in (in_norm, post_norm)] + [self.final_norm]
        fp32_cpu = all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in scales)
        self._rms_norm_lib = cpu_kernels.load() if fp32_cpu else None
        self.kernel_note = self._kernel_note()  # for the startup log

    def _kernel_note(self) -> str:
        """Which of the C kernels (engine/kernels/) this model's steps take, or why none."""
        gdn = [m for _, m, _, _ in self.layers if isinstance(m, GdnLayer)]
        moe = [f for _, _, _, f in self.layers if isinstance(f, MoeLayer)]
        attention = [m for _, m, _, _ in self.layers if isinstance(m, AttentionLayer)]
        gdn_in_c = sum(m.kernel is not None for m in gdn)
        moe_in_c = sum(f.kernel is not None for f in moe)
        attention_in_c = sum(m.kernel is not None for m in attention)
        lo, hi, _ = cpu_kernels.small_gemm_rule()
        parts = [
            f"gdn_recurrent.c ({gdn_in_c} of {len(gdn)} linear-attention layers)",
            f"moe_decode.c ({moe_in_c} of {len(moe)} MoE layers)",
            f"small_gemm.c ({self.small_gemm_products} projections at {lo}-{hi} rows)",
            f"rms_norm.c ({'on' if self._rms_norm_lib is not None else 'off'})",
            f"paged_attention.c ({attention_in_c} of {len(attention)} full-attention layers)",
        ]
        if gdn_in_c or moe_in_c or attention_in_c or self._rms_norm_lib:
            return "C kernels: " + ", ".join(parts)
        if not self.layers or self.final_norm.device.type != "cpu":
            return "torch ops (not on a CPU)"
        if self.final_norm.dtype != torch.float32:
            return "torch ops (the C kernels are float32 only)"
        return f"torch ops (C kernels: {cpu_kernels.why_not()})"

    def _small_gemm(self) -> int:
        """Give the projections that this CPU's rule names (cpu_kernels.small_gemm_rule: where it was
        measured faster than MKL) the C kernel small_gemm for a few rows; how many got it."""
        lib = cpu_kernels.load()
        rule = cpu_kernels.small_gemm_rule()
        count = 0
        for _, mixer, _, ffn in self.layers:
            for part in (mixer, ffn):
                for name in part.PRODUCTS:
                    linear = getattr(part, name)
                    if (
                        lib is not None
                        and linear.weight_t.device.type == "cpu"
                        and linear.weight_t.dtype == torch.float32
                        and linear.weight_t.is_contiguous()
                        and linear.weight_t.shape[1] >= rule.min_columns
                    ):
                        setattr(
                            part, name, linear._replace(rows=lib.small_gemm, row_range=(rule.min_rows, rule.max_rows))
                        )
                        count += 1
        return count

    def _norm(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """rms_norm(x, scale, eps): through the C kernel on a CPU in float32 (one call instead of six ops)."""
        lib = self._rms_norm_lib
        if lib is None or x.dtype != torch.float32 or not x.is_contiguous() or x.device.type != "cpu":
            return rms_norm(x, scale, self.eps)
        out = torch.empty_like(x)
        lib.rms_norm(
            x.shape[0], x.shape[1], x.data_ptr(), x.stride(0), scale.data_ptr(), self.eps, out.data_ptr(), out.stride(0)
        )
        return out

    @torch.inference_mode()
    def forward(
        self, batch: ForwardBatch, kv_pool: KVPool, state_pool: StatePool, backend: TorchAttention
    ) -> torch.Tensor:
        """Logits float32: [B, V] for the last new token of each request, or [T, V] if the batch asked for all."""
        model, norm = self.model, self._norm
        self.experts.begin_step()
        x = model.model.embed_tokens(batch.input_ids)  # [T, H]
        step = Step.plan(batch, model.rotary, x.dtype, backend)
        for in_norm, mixer, post_norm, ffn in self.layers:
            x = mixer(x, norm(x, in_norm), step, kv_pool, state_pool, backend)  # [T, H], residual added
            x = ffn(x, norm(x, post_norm))  # [T, H], residual added
        if batch.logits_indices.shape[0] != x.shape[0]:
            x = x[batch.logits_indices]  # [B, H]
        x = norm(x.contiguous(), self.final_norm)  # [B or T, H]
        return F.linear(x, model.lm_head_weight).float()  # [B or T, V]
