"""ModelConfig: the Qwen3-Next architecture as read from an HF `config.json`.

Only what the forward needs is kept; every field is validated on construction with a
message that names the field, the constraint and the value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import ConfigError

FULL_ATTENTION = "full_attention"
LINEAR_ATTENTION = "linear_attention"
SUPPORTED_MODEL_TYPES = ("qwen3_next",)


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]  # "full_attention" | "linear_attention", one per layer
    # full attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 0.25  # Qwen3-Next rotates a quarter of each head
    attention_bias: bool = False
    # linear attention (Gated DeltaNet)
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel_dim: int = 4
    # feed-forward
    intermediate_size: int = 5632  # dense MLP layers (mlp_only_layers, or num_experts == 0)
    num_experts: int = 512
    num_experts_per_tok: int = 10
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512  # 0: no shared expert
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()
    # misc
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 32768
    eos_token_ids: tuple[int, ...] = ()
    bos_token_id: int | None = None
    source: str = field(default="<config>", compare=False)  # where it was read from, for messages

    def __post_init__(self) -> None:
        positive = (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
            "decoder_sparse_step",
            "max_position_embeddings",
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                self._fail(name, "a positive integer", value)
        for name in (
            "intermediate_size",
            "num_experts",
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "num_experts_per_tok",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                self._fail(name, "a non-negative integer", value)
        if len(self.layer_types) != self.num_hidden_layers:
            self._fail(
                "layer_types",
                f"{self.num_hidden_layers} entries (num_hidden_layers)",
                f"{len(self.layer_types)} entries",
            )
        for i, kind in enumerate(self.layer_types):
            if kind not in (FULL_ATTENTION, LINEAR_ATTENTION):
                self._fail(f"layer_types[{i}]", f"'{FULL_ATTENTION}' or '{LINEAR_ATTENTION}'", kind)
        if self.num_attention_heads % self.num_key_value_heads:
            self._fail(
                "num_key_value_heads",
                f"a divisor of num_attention_heads ({self.num_attention_heads})",
                self.num_key_value_heads,
            )
        if self.linear_num_value_heads % self.linear_num_key_heads:
            self._fail(
                "linear_num_key_heads",
                f"a divisor of linear_num_value_heads ({self.linear_num_value_heads})",
                self.linear_num_key_heads,
            )
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            self._fail("partial_rotary_factor", "in (0, 1]", self.partial_rotary_factor)
        if self.rotary_dim % 2:
            self._fail(
                "partial_rotary_factor",
                f"head_dim * factor even (head_dim {self.head_dim})",
                self.partial_rotary_factor,
            )
        if self.rope_theta <= 0:
            self._fail("rope_theta", "> 0", self.rope_theta)
        if self.rms_norm_eps <= 0:
            self._fail("rms_norm_eps", "> 0", self.rms_norm_eps)
        if self.hidden_act != "silu":
            self._fail("hidden_act", "'silu'", self.hidden_act)
        for i in self.mlp_only_layers:
            if not 0 <= i < self.num_hidden_layers:
                self._fail(
                    "mlp_only_layers", f"layer indices in [0, {self.num_hidden_layers})", list(self.mlp_only_layers)
                )
        if self.num_experts > 0 and not 0 < self.num_experts_per_tok <= self.num_experts:
            self._fail("num_experts_per_tok", f"in [1, num_experts={self.num_experts}]", self.num_experts_per_tok)
        if any(self.is_moe_layer(i) for i in range(self.num_hidden_layers)) and self.moe_intermediate_size <= 0:
            self._fail("moe_intermediate_size", "> 0 when a layer is sparse", self.moe_intermediate_size)
        if any(not self.is_moe_layer(i) for i in range(self.num_hidden_layers)) and self.intermediate_size <= 0:
            self._fail("intermediate_size", "> 0 when a layer is dense", self.intermediate_size)
        for eos in self.eos_token_ids:
            if not 0 <= eos < self.vocab_size:
                self._fail("eos_token_id", f"ids in [0, vocab_size={self.vocab_size})", eos)

    def _fail(self, name: str, expected: str, found: Any) -> None:
        raise ConfigError(f"{self.source}: field '{name}': expected {expected}, found {found!r}")

    # -- derived ---------------------------------------------------------------------------
    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def full_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == FULL_ATTENTION)

    @property
    def linear_attention_layers(self) -> tuple[int, ...]:
        return tuple(i for i, kind in enumerate(self.layer_types) if kind == LINEAR_ATTENTION)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        return 2 * self.linear_key_dim + self.linear_value_dim  # q, k and v go through the conv

    def is_moe_layer(self, layer: int) -> bool:
        """Same rule as transformers: sparse unless listed in mlp_only_layers or off the sparse step."""
        return (
            layer not in self.mlp_only_layers and self.num_experts > 0 and (layer + 1) % self.decoder_sparse_step == 0
        )

    # -- reading -----------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "<config>") -> ModelConfig:
        if raw.get("model_type") not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: field 'model_type': expected one of {list(SUPPORTED_MODEL_TYPES)}, "
                f"found {raw.get('model_type')!r}"
            )
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"):
            if name not in raw:
                raise ConfigError(f"{source}: field '{name}': required, missing")
        num_layers = raw["num_hidden_layers"]
        layer_types = raw.get("layer_types")
        if layer_types is None:
            interval = raw.get("full_attention_interval", 4)
            if not isinstance(interval, int) or interval <= 0:
                raise ConfigError(
                    f"{source}: field 'full_attention_interval': expected a positive integer, found {interval!r}"
                )
            layer_types = [LINEAR_ATTENTION if (i + 1) % interval else FULL_ATTENTION for i in range(num_layers)]
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ConfigError(f"{source}: field 'rope_parameters.rope_type': expected 'default', found {rope_type!r}")
        rope_theta = rope.get("rope_theta", raw.get("rope_theta", 10000.0))
        partial = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 0.25))
        eos = raw.get("eos_token_id")
        eos_ids = () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos)
        num_heads = raw["num_attention_heads"]
        head_dim = raw.get("head_dim") or raw["hidden_size"] // num_heads
        keys = {f for f in cls.__dataclass_fields__}
        kwargs = {k: v for k, v in raw.items() if k in keys}
        kwargs.update(
            layer_types=tuple(layer_types),
            head_dim=head_dim,
            rope_theta=float(rope_theta),
            partial_rotary_factor=float(partial),
            mlp_only_layers=tuple(raw.get("mlp_only_layers") or ()),
            eos_token_ids=eos_ids,
            num_key_value_heads=raw.get("num_key_value_heads") or num_heads,
            source=source,
        )
        return cls(**kwargs)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"{path}: expected a config.json, found no such file") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}: expected JSON, {exc.msg}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a JSON object, found {type(raw).__name__}")
        return cls.from_dict(raw, source=str(path))
