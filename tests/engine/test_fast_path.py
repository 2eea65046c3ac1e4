"""The fast path (engine.model.fast) against the reference layers, inside the engine.

The logits of both paths against transformers are in test_model_equivalence.py; here: the same
greedy tokens through whole engine runs (batches that grow and shrink, prefix-cache hits, an
expert cache that misses and stages), bfloat16, the option (and its old name), and that fusing
shares the weights' memory.
"""

from __future__ import annotations

import logging

import pytest
import torch

from engine.model.fast import use_fast_layers
from engine.model.loader import load_model
from engine.runtime.config import EngineConfig, EngineConfigError
from engine.runtime.engine import Engine
from tests.engine._reference import serve_waves, write_reference


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("hybrid")
    write_reference("hybrid_moe_shared_gqa", path)
    return path


def _serve(checkpoint, forward_path: str, **options) -> list[list[int]]:
    """Greedy tokens of a workload whose decode batches grow and shrink, with shared prefixes."""
    engine = Engine(
        EngineConfig(
            model=str(checkpoint),
            device="cpu",
            max_running_requests=4,
            kv_tokens=2048,
            forward_path=forward_path,
            **options,
        )
    )
    assert engine.forward_path == forward_path
    return serve_waves(engine)


@pytest.mark.parametrize("options", [{}, {"moe_backend": "offload", "moe_cache_size": 3}], ids=["resident", "offload"])
def test_fast_and_reference_paths_give_the_same_tokens(checkpoint, options):
    fast = _serve(checkpoint, "fast", **options)
    assert fast == _serve(checkpoint, "reference", **options)
    assert all(len(out) > 0 for out in fast)


def test_the_forward_path_is_an_option_and_is_logged(checkpoint, caplog):
    with pytest.raises(EngineConfigError, match="forward_path must be one of fast, reference; got 'compiled'"):
        EngineConfig(forward_path="compiled")
    with caplog.at_level(logging.INFO, logger="engine"):
        engine = Engine(EngineConfig(model=str(checkpoint), device="cpu", kv_tokens=256))
    assert "Forward path: fast; " in caplog.text and "forward_path='fast'" in caplog.text  # and the resolved config
    assert engine.model.fast_layers is not None


def test_the_old_name_decode_path_is_still_read_with_a_warning(checkpoint):
    """Scripts and run directories written before the rename name it decode_path."""
    with pytest.warns(FutureWarning, match="engine option decode_path is now named forward_path"):
        config = EngineConfig(model=str(checkpoint), device="cpu", kv_tokens=256, decode_path="reference")
    assert config == EngineConfig(model=str(checkpoint), device="cpu", kv_tokens=256, forward_path="reference")
    engine = Engine(config)
    assert engine.forward_path == "reference" and engine.model.fast_layers is None
    with pytest.warns(FutureWarning), pytest.raises(EngineConfigError, match="forward_path must be one of"):
        EngineConfig(decode_path="compiled")
    with pytest.raises(EngineConfigError, match="decode_path is the old name of forward_path; give one of them"):
        EngineConfig(decode_path="fast", forward_path="reference")
    with pytest.warns(FutureWarning):
        assert EngineConfig(decode_path="reference", forward_path="reference").forward_path == "reference"


def test_fused_weights_share_the_modules_memory(checkpoint):
    model = load_model(checkpoint)
    before = sum(p.numel() for p in model.parameters())
    assert use_fast_layers(model) is None
    assert sum(p.numel() for p in model.parameters()) == before
    layer = model.model.layers[0]
    fused = model.fast_layers.layers[0][1].proj.weight_t  # the linear-attention layer's in_proj
    assert layer.linear_attn.in_proj_qkvz.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert layer.linear_attn.in_proj_ba.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    # and every projection is stored input-major: [out, in] seen through a transpose
    assert layer.linear_attn.out_proj.weight.t().is_contiguous()


def test_decays_never_reach_subnormal_floats():
    """Subnormal floats make a CPU's arithmetic ~100x slower: a decay too small to matter is 0."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from engine.model import delta_rule

    got = delta_rule.decay(torch.tensor([-200.0, -95.0, -64.5, -63.0, -1.0, 0.0]))
    assert got[:3].eq(0).all() and torch.equal(got[3:], torch.tensor([-63.0, -1.0, 0.0]).exp())
    tiny = torch.finfo(torch.float32).tiny

    class Watch(TorchDispatchMode):  # every exp's output (a decay) inspected for subnormal values
        found: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out) if func is torch.ops.aten.exp.default else ():
                if isinstance(t, torch.Tensor) and t.is_floating_point() and ((t != 0) & (t.abs() < tiny)).any():
                    self.found.append(str(func))
            return out

    # a head decaying fast over a long extend: exp(-3 * 30) is subnormal, exp(-3 * 63) underflows
    gen = torch.Generator().manual_seed(0)
    length, heads, dim = 150, 2, 8
    q, k = torch.randn(length, heads, dim, generator=gen), torch.randn(length, heads, dim, generator=gen)
    v, beta = torch.randn(length, heads, dim, generator=gen), torch.rand(length, heads, generator=gen)
    g = torch.full((length, heads), -3.0)
    with Watch() as watch:
        delta_rule.chunked(q, k, v, g, beta, None)
        delta_rule.recurrent_step(q[:4], k[:4], v[:4], g[:4] * 30, beta[:4], torch.randn(4, heads, dim, dim))
    assert watch.found == []


def test_bfloat16_decode_tracks_the_reference_layers(checkpoint):
    """A bfloat16 model takes the fast path too; its decode logits stay with the reference layers'."""
    from engine.model.attention_backend import TorchAttention
    from engine.model.forward_batch import ForwardBatch, RequestSlice
    from tests.engine._reference import make_pools

    ids = torch.randint(0, 300, (40,), generator=torch.Generator().manual_seed(5)).tolist()
    logits = {}
    for path in ("reference", "fast"):
        model = load_model(checkpoint, dtype="bfloat16")
        if path == "fast":
            assert use_fast_layers(model) is None
        kv, states = make_pools(model.config, dtype=torch.bfloat16)
        run = lambda slices: model(ForwardBatch.build(slices), kv, states, TorchAttention())  # noqa: E731
        run([RequestSlice(ids[:30], 0, range(30), 0), RequestSlice(ids[30:35], 0, range(100, 105), 1)])
        steps = [
            run(
                [
                    RequestSlice([ids[35 + t]], 30 + t, range(31 + t), 0),
                    RequestSlice([ids[36 + t]], 5 + t, list(range(100, 106 + t)), 1),
                ]
            )
            for t in range(4)
        ]
        logits[path] = torch.cat(steps)  # [8, V] float32
    assert logits["fast"].dtype == torch.float32
    # bfloat16 rounds to ~3 digits and the paths sum in different orders: 0.03 apart here, where
    # the logits spread 0.6 (std) and a broken path misses by about that
    torch.testing.assert_close(logits["fast"], logits["reference"], atol=0.08, rtol=0)
