"""The built-in default checkpoint: small, seeded random weights, HF layout, written on demand.

`write_default_checkpoint(dir, seed)` writes config.json + model.safetensors; the same seed
writes the same bytes. `overrides` changes config fields for a variant of the same architecture
(larger experts for the expert-thrash validation, say); the default checkpoint never has any. `default_checkpoint()` returns the cached copy
($TOKDRIFT_HOME/default-v<N>, else ~/.cache/tokdrift/default-v<N>), writing it on first use
into a temporary directory renamed into place, so a crash or a concurrent writer never
leaves a half-written checkpoint behind.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from engine.model.config import ModelConfig
from engine.model.experts import ResidentExperts

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1  # bump when DEFAULT_CONFIG or the initialisation changes

DEFAULT_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": 272,  # 256 bytes + 3 specials, padded to a multiple of 16
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "full_attention_interval": 4,  # layers 3 and 7 are full attention, the rest Gated DeltaNet
    "num_attention_heads": 8,
    "num_key_value_heads": 2,  # GQA, 4 query heads per KV head
    "head_dim": 64,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,  # two value heads per key head, as in the real model
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 16,  # enough experts for an expert cache to have something to evict
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 256,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [0],  # one dense layer, so both feed-forward kinds run
    "intermediate_size": 1024,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": False,
    "eos_token_id": 256,
    "bos_token_id": None,
    "pad_token_id": None,
    "torch_dtype": "float32",
}


def write_default_checkpoint(out_dir: str | Path, seed: int = 0, overrides: dict[str, Any] | None = None) -> Path:
    """Write the default checkpoint, with `overrides` applied to its config, into `out_dir`
    (created); returns `out_dir`."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = dict(DEFAULT_CONFIG, **(overrides or {}))
    config = ModelConfig.from_dict(raw, source="default checkpoint" + (f" with {overrides}" if overrides else ""))
    tensors = _random_tensors(config, seed)
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
    logger.info(
        "wrote the default checkpoint (seed %d, %d parameters) to %s",
        seed,
        sum(t.numel() for t in tensors.values()),
        out_dir,
    )
    return out_dir


def default_checkpoint_dir() -> Path:
    home = os.environ.get("TOKDRIFT_HOME")
    base = Path(home) if home else Path.home() / ".cache" / "tokdrift"
    return base / f"default-v{CHECKPOINT_VERSION}"


def default_checkpoint() -> Path:
    """The cached default checkpoint, written on first use."""
    final = default_checkpoint_dir()
    if (final / "config.json").exists() and (final / "model.safetensors").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        write_default_checkpoint(tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / "config.json").exists():  # not a concurrent writer winning: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _random_tensors(config: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Every tensor the loader expects, in HF names, per-expert layout, from one seeded generator."""
    from engine.model.qwen3_next import Qwen3NextForCausalLM

    with torch.device("meta"):
        model = Qwen3NextForCausalLM(config, ResidentExperts())
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    h, i = config.hidden_size, config.moe_intermediate_size
    for layer in range(config.num_hidden_layers):
        if config.is_moe_layer(layer):
            for e in range(config.num_experts):
                prefix = f"model.layers.{layer}.mlp.experts.{e}"
                shapes[f"{prefix}.gate_proj.weight"] = (i, h)
                shapes[f"{prefix}.up_proj.weight"] = (i, h)
                shapes[f"{prefix}.down_proj.weight"] = (h, i)
    gen = torch.Generator().manual_seed(seed)
    return {name: _init(name, shape, gen).contiguous() for name, shape in sorted(shapes.items())}


def _init(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    if name.endswith("linear_attn.A_log"):
        return torch.empty(shape).uniform_(1.0, 16.0, generator=gen).log_()  # decay rates as in the reference init
    if name.endswith("linear_attn.dt_bias"):
        return torch.empty(shape).uniform_(0.5, 1.5, generator=gen)
    if name.endswith("linear_attn.norm.weight"):
        return 1.0 + 0.1 * torch.randn(shape, generator=gen)  # gated norm: scale around 1
    if name.endswith("norm.weight"):
        return 0.1 * torch.randn(shape, generator=gen)  # zero-centred norms: offset around 0
    if name.endswith("conv1d.weight"):
        return torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
    if name == "model.embed_tokens.weight":
        return torch.randn(shape, generator=gen)
    # linear layers [out, in]: unit-variance outputs, so logits and routing are not flat
    return torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
