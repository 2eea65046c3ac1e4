from pathlib import Path

import pytest

from replay import Call, MaterializeConfig, Materializer, TraceError, materialize, probe_prompt
from replay.materialize import PROBE_TEXT_MARKER


def _call(ids, num_in, num_out=20, session="s", turn=0, t=0.0, reasoning=None):
    return Call(
        t=t,
        session=session,
        turn=turn,
        hash_ids=tuple(ids),
        input_tokens=num_in,
        output_tokens=num_out,
        reasoning_tokens=reasoning,
    )


def _common(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def test_shared_hash_ids_give_shared_token_prefix_and_nothing_more():
    cfg = MaterializeConfig(block_size=16)
    a = materialize(_call([1, 2, 3, 4], 64), cfg)
    b = materialize(_call([1, 2, 9, 10], 64, session="other"), cfg)
    assert len(a.token_ids) == len(b.token_ids) == 64
    assert a.token_ids[:32] == b.token_ids[:32]
    assert _common(a.token_ids, b.token_ids) < 36  # diverges right at block 2 (a chance equal token or so)
    again = materialize(_call([1, 2, 3, 4], 64), cfg)
    assert again.token_ids == a.token_ids  # deterministic


def test_append_extends_the_previous_prompt():
    cfg = MaterializeConfig(block_size=8)
    first = materialize(_call([5, 6, 7], 20), cfg)  # last block partial
    second = materialize(_call([5, 6, 8, 9, 10], 37, turn=1, t=3.0), cfg)
    assert second.token_ids[:16] == first.token_ids[:16]
    assert len(second.token_ids) == 37


def test_missing_blocks_are_filled_with_call_unique_content():
    cfg = MaterializeConfig(block_size=4)
    a = materialize(_call([1], 12, session="a"), cfg)
    b = materialize(_call([1], 12, session="b"), cfg)
    assert a.token_ids[:4] == b.token_ids[:4]
    assert a.token_ids[4:] != b.token_ids[4:]


def test_token_ids_respect_vocab_reserved_ids_and_the_probe_id():
    cfg = MaterializeConfig(block_size=16, vocab_size=260, reserved_ids=frozenset({256, 257, 258, 0}))
    prompt = materialize(_call(range(100), 1600), cfg)
    used = set(prompt.token_ids)
    assert max(used) < 260
    assert not used & {0, 256, 257, 258}
    assert cfg.probe_id == 259 and 259 not in used
    assert len(used) > 200  # spread over the vocabulary, not a constant


def test_scale_shrinks_lengths_and_keeps_prefix_structure():
    cfg = MaterializeConfig(block_size=64, scale=0.25)
    assert cfg.block_tokens == 16
    a = materialize(_call([1, 2, 3], 150, num_out=400, reasoning=100), cfg)
    b = materialize(_call([1, 2, 4], 170, num_out=40, session="x"), cfg)
    assert a.num_input_tokens == len(a.token_ids) == round(150 / 4)
    assert a.max_output_tokens == 100 and a.num_reasoning_tokens == 25
    assert a.token_ids[:32] == b.token_ids[:32]  # two shared blocks of 16 scaled tokens
    assert a.token_ids[32] != b.token_ids[32] or a.token_ids[33:36] != b.token_ids[33:36]


def test_max_context_drop_trim_keep_are_counted():
    calls = [_call([1, 2], 100, num_out=10), _call([1, 3, 4, 5], 250, num_out=10), _call([1, 2, 6], 150, num_out=60)]
    for policy, expected in (("drop", (2, 0, 0)), ("trim", (0, 2, 0)), ("keep", (0, 0, 2))):
        m = Materializer(MaterializeConfig(block_size=64, max_context=128, over_limit=policy))
        prompts = [m(c) for c in calls]
        assert (m.num_dropped, m.num_trimmed, m.num_over_limit) == expected
        assert m.num_calls == 3
        if policy == "trim":
            long = prompts[1]
            assert long.num_input_tokens + long.max_output_tokens == 128
            assert long.num_trimmed_tokens == 250 - 118
            unlimited = Materializer(MaterializeConfig(block_size=64))
            unlimited(calls[0])  # the same session before it: calls[1] extends calls[0]
            assert long.token_ids == unlimited(calls[1]).token_ids[:118]
        if policy == "drop":
            assert prompts[0] is not None and prompts[1] is None and prompts[2] is None


def test_probe_shares_no_prefix_with_any_trace_prompt():
    cfg = MaterializeConfig(block_size=16)
    probe = probe_prompt(cfg, 200, 32)
    assert probe.token_ids == probe_prompt(cfg, 200, 32).token_ids
    assert probe.token_ids[0] == cfg.probe_id
    for i in range(50):
        p = materialize(_call([i, i + 1], 32, session=str(i)), cfg)
        assert p.token_ids[0] != probe.token_ids[0]
    assert probe_prompt(cfg, 200, 32, variant=1).token_ids != probe.token_ids


def test_text_mode_shares_text_prefix_and_reserves_the_probe_marker():
    cfg = MaterializeConfig(block_size=16, mode="text")
    a = materialize(_call([1, 2, 3], 48), cfg)
    b = materialize(_call([1, 2, 7], 48, session="z"), cfg)
    ta, tb = a.messages[0]["content"], b.messages[0]["content"]
    assert a.token_ids is None and a.messages[0]["role"] == "user"
    assert len(ta.split()) == 48
    assert ta.split()[:32] == tb.split()[:32] and ta.split()[32:] != tb.split()[32:]
    assert "[" not in ta
    probe = probe_prompt(cfg, 40, 8).messages[0]["content"]
    assert probe.startswith(PROBE_TEXT_MARKER) and len(probe.split()) == 40


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(scale=0), "scale: expected a number > 0, found 0"),
        (dict(over_limit="cut"), "over_limit: expected one of drop, trim, keep, found 'cut'"),
        (dict(mode="ids"), "mode: expected one of tokens, text, found 'ids'"),
        (dict(vocab_size=3, reserved_ids=frozenset({0, 1})), "vocab_size: expected room"),
        (dict(max_context=1), "max_context: expected an integer >= 2"),
    ],
)
def test_config_names_field_constraint_and_value(kwargs, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(")):
        MaterializeConfig(block_size=16, **kwargs)


def test_a_sessions_next_turn_starts_with_its_previous_prompt_verbatim():
    """Traces hash whole blocks, so a turn's last, partial block has a new id in the next turn;
    the materializer still sends the previous prompt again as the next one's exact prefix."""
    from replay.trace import read_trace

    trace = read_trace(Path(__file__).resolve().parents[2] / "examples" / "opencode.jsonl")
    m = Materializer(MaterializeConfig(block_size=trace.header.block_size))
    calls = sorted((c for c in trace.calls if c.session == trace.calls[0].session), key=lambda c: c.turn)
    prompts = [m(c) for c in calls]
    extended = 0
    for prev_call, call, prev, cur in zip(calls, calls[1:], prompts, prompts[1:]):
        if call.hash_ids[: len(prev_call.hash_ids) - 1] == prev_call.hash_ids[:-1]:
            assert len(prev_call.hash_ids) * 16 > prev.num_input_tokens  # the previous last block was partial
            assert cur.token_ids[: len(prev.token_ids)] == prev.token_ids
            extended += 1
        else:  # a compaction starts over: only whole shared blocks are shared
            assert cur.token_ids[: len(prev.token_ids)] != prev.token_ids
    assert extended >= 5
    # A fresh materializer gives the same prompts: the content depends on the trace alone.
    again = Materializer(MaterializeConfig(block_size=trace.header.block_size))
    assert [again(c).token_ids for c in calls] == [p.token_ids for p in prompts]


def test_later_loops_get_new_content_but_keep_what_sessions_share():
    from replay.materialize import shared_block_ids

    calls = [_call([1, 2, 3], 48, session="a"), _call([1, 4, 5], 48, session="b")]
    shared = shared_block_ids(calls)
    assert shared == frozenset({1})
    m = Materializer(MaterializeConfig(block_size=16), shared)
    first = [m(c, loop=0, session_key=f"{c.session}@0").token_ids for c in calls]
    second = [m(c, loop=1, session_key=f"{c.session}@1").token_ids for c in calls]
    assert first == [materialize(c, MaterializeConfig(block_size=16)).token_ids for c in calls]  # loop 0 as ever
    for a, b in zip(first, second):
        assert a[:16] == b[:16]  # the shared block, the same in every loop
        assert a[16:] != b[16:]  # the session's own blocks, new content
    assert second[0][:16] == second[1][:16]  # still shared within the loop


def test_the_block_cache_stays_bounded_over_many_loops_and_the_content_does_not_depend_on_it():
    """Each loop of a replay salts new blocks: a long soak must not keep them all (the driver's
    memory), and a block made again is the same block."""
    from replay.materialize import BLOCK_CACHE_SIZE, _block

    config = MaterializeConfig(block_size=4)
    call = _call(range(64), 4 * 64)
    first = materialize(call, config, salt=1).token_ids
    _block.cache_clear()
    for loop in range(2, 2 + 3 * BLOCK_CACHE_SIZE // 64):
        materialize(call, config, salt=loop)
    assert _block.cache_info().currsize == BLOCK_CACHE_SIZE
    assert materialize(call, config, salt=1).token_ids == first  # evicted long ago, made again alike
