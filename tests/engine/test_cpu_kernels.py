"""The engine's C kernel for Gated DeltaNet's decode (engine/kernels/gdn_recurrent.c) against the torch
ops it replaces, and what the engine does where it cannot be built."""

from __future__ import annotations

import logging

import pytest
import torch

from engine import SamplingParams
from engine.errors import EngineError
from engine.kernels import cpu as cpu_kernels
from engine.model.fast import use_fast_layers
from engine.model.fast.gated_deltanet import GdnLayer
from engine.model.fast.step import Step
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from tests.engine._reference import write_reference


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("hybrid")
    write_reference("hybrid_moe_shared_gqa", path)
    return path


@pytest.fixture
def kernels_from_env(monkeypatch):
    """Each test reads TOKDRIFT_CPU_KERNELS / CC afresh, and leaves the next test a fresh load."""
    cpu_kernels.reset()
    yield monkeypatch
    cpu_kernels.reset()


class _Pool:
    def __init__(self, conv, rec):
        self.conv, self.rec = conv, rec

    def buffers(self, layer):
        return self.conv, self.rec


def test_the_kernel_builds_here():
    """CI's machines have a C compiler: the kernel must build there, or every test below compares
    the torch ops with themselves."""
    cpu_kernels.reset()
    assert cpu_kernels.load() is not None, cpu_kernels.why_not()


@pytest.mark.parametrize(
    "prefix_lens, new_lens",
    [([5], [1]), ([3, 0, 9, 1], [1, 1, 1, 1]), ([0, 0], [1, 1]), ([0], [37]), ([12, 0, 4], [5, 1, 70])],
    ids=["decode-batch1", "decode-batch4-one-fresh", "decode-all-fresh", "prefill", "mixed-extend"],
)
def test_the_kernel_matches_the_torch_ops(checkpoint, prefix_lens, new_lens):
    """Decode batches, a prefill (the reference runs the chunked delta rule there) and a batch of
    appends with a decoding request among them, on states already in the pool."""
    _kernel_against_torch_ops(checkpoint, prefix_lens, new_lens)


@pytest.mark.parametrize("dv", [16, 48, 80])
def test_the_head_major_extend_matches_the_torch_ops(tmp_path, dv):
    """Value heads a multiple of 16 wide take an extend head by head (16-float vectors, blocks of 64
    columns, then 48, 32 or 16): a prefill, and appends beside a decoding request."""
    write_reference("hybrid_moe_shared_gqa", tmp_path, linear_value_head_dim=dv, linear_key_head_dim=12)
    _kernel_against_torch_ops(tmp_path, [0], [37])
    _kernel_against_torch_ops(tmp_path, [12, 0, 4], [5, 1, 70])


def _kernel_against_torch_ops(checkpoint, prefix_lens, new_lens):
    model = load_model(checkpoint)
    assert use_fast_layers(model) is None
    fast = model.fast_layers
    layer = next(m for _, m, _, _ in fast.layers if isinstance(m, GdnLayer))
    assert layer.kernel is not None, cpu_kernels.why_not()
    gen = torch.Generator().manual_seed(1)
    n, hidden = sum(new_lens), model.config.hidden_size
    slots = [7, 2, 5, 0][: len(prefix_lens)]  # out of order, as a pool hands them out
    batch = ForwardBatch.build(
        [
            RequestSlice([1] * t, p, list(range(100 * b, 100 * b + p + t)), s)
            for b, (p, t, s) in enumerate(zip(prefix_lens, new_lens, slots))
        ]
    )
    step = Step.plan(batch, model.rotary, torch.float32, None)
    conv = torch.randn(8, layer.conv_dim, layer.conv_weight.shape[1] - 1, generator=gen)
    rec = torch.randn(8, layer.hv, layer.dk, layer.dv, generator=gen) * 0.1
    x, h = torch.randn(n, hidden, generator=gen), torch.randn(n, hidden, generator=gen)
    # one head whose log decay falls below the floor (softplus(a + 200) ~ 200): its state is forgotten
    with torch.no_grad():
        layer.dt_bias[0] = 200.0
    pools = {name: _Pool(conv.clone(), rec.clone()) for name in ("c", "torch")}
    got = layer(x, h, step, None, pools["c"], None)
    kernel, layer.kernel = layer.kernel, None
    try:
        want = layer(x, h, step, None, pools["torch"], None)
    finally:
        layer.kernel = kernel
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(pools["c"].conv, pools["torch"].conv, rtol=0, atol=0)  # copies only
    torch.testing.assert_close(pools["c"].rec, pools["torch"].rec, rtol=1e-4, atol=1e-5)
    untouched = [s for s in range(8) if s not in slots]
    assert torch.equal(pools["c"].rec[untouched], rec[untouched])


