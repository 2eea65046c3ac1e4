"""Small random Qwen3-Next checkpoints written by transformers, the reference for the engine tests."""

from __future__ import annotations

import torch

from engine.memory.kv_pool import KVPool
from engine.memory.state_pool import StatePool
from engine.model.config import ModelConfig

# Each config differs from the others in what it exercises.
CONFIGS = {
    # both layer types (full attention every 2nd layer), MoE with shared expert, GQA 4:2,
    # grouped value heads in linear attention (4 value heads over 2 key heads), a dense layer
    "hybrid_moe_shared_gqa": dict(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        full_attention_interval=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=24,
        mlp_only_layers=[0],
    ),
    # MoE without shared expert, unnormalised top-k, sparse every 2nd layer, MHA, tied embeddings,
    # explicit layer_types, wider value heads than key heads, full partial rotary
    "moe_no_shared_tied": dict(
        vocab_size=300,
        hidden_size=48,
        intermediate_size=40,
        num_hidden_layers=3,
        layer_types=["full_attention", "linear_attention", "linear_attention"],
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=24,
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=3,
        num_experts=6,
        num_experts_per_tok=3,
        moe_intermediate_size=8,
        shared_expert_intermediate_size=0,
        norm_topk_prob=False,
        decoder_sparse_step=2,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5},
    ),
}


def write_reference(name: str, out_dir, seed: int = 0, **overrides):
    """Save a random transformers model of config `name` (with `overrides`) to `out_dir`; return the
    model (float32, eval)."""
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(seed)
    model = Qwen3NextForCausalLM(Qwen3NextConfig(**{**CONFIGS[name], **overrides})).eval()
    with torch.no_grad():  # move every weight off its init value, norms included (they start at 0 or 1)
        for pname, p in model.named_parameters():
            if not pname.endswith("A_log"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out_dir)
    return model


def make_pools(
    config: ModelConfig, num_kv_slots: int = 512, num_state_slots: int = 4, dtype: torch.dtype = torch.float32
) -> tuple[KVPool, StatePool]:
    kv = KVPool(num_kv_slots, config.full_attention_layers, config.num_key_value_heads, config.head_dim, dtype=dtype)
    states = StatePool(
        num_state_slots,
        config.linear_attention_layers,
        config.linear_conv_dim,
        config.linear_conv_kernel_dim,
        config.linear_num_value_heads,
        config.linear_key_head_dim,
        config.linear_value_head_dim,
    )
    return kv, states


def serve_waves(engine, seed: int = 3) -> list[list[int]]:
    """Greedy tokens of two waves of six requests through `engine` (a hybrid_moe_shared_gqa
    checkpoint): decode batches that grow and shrink, and a second wave whose prompts hit the
    first's cached prefix. The engine's integrity is checked after."""
    from engine import SamplingParams

    gen = torch.Generator().manual_seed(seed)
    system = torch.randint(0, CONFIGS["hybrid_moe_shared_gqa"]["vocab_size"], (40,), generator=gen).tolist()
    outputs = []
    for wave in range(2):
        requests = []
        for i, (extra, max_tokens) in enumerate([(1, 9), (17, 14), (5, 5), (30, 11), (2, 7), (0, 12)]):
            tail = torch.randint(0, 300, (extra,), generator=gen).tolist()
            prompt = (system if i % 2 else system[:7]) + tail if extra or i % 2 else [wave + 3]
            requests.append(
                engine.add_request(prompt, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True))
            )
        while engine.has_work():
            engine.step()
        outputs += [list(r.output_ids) for r in requests]
    engine.check_integrity()
    return outputs
