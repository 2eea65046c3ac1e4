"""What a stats window holds, as real vLLM logs showed it: a prefill longer than a window, turns
admitted in every window, a batch draining one request at a time, hours idle, a restart into
another build (docs/diagnostics.md, sections 1-3 and 6)."""

import datetime as dt

import numpy as np

from diagnostics.analysis import analyze
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source

T0 = dt.datetime(2025, 6, 16, 14, 0, 0)


def _vllm(tmp_path, windows, start=T0, name="vllm.log"):
    """vLLM V1 stats lines, one per (seconds after start, prompt tok/s, gen tok/s, running, KV usage)."""
    lines = [f"INFO {start:%m-%d %H:%M:%S} [api_server.py:1] vLLM API server version 0.10.2"]
    for s, prompt, gen, running, usage in windows:
        t = start + dt.timedelta(seconds=s)
        lines.append(
            f"INFO {t:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: {prompt:.1f} "
            f"tokens/s, Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: 0 "
            f"reqs, GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 50.0%"
        )
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return analyze(load_source(path, year=2025))


def _kept_out(a, reason):
    return int((a.samples["excluded"] == reason).sum())


def test_windows_holding_a_long_prefill_are_not_decode_and_do_not_make_age(tmp_path):
    """Four windows of `Running: 2`, no prompt, 1.5 tok/s, then a window that completes 200,000
    prompt tokens: the prefill ran through them. They are kept out as such, not read as a 60x loss."""
    rng = np.random.default_rng(0)
    windows = []
    for k in range(90):
        s = 10 * (k + 1)
        if 40 <= k < 44:
            windows.append((s, 0.0, 1.5, 2, 20.0))
        elif k == 44:
            windows.append((s, 20_000.0, 60.0, 2, 40.0))
        else:
            windows.append((s, 0.0, 100.0 * (1 + rng.normal(0, 0.02)), 2, 20.0 + k / 10))
    a = _vllm(tmp_path, windows)
    assert _kept_out(a, "prefill_pending") == 4
    assert a.verdict == "no_degradation", a.reason


def test_turns_admitted_in_every_window_still_give_decode_speed(tmp_path):
    """Agent traffic: every window admits a turn and counts more prompt than generated tokens. The
    healthy model fits what the prompt tokens cost, and the windows carry the analysis."""
    rng = np.random.default_rng(1)
    step, per_prompt = 0.020, 2e-4  # a decode step at batch 1, and each prompt token's share of one
    windows = []
    for k in range(240):
        prompt = float(rng.choice([200.0, 400.0, 600.0, 800.0]))  # tok/s over the window
        q = prompt / 45.0  # prompt tokens per decode step, about
        gen = 1.0 / (step + per_prompt * q) * (1 + rng.normal(0, 0.01))
        windows.append((10 * (k + 1), prompt, gen, 1, 1.0))
    a = _vllm(tmp_path, windows)
    assert _kept_out(a, "window_with_prefill") == 0
    assert "prompt" in a.model.terms
    assert a.verdict in ("no_degradation", "context_growth_only") and a.confidence is not None, a.reason


def test_a_batch_draining_one_request_at_a_time_is_one_batch(tmp_path):
    """1,000 running requests finishing a few at a time: each window averaged two sizes one band
    apart, and is kept (it used to be `batch_changed`, 140 of 146 windows)."""
    windows = [(10 * (k + 1), 0.0, (1000 - 3 * k) / 0.08, 1000 - 3 * k, 50.0) for k in range(60)]
    a = _vllm(tmp_path, windows)
    assert _kept_out(a, "batch_changed") == 0
    assert a.verdict == "no_degradation", a.reason


def test_hours_idle_are_not_early_life(tmp_path):
    """Warm-up, 18 hours with nothing to do, then the work: the healthy window is where the engine
    first worked, and the answer is one (not a refusal for want of early samples)."""
    rng = np.random.default_rng(2)
    windows = [(10 * (k + 1), 0.0, 50.0, 1, 1.0) for k in range(3)]
    windows.append((40, 0.0, 0.0, 0, 0.0))
    start = 18 * 3600
    windows += [(start + 10 * k, 0.0, 50.0 * (1 + rng.normal(0, 0.02)), 1, 5.0) for k in range(200)]
    a = _vllm(tmp_path, windows)
    assert a.verdict == "no_degradation", a.reason
    early = a.samples[a.samples["healthy"]]
    assert (early["engine_age_s"] > start - 60).mean() > 0.5  # mostly from the work, not the warm-up


def test_a_restart_into_another_build_is_no_control_and_is_said(tmp_path):
    """llama.cpp without timestamps: build 8319 with 9 threads, then build 8470 with 4, slower.
    No restart comparison is made between the two engines, and the change is a check of its own."""
    timing = (
        "slot print_timing: id  0 | task {t} | \n"
        "prompt eval time =      50.00 ms /   100 tokens (    0.50 ms per token,  2000.00 tokens per second)\n"
        "       eval time =    {ms:.2f} ms /   100 tokens (   {per:.2f} ms per token,   {tps:.2f} tokens per "
        "second)\n"
        "      total time =    1000.00 ms /   200 tokens\n"
        "slot      release: id  0 | task {t} | stop processing: n_tokens = 1200, truncated = 0\n"
        "srv  update_slots: all slots are idle"
    )
    lines = []
    for life, (build, threads, per) in enumerate([("8319 (6de1bc631)", 9, 20.0), ("8470 (db9d8aa42)", 4, 40.0)]):
        lines += [
            f"build: {build} with clang for aarch64",
            f"system_info: n_threads = {threads} | CPU : NEON = 1 |",
            "main: loading model",
        ]
        for t in range(60):
            jitter = per * (1 + 0.02 * ((t * 7) % 5 - 2))
            lines.append(timing.format(t=t, ms=jitter * 100, per=jitter, tps=1000.0 / jitter))
    path = tmp_path / "llama.log"
    path.write_text("\n".join(lines) + "\n")
    a = analyze(load_source(path))
    checks = {c.name: c for c in a.checks}
    assert checks["engine_identity"].status == CheckStatus.WARN
    assert "build 8319 (6de1bc631) -> 8470 (db9d8aa42)" in checks["engine_identity"].detail
    assert "threads 9 -> 4" in checks["engine_identity"].detail
    assert not any(c.basis == "restart" for c in a.comparisons)
    assert a.recovered_by_restart is None
    assert [life.facts.get("threads") for life in a.lives] == ["9", "4"]


def test_the_summary_lists_each_engine_life(tmp_path):
    from reports import narrative

    lines = ["build: 8319 (6de1bc631) with clang for aarch64", "system_info: n_threads = 9 | CPU : NEON = 1 |"]
    path = tmp_path / "llama.log"
    timing = (
        "slot print_timing: id  0 | task {t} | \n"
        "       eval time =    2000.00 ms /   100 tokens (   20.00 ms per token,    50.00 tokens per second)\n"
        "slot      release: id  0 | task {t} | stop processing: n_tokens = 1200, truncated = 0"
    )
    lines += [timing.format(t=t) for t in range(10)]
    path.write_text("\n".join(lines) + "\n")
    a = analyze(load_source(path))
    numbers = {k.label: k.value for k in narrative.key_numbers(a)}
    assert numbers["engine lives"] == "life 0: build 8319 (6de1bc631), threads 9"
