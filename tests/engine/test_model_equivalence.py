"""The engine's model gives transformers' Qwen3NextForCausalLM logits, however the work is split,
through the reference layers and through the fast path (engine.model.fast)."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.model.attention_backend import TorchAttention
from engine.model.fast import use_fast_layers
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from tests.engine._reference import CONFIGS, make_pools, write_reference

ATOL = 1e-4


@pytest.fixture(
    scope="module",
    params=[(name, path) for name in sorted(CONFIGS) for path in ("reference", "fast")],
    ids=lambda p: "-".join(p),
)
def pair(request, tmp_path_factory):
    """(transformers model, our model, checkpoint dir, token ids, decode path) for one config."""
    name, forward_path = request.param
    path = tmp_path_factory.mktemp(name)
    reference = write_reference(name, path)
    ours = load_model(path)
    if forward_path == "fast":
        assert use_fast_layers(ours) is None
    ids = torch.randint(0, CONFIGS[name]["vocab_size"], (150,), generator=torch.Generator().manual_seed(1))
    return reference, ours, path, ids.tolist(), forward_path


@pytest.fixture(scope="module")
def reference_logits(pair):
    reference, _, _, ids, _ = pair
    with torch.no_grad():
        return reference(torch.tensor([ids])).logits[0]  # [150, V]


def _run(model, pools, slices, all_logits=True):
    return model(ForwardBatch.build(slices, return_all_logits=all_logits), *pools, TorchAttention())


def test_full_prefill_matches(pair, reference_logits):
    _, ours, _, ids, _ = pair
    logits = _run(ours, make_pools(ours.config), [RequestSlice(ids, 0, range(len(ids)), 0)])
    assert logits.shape == reference_logits.shape
    torch.testing.assert_close(logits, reference_logits, atol=ATOL, rtol=0)


def test_chunked_prefill_carries_kv_and_state(pair, reference_logits):
    _, ours, _, ids, _ = pair
    pools = make_pools(ours.config)
    # uneven chunks: one token, one past the 64-token delta-rule chunk, scattered KV slots
    bounds = [0, 37, 38, 110, 150]
    slots = torch.randperm(400)[:150]
    parts = [_run(ours, pools, [RequestSlice(ids[s:e], s, slots[:e], 2)]) for s, e in zip(bounds, bounds[1:])]
    torch.testing.assert_close(torch.cat(parts), reference_logits, atol=ATOL, rtol=0)


def test_token_by_token_decode_after_prefill(pair, reference_logits):
    _, ours, _, ids, _ = pair
    pools = make_pools(ours.config)
    out = [_run(ours, pools, [RequestSlice(ids[:90], 0, range(90), 1)], all_logits=False)]
    for t in range(90, 120):
        out.append(_run(ours, pools, [RequestSlice(ids[t : t + 1], t, range(t + 1), 1)], all_logits=False))
    torch.testing.assert_close(torch.cat(out), reference_logits[89:120], atol=ATOL, rtol=0)


def test_batched_requests_match_one_at_a_time(pair):
    """Three requests of different lengths share each forward (extend, then batched decode)."""
    reference, ours, _, ids, _ = pair
    prompts = [ids[:20], ids[30:95], ids[100:101]]
    total = [p + ids[140:146] for p in prompts]  # each continues with the same 6 tokens
    pools = make_pools(ours.config)
    base = [0, 150, 300]  # request b's token p lives in slot base[b] + p
    last = _run(
        ours,
        pools,
        [RequestSlice(p, 0, range(base[b], base[b] + len(p)), b) for b, p in enumerate(prompts)],
        all_logits=False,
    )
    steps = [last]
    for t in range(6):
        slices = [
            RequestSlice([ids[140 + t]], len(p) + t, range(base[b], base[b] + len(p) + t + 1), b)
            for b, p in enumerate(prompts)
        ]
        steps.append(_run(ours, pools, slices, all_logits=False))
    got = torch.stack(steps, dim=1)  # [B, 7, V]
    for b, seq in enumerate(total):
        with torch.no_grad():
            want = reference(torch.tensor([seq])).logits[0, len(prompts[b]) - 1 :]  # [7, V]
        torch.testing.assert_close(got[b], want, atol=ATOL, rtol=0)


def test_a_mixed_batch_of_decodes_and_extends_matches_one_at_a_time(pair):
    """Continuous batching: two requests decode a token each, a third appends 40 tokens onto its
    prefix and a fourth starts from a one-token prompt, in one forward."""
    reference, ours, _, ids, _ = pair
    pools = make_pools(ours.config)
    base = [0, 150, 300, 450]
    first = [ids[:30], ids[30:70], ids[70:80]]
    _run(ours, pools, [RequestSlice(p, 0, range(base[b], base[b] + len(p)), b) for b, p in enumerate(first)])
    new = [[ids[120]], [ids[121]], ids[80:120], [ids[122]]]
    prefix = [len(p) for p in first] + [0]
    slices = [RequestSlice(n, prefix[b], range(base[b], base[b] + prefix[b] + len(n)), b) for b, n in enumerate(new)]
    got = _run(ours, pools, slices, all_logits=False)  # [4, V]
    for b, n in enumerate(new):
        seq = (first[b] if b < 3 else []) + n
        with torch.no_grad():
            want = reference(torch.tensor([seq])).logits[0, -1]  # [V]
        torch.testing.assert_close(got[b], want, atol=ATOL, rtol=0)


def test_greedy_generation_gives_the_same_tokens(pair):
    reference, _, path, ids, forward_path = pair
    prompt = ids[:20]
    llm = LLM(str(path), attention_backend="torch", max_model_len=64, forward_path=forward_path)
    assert llm.engine.forward_path == forward_path
    out = llm.generate([prompt], SamplingParams(max_tokens=12, temperature=0, ignore_eos=True))[0]
    with torch.no_grad():
        want = reference.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0
        )[0, 20:].tolist()
    assert out.token_ids == want
    assert out.finish_reason == "length"
    assert out.prompt_token_ids == prompt


def test_state_slot_snapshot_forks_a_shared_prefix(pair):
    """What the radix cache does: keep a prefix's KV slots, copy its state slot, continue two ways."""
    reference, ours, _, ids, _ = pair
    prefix, left, right = ids[:50], ids[50:60], ids[60:75]
    kv, states = make_pools(ours.config)
    _run(ours, (kv, states), [RequestSlice(prefix, 0, range(50), 0)], all_logits=False)
    states.copy_slot(0, 3)
    # slot 0 continues with `left` in KV slots 50..59; slot 3 with `right` in 200..214, same prefix slots
    got = _run(
        ours,
        (kv, states),
        [
            RequestSlice(left, 50, list(range(60)), 0),
            RequestSlice(right, 50, list(range(50)) + list(range(200, 215)), 3),
        ],
    )
    with torch.no_grad():
        want_left = reference(torch.tensor([prefix + left])).logits[0, 50:]  # [10, V]
        want_right = reference(torch.tensor([prefix + right])).logits[0, 50:]  # [15, V]
    torch.testing.assert_close(got, torch.cat((want_left, want_right)), atol=ATOL, rtol=0)


