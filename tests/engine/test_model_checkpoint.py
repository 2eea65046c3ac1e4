"""The built-in default checkpoint: deterministic, small, cached atomically."""

from __future__ import annotations

import torch

from engine.model import checkpoint as ckpt
from engine.model.attention_backend import TorchAttention
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from tests.engine._reference import make_pools


def _first_logits(path):
    model = load_model(path)
    batch = ForwardBatch.build([RequestSlice(list(b"hello"), 0, range(5), 0)])
    return model(batch, *make_pools(model.config), TorchAttention())


def test_same_seed_writes_same_bytes_and_other_seed_differs(tmp_path):
    a = ckpt.write_default_checkpoint(tmp_path / "a", seed=0)
    b = ckpt.write_default_checkpoint(tmp_path / "b", seed=0)
    c = ckpt.write_default_checkpoint(tmp_path / "c", seed=1)
    for name in ("config.json", "model.safetensors"):
        assert (a / name).read_bytes() == (b / name).read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    torch.testing.assert_close(_first_logits(a), _first_logits(b), atol=0, rtol=0)
    assert not torch.equal(_first_logits(a), _first_logits(c))


def test_default_checkpoint_is_small_hybrid_moe_with_gqa(tmp_path):
    model = load_model(ckpt.write_default_checkpoint(tmp_path))
    config = model.config
    num_params = sum(p.numel() for p in model.parameters()) + model.experts.num_parameters
    assert 10_000_000 < num_params < 50_000_000
    assert config.full_attention_layers and config.linear_attention_layers
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.num_experts > config.num_experts_per_tok and config.shared_expert_intermediate_size > 0
    assert config.vocab_size >= 259 and config.eos_token_ids == (256,)


def test_default_checkpoint_is_written_once_into_tokdrift_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKDRIFT_HOME", str(tmp_path))
    path = ckpt.default_checkpoint()
    assert path == tmp_path / f"default-v{ckpt.CHECKPOINT_VERSION}"
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert ckpt.default_checkpoint() == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary directory left behind


def test_overrides_write_a_variant_of_the_default_architecture(tmp_path):
    from safetensors import safe_open

    path = ckpt.write_default_checkpoint(tmp_path, overrides={"moe_intermediate_size": 32})
    config = load_model(path).config
    assert config.moe_intermediate_size == 32 and config.hidden_size == ckpt.DEFAULT_CONFIG["hidden_size"]
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        assert tuple(f.get_slice("model.layers.1.mlp.experts.0.down_proj.weight").get_shape()) == (512, 32)
