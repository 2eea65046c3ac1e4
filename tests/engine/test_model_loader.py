"""Loading HF-layout checkpoints: layouts accepted, and mismatches named."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine.errors import CheckpointError, ConfigError
from engine.model.attention_backend import TorchAttention
from engine.model.config import ModelConfig
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from tests.engine._reference import make_pools, write_reference

IDS = [5, 17, 3, 200, 99, 41, 7, 250, 12, 64]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ref")
    write_reference("hybrid_moe_shared_gqa", path)
    return path


def _copy(checkpoint, tmp_path, edit=None):
    """A copy of the checkpoint whose tensors went through `edit(dict)`."""
    shutil.copy(checkpoint / "config.json", tmp_path / "config.json")
    tensors = load_file(str(checkpoint / "model.safetensors"))
    if edit:
        edit(tensors)
    save_file(tensors, str(tmp_path / "model.safetensors"))
    return tmp_path


def _logits(model):
    batch = ForwardBatch.build([RequestSlice(IDS, 0, range(len(IDS)), 0)], return_all_logits=True)
    pools = make_pools(model.config, dtype=model.model.embed_tokens.weight.dtype)
    return model(batch, *pools, TorchAttention())


def _assert_same_model(got, want):
    """Bit for bit the same weights, and so the same logits up to float32 rounding: a CPU's BLAS
    may take another path for weights at another memory alignment (on an AMD EPYC VM two loads
    of the same tensors gave logits 3.6e-7 apart after other tests had run in the process)."""
    got_params, want_params = dict(got.named_parameters()), dict(want.named_parameters())
    assert sorted(got_params) == sorted(want_params)
    for name, value in want_params.items():
        assert torch.equal(got_params[name], value), name
    torch.testing.assert_close(_logits(got), _logits(want), atol=1e-6, rtol=1e-5)


def test_missing_tensor_is_named_with_its_shape(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, lambda t: t.pop("model.layers.1.self_attn.k_norm.weight"))
    with pytest.raises(CheckpointError, match=r"missing tensor 'model\.layers\.1\.self_attn\.k_norm\.weight' \[16\]"):
        load_model(path)


def test_missing_expert_is_named(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, lambda t: t.pop("model.layers.2.mlp.experts.3.up_proj.weight"))
    with pytest.raises(CheckpointError, match=r"model\.layers\.2\.mlp\.experts\.3\.up_proj\.weight"):
        load_model(path)


def test_wrong_shape_names_tensor_and_both_shapes(checkpoint, tmp_path):
    def edit(t):
        t["model.layers.0.linear_attn.out_proj.weight"] = torch.zeros(32, 31)

    with pytest.raises(CheckpointError) as err:
        load_model(_copy(checkpoint, tmp_path, edit))
    assert "'model.layers.0.linear_attn.out_proj.weight'" in str(err.value)
    assert "expected shape [32, 32], found [32, 31]" in str(err.value)


def test_unexpected_tensor_is_named(checkpoint, tmp_path):
    def edit(t):
        t["model.layers.0.self_attn.q_proj.weight"] = torch.zeros(4, 4)  # layer 0 is linear attention

    with pytest.raises(CheckpointError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.q_proj\.weight'"):
        load_model(_copy(checkpoint, tmp_path, edit))


def test_mtp_tensors_are_skipped(checkpoint, tmp_path):
    path = _copy(checkpoint, tmp_path, lambda t: t.update({"mtp.fc.weight": torch.zeros(3, 3)}))
    _assert_same_model(load_model(path), load_model(checkpoint))


def test_fused_expert_layout_loads_to_the_same_model(checkpoint, tmp_path):
    def fuse(t):
        for layer in (1, 2, 3):
            p = f"model.layers.{layer}.mlp.experts"
            gate_up = [
                torch.cat((t.pop(f"{p}.{e}.gate_proj.weight"), t.pop(f"{p}.{e}.up_proj.weight"))) for e in range(4)
            ]
            t[f"{p}.gate_up_proj"] = torch.stack(gate_up)  # [E, 2I, H]
            t[f"{p}.down_proj"] = torch.stack([t.pop(f"{p}.{e}.down_proj.weight") for e in range(4)])  # [E, H, I]

    fused = load_model(_copy(checkpoint, tmp_path, fuse))
    _assert_same_model(fused, load_model(checkpoint))


def test_sharded_checkpoint_loads(checkpoint, tmp_path):
    shutil.copy(checkpoint / "config.json", tmp_path / "config.json")
    tensors = load_file(str(checkpoint / "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file))
        weight_map.update({n: file for n in part})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    _assert_same_model(load_model(tmp_path), load_model(checkpoint))


def test_bfloat16_load_tracks_float32(checkpoint):
    want = _logits(load_model(checkpoint))
    got = _logits(load_model(checkpoint, dtype="bfloat16"))
    assert load_model(checkpoint, dtype="bfloat16").model.embed_tokens.weight.dtype == torch.bfloat16
    assert (got - want).abs().max() < 0.1 * want.abs().max()


def test_unknown_dtype_is_refused(checkpoint):
    with pytest.raises(CheckpointError, match="dtype: expected one of"):
        load_model(checkpoint, dtype="int8")


def test_no_weights_file_is_refused(tmp_path, checkpoint):
    shutil.copy(checkpoint / "config.json", tmp_path / "config.json")
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_model(tmp_path)


def _raw(**overrides):
    raw = json.loads(
        json.dumps(
            {
                "model_type": "qwen3_next",
                "vocab_size": 300,
                "hidden_size": 32,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 16,
                "linear_num_key_heads": 2,
                "linear_num_value_heads": 4,
                "num_experts": 4,
                "num_experts_per_tok": 2,
            }
        )
    )
    raw.update(overrides)
    return raw


def test_config_layer_types_follow_full_attention_interval():
    config = ModelConfig.from_dict(_raw(full_attention_interval=2))
    assert config.layer_types == ("linear_attention", "full_attention") * 2
    assert config.full_attention_layers == (1, 3)
    assert ModelConfig.from_dict(_raw()).full_attention_layers == (3,)  # default interval 4


def test_config_sparse_layers_follow_mlp_only_and_sparse_step():
    config = ModelConfig.from_dict(_raw(mlp_only_layers=[0], decoder_sparse_step=2))
    assert [config.is_moe_layer(i) for i in range(4)] == [False, True, False, True]


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_key_value_heads=3), "num_key_value_heads"),
        (dict(model_type="llama"), "model_type"),
        (dict(layer_types=["full_attention"]), "layer_types"),
        (dict(layer_types=["full_attention", "mamba", "full_attention", "full_attention"]), "layer_types[1]"),
        (dict(num_experts_per_tok=9), "num_experts_per_tok"),
        (dict(hidden_act="gelu"), "hidden_act"),
        (dict(rope_parameters={"rope_type": "yarn", "factor": 4.0}), "rope_parameters.rope_type"),
        (dict(hidden_size=0), "hidden_size"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=re.escape(f"ckpt/config.json: field '{field}'")):
        ModelConfig.from_dict(_raw(**overrides), source="ckpt/config.json")
