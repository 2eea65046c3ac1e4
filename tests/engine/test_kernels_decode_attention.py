"""The Triton decode-attention kernel agrees with the torch path (run on the CPU through TRITON_INTERPRET=1)."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

SCRIPT = textwrap.dedent("""
    import torch
    from engine.kernels.decode_attention import decode_attention
    from engine.model.attention_backend import TorchAttention
    from engine.model.forward_batch import ForwardBatch, RequestSlice

    torch.manual_seed(0)
    worst = 0.0
    # (context lengths, query heads, kv heads, head dim, block): GQA, MHA, a non-power-of-2 head
    # dim, contexts shorter and longer than a block, more than one block.
    for lens, hq, hkv, d, block in [([5, 1, 70], 4, 2, 16, 16), ([33], 8, 8, 24, 64), ([3, 129], 6, 1, 32, 32)]:
        num_slots = sum(lens) + 7
        perm = torch.randperm(num_slots)  # scattered slots, as a paged pool hands them out
        reqs, used = [], 0
        for i, n in enumerate(lens):
            reqs.append(RequestSlice([1], n - 1, perm[used:used + n], i))
            used += n
        batch = ForwardBatch.build(reqs)
        q = torch.randn(len(lens), hq, d)
        k_buf, v_buf = torch.randn(num_slots, hkv, d), torch.randn(num_slots, hkv, d)
        want = TorchAttention().decode(q, k_buf, v_buf, batch, d ** -0.5)
        got = decode_attention(q, k_buf, v_buf, batch.kv_slots, batch.kv_indptr, d ** -0.5, block_n=block)
        assert got.shape == want.shape, (got.shape, want.shape)
        worst = max(worst, (got - want).abs().max().item())
    print("MAXDIFF", worst)
""")


def test_triton_decode_attention_matches_torch_in_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=root,
                          timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = float(proc.stdout.split("MAXDIFF")[1])
    assert worst < 1e-5
