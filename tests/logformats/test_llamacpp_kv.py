"""llama.cpp's KV cache in its logs: cells idle slots hold, and batches that find no room, read into
steps and events and ranked as suspects."""

import random

import pandas as pd
import pytest

from logformats import Text, parse_log
from tests.logformats import analyze_json, write_log


def test_idle_slots_hold_their_conversations_and_that_is_a_suspect(tmp_path):
    """llama-server keeps a finished request's cells in its slot for prompt caching. Where every slot
    shares one KV buffer (llama.cpp before per-slot streams), a decode attends over them: the tokens
    idle slots hold are read into every decode row, and rank first when decode slows with them."""

    def request(slot, task, n_past, per_ms):
        return [
            f"slot launch_slot_: id  {slot} | task {task} | processing task",
            f"slot print_timing: id  {slot} | task {task} | ",
            "prompt eval time =     100.00 ms /   100 tokens (    1.00 ms per token,  1000.00 tokens per second)",
            f"       eval time =    {per_ms * 64:.2f} ms /    64 tokens (   {per_ms:.2f} ms per token,   "
            f"{1000 / per_ms:.2f} tokens per second)",
            "      total time =    1000.00 ms /   164 tokens",
            f"slot      release: id  {slot} | task {task} | stop processing: n_past = {n_past}, truncated = 0",
            "srv  update_slots: all slots are idle",
        ]

    lines = ["build: 5300 (79e0b68) with cc for x86_64", "main: loading model"]
    task = 0
    for k in range(40):  # slot 0 serves a probe; slots 1..7 fill up with long conversations
        filled = min(k // 5, 7)
        lines += request(0, task, 300, 10.0 * (1 + 0.5 * filled))
        task += 1
        if k % 5 == 4 and filled < 7:
            lines += request(filled + 1, task, 4000, 10.0)
            task += 1
    path = write_log(tmp_path, "shared-kv.log", lines)
    steps = parse_log(path).steps
    decode = steps[steps["phase"] == "decode"]
    assert decode["idle_slot_tokens"].iloc[0] == 0.0
    assert decode["idle_slot_tokens"].max() == 7 * 4000  # the last probes: seven full slots idle beside them
    doc, _ = analyze_json(path)
    assert doc["verdict"] == "engine_age_degradation"
    assert doc["suspects"][0]["name"] == "idle_slot_tokens"
    assert doc["suspects"][0]["evidence"].startswith("KV cells held by idle slots")
    # A soak reads the log in pieces as it grows: what the slots held carries from one to the next
    text = path.read_bytes()
    cut = text.index(b"slot launch_slot_: id  0 | task 30 |")
    first = parse_log(Text(text[:cut], "head"))
    rest = parse_log(Text(text[cut:], "tail"), held=first.held)
    assert first.held == {0: 300.0, **{s: 4000.0 for s in range(1, 6)}}  # five filled by task 30
    pieces = pd.concat([first.steps, rest.steps])
    assert pieces.loc[pieces["phase"] == "decode", "idle_slot_tokens"].tolist() == decode["idle_slot_tokens"].tolist()
    alone = parse_log(Text(text[cut:], "tail")).steps  # without it the tail saw no idle slot at first
    assert alone.loc[alone["phase"] == "decode", "idle_slot_tokens"].iloc[0] == 0.0


@pytest.mark.parametrize(
    "line, kind, size",
    [
        # 0.3.1-0.3.2's server (llama.cpp late 2024), with --log-prefix --log-timestamps
        (
            "0.52.072.487 W srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch "
            "size - try increasing it via the context size or enable defragmentation, i = 0, n_batch = 1024, ret = 1",
            "kv_no_space",
            1024,
        ),
        # 2025's server: the shorter text
        (
            "srv  update_slots: failed to find free space in the KV cache, retrying with smaller batch size, i = 0, "
            "n_batch = 256, ret = 1",
            "kv_no_space",
            256,
        ),
        # early 2024: plain text, the size in its own words
        (
            "update_slots : failed to find free space in the KV cache, retrying with smaller n_batch = 64",
            "kv_no_space",
            64,
        ),
        (
            "0.52.072.500 E srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via "
            "the context size, i = 0, n_batch = 1, ret = 1",
            "kv_full",
            1,
        ),
        ("update_slots : failed to decode the batch, n_batch = 1, ret = 1", "kv_full", 1),
        # the library itself (2025 on), before the server's line
        ("0.10.000.000 W decode: failed to find a memory slot for batch of size 512", "kv_no_space", 512),
    ],
)
def test_kv_cache_without_room_for_a_batch_is_an_event(tmp_path, line, kind, size):
    path = write_log(tmp_path, "kv.log", ["build: 4000 (aaaaaaa) with cc for x86_64", "main: loading model", line])
    parsed = parse_log(path)
    events = parsed.events[parsed.events["kind"].isin(["kv_no_space", "kv_full"])]
    assert events["kind"].tolist() == [kind]
    assert events["limit"].tolist() == [size]
    assert parsed.info.num_unknown_lines == 0


def test_batches_without_room_in_the_kv_cache_rank_as_the_suspect(tmp_path):
    """llama.cpp without KV defragmentation: holes between slots' cells too small for a batch. The
    server halves the batch until it fits (prefill in small pieces), then fails the requests; each
    retry is a `kv_no_space` event, counted over the minute before each sample as a suspect."""
    lines = ["0.00.000.001 I build: 3990 (aaaaaaa) with cc for x86_64", "0.00.000.002 I main: loading model"]
    sec, rng = 10.0, random.Random(7)
    for k in range(120):
        per_ms = (10.0 if k < 60 else 25.0) * rng.uniform(0.9, 1.1)
        prompt = rng.randrange(100, 1500)

        def stamp(at: float) -> str:
            return f"{int(at) // 60}.{int(at) % 60:02d}.{int(at * 1000) % 1000:03d}.000"

        if k >= 60:  # from here on, every request first finds no room for its batch
            lines += [
                f"{stamp(sec)} W srv  update_slots: failed to find free space in the KV cache, retrying "
                f"with smaller batch size - try increasing it via the context size or enable "
                f"defragmentation, i = 0, n_batch = {size}, ret = 1"
                for size in (1024, 512, 256)
            ]
        sec += 0.1 + per_ms * 256 / 1000
        lines += [
            f"{stamp(sec)} I slot launch_slot_: id  {k % 4} | task {k} | processing task",
            f"{stamp(sec)} I slot update_slots: id  {k % 4} | task {k} | new prompt, n_ctx_slot = 2048, "
            f"n_keep = 0, n_prompt_tokens = {prompt}",
            f"{stamp(sec)} I slot update_slots: id  {k % 4} | task {k} | prompt done, n_past = {prompt}, "
            f"n_tokens = {prompt}",
            f"{stamp(sec)} I slot print_timing: id  {k % 4} | task {k} | ",
            "prompt eval time =     100.00 ms /   100 tokens (    1.00 ms per token,  1000.00 tokens per second)",
            f"       eval time =    {per_ms * 256:.2f} ms /   256 tokens (   {per_ms:.2f} ms per token,   "
            f"{1000 / per_ms:.2f} tokens per second)",
            "      total time =    1000.00 ms /   356 tokens",
            f"{stamp(sec)} I slot      release: id  {k % 4} | task {k} | stop processing: n_past = {prompt + 256}, "
            f"truncated = 0",
            f"{stamp(sec)} I srv  update_slots: all slots are idle",
        ]
        sec += 0.5
    path = write_log(tmp_path, "fragmented.log", lines)
    doc, checks = analyze_json(path)
    assert checks["kv_space"]["status"] == "warn"
    assert checks["kv_space"]["detail"].startswith("180 times the KV cache had no room for a batch")
    assert doc["verdict"] == "engine_age_degradation"
    assert doc["suspects"][0]["name"] == "kv_no_space"
    assert "fragmented" in doc["suspects"][0]["evidence"]