def test_state_pool_reset_and_copy_touch_only_their_slot(pair):
    _, ours, _, ids, _ = pair
    kv, states = make_pools(ours.config)
    _run(ours, (kv, states), [RequestSlice(ids[:10], 0, range(10), 1)])
    assert all(rec[1].abs().sum() > 0 for rec in states.recurrent)
    states.copy_slot(1, 2)
    assert all(torch.equal(rec[1], rec[2]) for rec in states.recurrent)
    assert all(torch.equal(conv[1], conv[2]) for conv in states.conv)
    states.reset(1)
    assert all(rec[1].abs().sum() == 0 and conv[1].abs().sum() == 0 for rec, conv in zip(states.recurrent, states.conv))
    assert all(rec[2].abs().sum() > 0 for rec in states.recurrent)


def test_one_token_prompts_start_from_a_zero_state(pair):
    """A batch of one-token prompts is decode-shaped: the state slots they get must read as zeros,
    whatever an earlier request left in them."""
    reference, ours, _, ids, _ = pair
    kv, states = make_pools(ours.config)
    _run(ours, (kv, states), [RequestSlice(ids[:30], 0, range(30), 1), RequestSlice(ids[30:50], 0, range(30, 50), 2)])
    got = _run(
        ours,
        (kv, states),
        [RequestSlice(ids[60:61], 0, [100], 1), RequestSlice(ids[70:71], 0, [101], 2)],
        all_logits=False,
    )
    with torch.no_grad():
        want = torch.cat([reference(torch.tensor([[t]])).logits[0] for t in (ids[60], ids[70])])  # [2, V]
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)
    # alone (batch 1, which the fast path updates in its slot), in a slot that now holds a state
    alone = _run(ours, (kv, states), [RequestSlice(ids[70:71], 0, [102], 1)], all_logits=False)
    torch.testing.assert_close(alone, want[1:], atol=ATOL, rtol=0)
