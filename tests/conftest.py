"""Fixtures shared across packages. Imports stay inside fixtures: replay/, diagnostics/ and
reports/ tests run without torch."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The default checkpoint's architecture, shrunk: 4 layers of both kinds, 8 experts, byte vocab.
TINY_OVERRIDES = dict(
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=16,
    linear_value_head_dim=16,
    num_experts=8,
    moe_intermediate_size=32,
    shared_expert_intermediate_size=32,
    intermediate_size=128,
    num_hidden_layers=4,
    full_attention_interval=2,
    max_position_embeddings=4096,
)


@pytest.fixture(scope="session")
def excerpt() -> Path:
    """The seed excerpt (a real report, time-only prefix), as shipped in examples/."""
    return ROOT / "examples" / "freetoken-excerpt.log"


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A 4-layer checkpoint of both layer kinds, small enough for many engine runs per test."""
    import torch
    from safetensors.torch import save_file

    from engine.model.checkpoint import DEFAULT_CONFIG, _random_tensors
    from engine.model.config import ModelConfig

    tiny = dict(DEFAULT_CONFIG, **TINY_OVERRIDES)
    out = tmp_path_factory.mktemp("tiny")
    config = ModelConfig.from_dict(tiny, source="tiny")
    tensors = _random_tensors(config, seed=1)
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(tiny))
    torch.set_num_threads(1)
    return str(out)
