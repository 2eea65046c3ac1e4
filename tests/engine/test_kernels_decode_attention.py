"""The Triton decode-attention kernel agrees with the torch path (run on the CPU through TRITON_INTERPRET=1)."""

import importlib.util
import json
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
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, cwd=root, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    worst = float(proc.stdout.split("MAXDIFF")[1])
    assert worst < 1e-5


LLM_SCRIPT = textwrap.dedent("""
    import json
    import sys
    from engine import LLM, SamplingParams

    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True)
    runs = {}
    for backend in ("torch", "triton"):
        llm = LLM(sys.argv[1], attention_backend=backend, max_model_len=64)
        assert llm.attention.name == backend
        runs[backend] = llm.generate([[3, 1, 4, 1, 5, 9, 2, 6]], params)[0].token_ids
    print("TOKENS" + json.dumps(runs))
""")


def test_llm_decodes_through_the_triton_backend(tmp_path):
    from tests.engine._reference import write_reference

    write_reference("hybrid_moe_shared_gqa", tmp_path)
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", LLM_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.split("TOKENS")[1])
    assert len(runs["torch"]) == 6
    assert runs["triton"] == runs["torch"]