def test_a_slot_out_of_range_is_an_error_not_a_write(checkpoint):
    model = load_model(checkpoint)
    use_fast_layers(model)
    fast = model.fast_layers
    layer = next(m for _, m, _, _ in fast.layers if isinstance(m, GdnLayer))
    batch = ForwardBatch.build([RequestSlice([1], 2, [0, 1, 2], 9)])
    step = Step.plan(batch, model.rotary, torch.float32, None)
    pool = _Pool(torch.zeros(4, layer.conv_dim, 3), torch.zeros(4, layer.hv, layer.dk, layer.dv))
    with pytest.raises(EngineError, match="state slot out of range"):
        layer(
            torch.zeros(1, model.config.hidden_size), torch.zeros(1, model.config.hidden_size), step, None, pool, None
        )


def _tokens(checkpoint) -> tuple[list[list[int]], Engine]:
    engine = Engine(EngineConfig(model=str(checkpoint), device="cpu", kv_tokens=512, max_running_requests=3))
    requests = [
        engine.add_request([3 + i, 1, 4, 1, 5][: 2 + i], SamplingParams(max_tokens=9, temperature=0, ignore_eos=True))
        for i in range(3)
    ]
    while engine.has_work():
        engine.step()
    return [list(r.output_ids) for r in requests], engine


def test_the_engine_serves_the_same_tokens_without_the_kernel(checkpoint, kernels_from_env, caplog):
    with caplog.at_level(logging.INFO, logger="engine"):
        with_c, engine = _tokens(checkpoint)
    assert engine.model.fast_layers.layers[0][1].kernel is not None
    assert (
        "Forward path: fast; C kernels: gdn_recurrent.c (2 of 2 linear-attention layers), moe_decode.c (3 of 3 MoE layers)"
        in caplog.text
    )
    kernels_from_env.setenv("TOKDRIFT_CPU_KERNELS", "0")
    cpu_kernels.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="engine"):
        without, engine = _tokens(checkpoint)
    assert engine.model.fast_layers.layers[0][1].kernel is None
    assert "Forward path: fast; torch ops (C kernels: switched off by TOKDRIFT_CPU_KERNELS=0)" in caplog.text
    assert with_c == without


