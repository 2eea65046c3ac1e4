"""The engine on a CUDA device: the same greedy tokens as on the CPU through both attention
backends (the Triton kernel compiled for the device, not interpreted), both decode paths and the
offload expert cache, which copies experts from pinned host memory into device slots; and the
Triton decode-attention kernel against the torch path on the device.

Skipped where no GPU is: CI has none. docs/benchmarks.md ("On a GPU") says when they last ran on
one and what they found.
"""

from __future__ import annotations

import pytest
import torch

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from tests.engine._reference import serve_waves, write_reference

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MODEL = "hybrid_moe_shared_gqa"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("hybrid")
    write_reference(MODEL, path)
    return path


def _serve(checkpoint, **options) -> tuple[list[list[int]], Engine]:
    engine = Engine(EngineConfig(model=str(checkpoint), max_running_requests=4, kv_tokens=2048, **options))
    return serve_waves(engine), engine


@pytest.fixture(scope="module")
def on_cpu(checkpoint) -> list[list[int]]:
    return _serve(checkpoint, device="cpu")[0]


@pytest.mark.parametrize(
    "options",
    [
        dict(attention_backend="torch"),
        dict(attention_backend="triton"),
        dict(attention_backend="triton", forward_path="reference"),
        dict(attention_backend="triton", moe_backend="offload", moe_cache_size=6),
    ],
    ids=["torch", "triton", "triton-reference", "triton-offload"],
)
def test_cuda_serves_the_cpu_tokens(checkpoint, on_cpu, options):
    tokens, engine = _serve(checkpoint, device="cuda", **options)
    assert engine.device.type == "cuda"
    assert engine.attention.name == options["attention_backend"]
    assert tokens == on_cpu
    if options.get("moe_backend") == "offload":
        stats = engine.expert_cache_stats()
        assert stats.misses > 0 and stats.bytes_copied > 0  # experts really crossed into device slots


def test_triton_kernel_matches_torch_on_the_device():
    from engine.kernels.decode_attention import decode_attention
    from engine.model.attention_backend import TorchAttention
    from engine.model.forward_batch import ForwardBatch, RequestSlice

    gen = torch.Generator().manual_seed(0)
    for lens, hq, hkv, d, block in [
        ([5, 1, 70], 4, 2, 16, 16),
        ([33], 8, 8, 24, 64),
        ([3, 129], 6, 1, 32, 32),
        ([4000, 17, 2500, 1], 16, 2, 128, 64),  # contexts of many blocks, a production head size
    ]:
        num_slots = sum(lens) + 7
        perm = torch.randperm(num_slots, generator=gen)  # scattered slots, as a paged pool hands them out
        reqs, used = [], 0
        for i, n in enumerate(lens):
            reqs.append(RequestSlice([1], n - 1, perm[used : used + n], i))
            used += n
        batch = ForwardBatch.build(reqs, device="cuda")
        q = torch.randn(len(lens), hq, d, generator=gen).cuda()
        k_buf = torch.randn(num_slots, hkv, d, generator=gen).cuda()
        v_buf = torch.randn(num_slots, hkv, d, generator=gen).cuda()
        out = torch.full((len(lens), hq, d), float("nan"), device="cuda")
        got = decode_attention(q, k_buf, v_buf, batch.kv_slots, batch.kv_indptr, d**-0.5, block_n=block)
        out.copy_(got)
        want = TorchAttention("cuda").decode(q.double(), k_buf.double(), v_buf.double(), batch, d**-0.5)
        assert not out.isnan().any()
        rel = (out.double() - want).norm() / want.norm()
        assert rel < 1e-5, (lens, hq, hkv, d, rel.item())