def test_a_failed_build_falls_back_to_torch_ops_and_says_why(checkpoint, kernels_from_env, tmp_path):
    kernels_from_env.setenv("TOKDRIFT_KERNEL_CACHE", str(tmp_path / "cache"))  # nothing built there yet
    kernels_from_env.setenv("CC", "/bin/false")
    assert cpu_kernels.load() is None
    assert "the build failed: /bin/false failed" in cpu_kernels.why_not()
    tokens, engine = _tokens(checkpoint)
    assert engine.model.fast_layers.kernel_note.startswith("torch ops (C kernels: the build failed")
    assert all(len(t) == 9 for t in tokens)
    assert not list((tmp_path / "cache").glob("*"))  # no half-built library left behind


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("rows", [2, 3, 5, 8])
@pytest.mark.parametrize("k, n", [(512, 1552), (37, 1029), (16, 1040), (130, 17)])
def test_small_gemm_matches_torch_mm(rows, k, n, threads):
    """Every shape the loops split differently: columns past the last full vector, rows of the
    weight past the last full block, blocks of rows fewer than a vector's registers; the columns
    shared out among 1-3 threads (17 columns: fewer vectors than threads)."""
    lib = cpu_kernels.load()
    assert lib is not None, cpu_kernels.why_not()
    gen = torch.Generator().manual_seed(rows * k + n)
    x, w = torch.randn(rows, k, generator=gen), torch.randn(k, n, generator=gen)
    out = torch.full((rows, n), float("nan"))
    assert lib.small_gemm(rows, k, n, x.data_ptr(), k, w.data_ptr(), n, out.data_ptr(), n, threads) == 0
    torch.testing.assert_close(out, x.double().mm(w.double()).float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rule", [cpu_kernels.INTEL_RULE, cpu_kernels.AMD_RULE], ids=["intel", "amd"])
def test_the_projections_a_cpus_rule_names_take_small_gemm_at_its_rows(rule, monkeypatch):
    """Intel's rule: the wide projections at 2-8 rows; AMD's: every projection at 1-8 rows. Either
    way a product gives what torch.mm gives, in the kernel's rows and out of them."""
    from engine.model.checkpoint import default_checkpoint

    monkeypatch.setattr(cpu_kernels, "small_gemm_rule", lambda: rule)
    model = load_model(
        str(default_checkpoint())
    )  # the test checkpoints' projections are narrower than the Intel rule takes
    use_fast_layers(model)
    fast = model.fast_layers
    products = [
        getattr(part, name) for _, mixer, _, ffn in fast.layers for part in (mixer, ffn) for name in part.PRODUCTS
    ]
    named = [p for p in products if p.weight_t.shape[1] >= rule.min_columns]
    assert named and fast.small_gemm_products == len(named) == (9 if rule.min_columns else len(products))
    assert all(p.rows is not None and p.row_range == (rule.min_rows, rule.max_rows) for p in named)
    assert f"small_gemm.c ({len(named)} projections at {rule.min_rows}-{rule.max_rows} rows)" in fast.kernel_note
    gen = torch.Generator().manual_seed(0)
    for linear in (named[0], named[-1]):
        for rows in (1, 4, 8, 9):  # 9 stays with torch.mm, and 1 too on Intel
            x = torch.randn(rows, linear.weight_t.shape[0], generator=gen)
            residual = torch.randn(rows, linear.weight_t.shape[1], generator=gen)
            torch.testing.assert_close(linear(x), x.mm(linear.weight_t), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(linear.plus(residual, x), residual + x.mm(linear.weight_t), rtol=1e-5, atol=1e-5)


def test_the_default_model_serves_the_same_tokens_with_and_without_the_kernels(kernels_from_env):
    """The default checkpoint, whose projections take small_gemm at a few rows (on Intel the wide
    ones at batch 2-8, on AMD all at 1-8): greedy tokens of a batch of 6 that shrinks as requests
    finish, with the kernels and with torch ops alone."""
    from engine.model.checkpoint import default_checkpoint

    prompts = [[(7 * i + j) % 250 + 3 for j in range(5 + 3 * i)] for i in range(6)]

    def serve() -> tuple[list[list[int]], Engine]:
        engine = Engine(
            EngineConfig(model=str(default_checkpoint()), device="cpu", kv_tokens=1024, max_running_requests=6)
        )
        requests = [
            engine.add_request(p, SamplingParams(max_tokens=4 + 2 * i, temperature=0, ignore_eos=True))
            for i, p in enumerate(prompts)
        ]
        while engine.has_work():
            engine.step()
        return [list(r.output_ids) for r in requests], engine

    with_c, engine = serve()
    assert engine.model.fast_layers.small_gemm_products > 0
    kernels_from_env.setenv("TOKDRIFT_CPU_KERNELS", "0")
    cpu_kernels.reset()
    without, engine = serve()
    assert engine.model.fast_layers.small_gemm_products == 0
    assert with_c == without


@pytest.mark.parametrize("tokens", [1, 3, 8, 9])
@pytest.mark.parametrize("config", ["hybrid_moe_shared_gqa", "moe_no_shared_tied", "default"])
def test_moe_in_c_matches_the_torch_ops(tmp_path, config, tokens):
    """The router, the experts over the tokens that picked them, the shared expert and the residual:
    two test models (with and without a shared expert, top-2 renormalised and top-3 not) and the
    default checkpoint, whose experts are wide enough for the register tiles; 9 tokens stay with
    torch."""
    from engine.model.checkpoint import default_checkpoint
    from engine.model.fast.moe import MoeLayer

    if config == "default":
        path = default_checkpoint()
    else:
        path = tmp_path / config
        write_reference(config, path)
    model = load_model(str(path))
    use_fast_layers(model)
    moe = next(f for _, _, _, f in model.fast_layers.layers if isinstance(f, MoeLayer))
    assert moe.kernel is not None
    gen = torch.Generator().manual_seed(tokens)
    hidden = model.config.hidden_size
    x, h = torch.randn(tokens, hidden, generator=gen), torch.randn(tokens, hidden, generator=gen)
    got = moe(x, h)
    kernel, moe.kernel = moe.kernel, None
    try:
        want = moe(x, h)
    finally:
        moe.kernel = kernel
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if tokens > cpu_kernels.MOE_DECODE_MAX_TOKENS:
        return
    threads, p = torch.get_num_threads(), moe.proj(h)
    one = moe._in_c(x, h, p)
    try:  # experts shared out among threads: the same sums in the same order, the same bits
        for n in (2, 3):
            torch.set_num_threads(n)
            assert torch.equal(moe._in_c(x, h, p), one)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("rows, dim", [(1, 512), (8, 64), (3, 33)])
def test_rms_norm_matches_torch(rows, dim):
    from engine.model.norm import rms_norm

    lib = cpu_kernels.load()
    assert lib is not None, cpu_kernels.why_not()
    gen = torch.Generator().manual_seed(dim)
    x, scale = torch.randn(rows, dim, generator=gen) * 3, torch.randn(dim, generator=gen)
    out = torch.full_like(x, float("nan"))
    assert lib.rms_norm(rows, dim, x.data_ptr(), dim, scale.data_ptr(), 1e-6, out.data_ptr(), dim) == 0
    torch.testing.assert_close(out, rms_norm(x, scale, 1e-6), rtol=1e-5, atol=1e-6)


def _attention_by_torch(q, k_buf, v_buf, kv_indptr, kv_slots, scale):
    """Each request's softmax(scale q K^T) V over its own context, a query head h reading K/V head h // r."""
    r = q.shape[1] // k_buf.shape[1]
    out = []
    for b in range(q.shape[0]):
        slots = kv_slots[kv_indptr[b] : kv_indptr[b + 1]]
        k = k_buf[slots].repeat_interleave(r, dim=1).transpose(0, 1)  # [Hq, L, D]
        v = v_buf[slots].repeat_interleave(r, dim=1).transpose(0, 1)  # [Hq, L, D]
        p = torch.softmax((q[b, :, None, :] @ k.transpose(1, 2)) * scale, dim=-1)  # [Hq, 1, L]
        out.append((p @ v)[:, 0])  # [Hq, D]
    return torch.stack(out)


@pytest.mark.parametrize(
    "hq, hkv, d", [(8, 2, 64), (4, 2, 16), (2, 2, 24), (6, 3, 80), (4, 1, 48), (4, 4, 32), (2, 1, 130)]
)
@pytest.mark.parametrize("lens", [[1], [7, 300, 1, 33, 64]], ids=["one", "ragged"])
@pytest.mark.parametrize("threads", [1, 2])
def test_paged_attention_matches_torch(hq, hkv, d, lens, threads):
    """Decode attention read in place from scattered pool slots: grouped heads, head sizes a multiple
    of 16 (vectors, blocks of 64 then 48/32/16 columns) and not (scalar), contexts of 1 to 300."""
    lib = cpu_kernels.load()
    assert lib is not None, cpu_kernels.why_not()
    gen = torch.Generator().manual_seed(d + len(lens))
    num_slots = 1024
    k_buf, v_buf = torch.randn(num_slots, hkv, d, generator=gen), torch.randn(num_slots, hkv, d, generator=gen)
    kv_slots = torch.randperm(num_slots, generator=gen)[: sum(lens)]
    kv_indptr = torch.tensor([0, *lens]).cumsum(0)
    qk = torch.randn(len(lens), hq + 1, d, generator=gen) * 2  # q heads inside a wider row, as the layer's
    q = qk[:, :hq]
    scale = d**-0.5
    out = torch.full((len(lens), hq, d), float("nan"))
    scores = torch.empty(threads * hq // hkv * max(lens))
    rc = lib.paged_attention(
        *(len(lens), hq, hkv, d, scale, q.data_ptr(), q.stride(0)),
        *(k_buf.data_ptr(), v_buf.data_ptr(), num_slots, kv_indptr.data_ptr(), kv_slots.data_ptr()),
        *(scores.data_ptr(), out.data_ptr(), threads),
    )
    assert rc == 0
    torch.testing.assert_close(out, _attention_by_torch(q, k_buf, v_buf, kv_indptr, kv_slots, scale))


def test_paged_attention_refuses_a_slot_out_of_range():
    lib = cpu_kernels.load()
    k_buf = v_buf = torch.zeros(4, 1, 16)
    q, out, scores = torch.zeros(1, 2, 16), torch.zeros(1, 2, 16), torch.zeros(4)
    kv_slots, kv_indptr = torch.tensor([0, 4]), torch.tensor([0, 2])
    args = (q.data_ptr(), 32, k_buf.data_ptr(), v_buf.data_ptr(), 4, kv_indptr.data_ptr(), kv_slots.data_ptr())
    assert lib.paged_attention(1, 2, 1, 16, 0.25, *args, scores.data_ptr(), out.data_ptr(), 1) == 2
    assert torch.equal(out, torch.zeros(1, 2, 16))


def test_decode_attention_reads_the_pool_in_place_through_the_kernel():
    """The default checkpoint's attention layers take the kernel at decode; the engine's tokens with
    and without it are held equal by test_the_default_model_serves_the_same_tokens_…"""
    from engine.model.checkpoint import default_checkpoint
    from engine.model.fast.attention import AttentionLayer

    model = load_model(str(default_checkpoint()))
    use_fast_layers(model)
    layers = [m for _, m, _, _ in model.fast_layers.layers if isinstance(m, AttentionLayer)]
    assert layers and all(m.kernel is not None for m in layers)
    assert "paged_attention.c (2 of 2 full-attention layers)" in model.fast_layers.kernel_note


def test_an_extend_with_no_prefix_reads_its_new_kv_instead_of_gathering_them():
    """A prefill's context is its own new tokens: the backend reads the K/V the layer just computed
    (the same values the pool holds) and gathers only for requests with a prefix."""
    from engine.model.attention_backend import TorchAttention

    gen = torch.Generator().manual_seed(5)
    hq, hkv, d = 4, 2, 16
    batch = ForwardBatch.build(
        [RequestSlice([1] * 6, 0, list(range(6)), 0), RequestSlice([1] * 3, 4, [9, 8, 7, 6, 10, 11, 12], 1)]
    )
    q = torch.randn(9, hq, d, generator=gen)
    k_new, v_new = torch.randn(9, hkv, d, generator=gen), torch.randn(9, hkv, d, generator=gen)
    k_buf, v_buf = torch.randn(16, hkv, d, generator=gen), torch.randn(16, hkv, d, generator=gen)
    k_buf[batch.new_kv_slots], v_buf[batch.new_kv_slots] = k_new, v_new  # as the layer writes them
    backend = TorchAttention("cpu")
    gathered = backend.extend(q, k_buf, v_buf, batch, d**-0.5)
    read = backend.extend(q, k_buf, v_buf, batch, d**-0.5, k_new, v_new)
    torch.testing.assert_close(read, gathered, rtol=1e-6, atol=1e-6)
    k_buf[:6] = 0  # the first request's slots: no longer read
    torch.testing.assert_close(backend.extend(q, k_buf, v_buf, batch, d**-0.5, k_new, v_new), read)
    assert not torch.allclose(backend.extend(q, k_buf, v_buf, batch, d**-0.5)[:6], read[:6])
