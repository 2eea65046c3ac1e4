"""The onset inside the window a line measures, and its trigger there (diagnostics.evidence.onset)."""

import datetime as dt

import pandas as pd

from diagnostics.analysis import analyze
from diagnostics.source.source import load_source
from logsim import simulate, write
from logsim.corpus import motivating
from reports import narrative
from tests.logformats import write_log

APPEND = {"kind": "prefill_append", "t": "2026-09-23T21:18:50", "new_tokens": 5792, "cached_tokens": 121712}


def test_the_motivating_log_places_the_onset_at_the_append_not_the_line_before(tmp_path):
    """shared/formats' report as a whole FreeToken log from the simulator (seed 97: the agent's last
    decode line is 41 s before the append). Before the onset window, diag put the onset 141 s early
    with no trigger: the append's 127K tokens in all did not stand out against the session's own."""
    case = motivating(97)
    path = write(simulate(case.workload, case.spec), "freetoken", tmp_path / "freetoken.log", case.start)
    assert "[2026-09-23|21:18:09] INFO     Decode batch" in path.read_text()  # the last line before it
    result = analyze(load_source(path))
    doc = result.to_dict()
    assert doc["verdict"] == "engine_age_degradation" and doc["slowdown"]["shape"] == "step"
    assert doc["onset"]["t"] == "2026-09-23T21:18:50" and doc["onset"]["engine_age_s"] == 938
    assert doc["onset"]["trigger"] == APPEND
    # From the last healthy line (21:18:09) to the first degraded one the fit may use (21:18:55;
    # 21:18:51's window holds the prefill).
    assert doc["onset"]["window_s"] == 46
    assert list(doc["onset"]) == ["t", "engine_age_s", "trigger", "window_s"]  # DESIGN's keys first
    keys = {k.label: k.value for k in narrative.key_numbers(result)}
    assert keys["onset window"].startswith("46 s (from the last sample before the slowdown to the first slowed one")
    assert "came 46 s after the last healthy one" in narrative.paragraph(result)


def test_the_seed_excerpt_keeps_its_onset_and_says_how_wide_its_window_was(excerpt):
    doc = analyze(load_source(excerpt, date=dt.date(2026, 9, 23))).to_dict()
    assert doc["onset"]["t"] == "2026-09-23T21:18:50" and doc["onset"]["trigger"] == APPEND
    assert doc["onset"]["window_s"] == 844  # 21:04:53, the last healthy line, to 21:18:57


def test_a_window_of_prompt_tokens_in_a_stats_log_is_the_onset(tmp_path):
    """vLLM prints no single prefill: a window whose prompt tokens came between the last healthy line
    and the first slow one is the onset, its tokens estimated from the window's prompt throughput."""
    t = dt.datetime(2026, 9, 23, 9, 0, 0)
    lines = [f"(APIServer pid=1) INFO {t:%m-%d %H:%M:%S} [api_server.py:1805] vLLM API server version 0.10.1.1"]
    for k in range(1, 361):
        now = t + dt.timedelta(seconds=10 * k)
        prompt, gen = (579.2, 9.0) if k == 181 else (0.0, 100.0 if k < 181 else 20.0)
        lines.append(
            f"(APIServer pid=1) INFO {now:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"{prompt:.1f} tokens/s, Avg generation throughput: {gen * (1 + 0.01 * (k % 3)):.1f} tokens/s, "
            f"Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: {20.0 + 3 * (k % 10):.1f}%, "
            f"Prefix cache hit rate: 80.0%"
        )
    doc = analyze(load_source(write_log(tmp_path, "vllm.log", lines), year=2026)).to_dict()
    assert doc["verdict"] == "engine_age_degradation"
    onset = doc["onset"]
    assert onset["t"] == "2026-09-23T09:30:10" and onset["window_s"] == 20  # 09:30:00 healthy, 09:30:20 slow
    assert (onset["trigger"]["kind"], onset["trigger"]["new_tokens"], onset["trigger"]["cached_tokens"]) == (
        "prefill",
        5792,
        None,
    )


def _freetoken(tmp_path, middle):
    """Healthy decode lines every 3 s for 15 min, `middle`, then slow ones for 15 min."""
    t = dt.datetime(2026, 9, 23, 9, 0, 0)
    out = [f"[{t:%Y-%m-%d|%H:%M:%S}] INFO     Resolved config: moe_backend='offload'"]

    def decode(at, k, tps):
        return (
            f"[{at:%Y-%m-%d|%H:%M:%S}] INFO     Decode batch, #running-req: 1, #token: {20000 + 4000 * (k % 10)}, "
            f"gen throughput (token/s): {tps:.2f}"
        )

    for k in range(300):
        out.append(decode(t + dt.timedelta(seconds=10 + 3 * k), k, 60.0 + (k % 4)))
    out += [f"[{t + dt.timedelta(seconds=910 + s):%Y-%m-%d|%H:%M:%S}] {text}" for s, text in middle]
    for k in range(300):
        out.append(decode(t + dt.timedelta(seconds=940 + 3 * k), k, 15.0 + (k % 4) / 4))
    return write_log(tmp_path, "ft.log", out)


def test_of_several_prefills_in_the_window_the_one_that_stands_out_is_the_trigger(tmp_path):
    prefill = "INFO     Prefill batch, #new-seq: 1, #new-token: {}, #cached-token: {}, token usage: 0.10"
    path = _freetoken(
        tmp_path,
        [
            (3, prefill.format(700, 19000)),
            (12, prefill.format(6400, 90000)),
            (13, "INFO     Decode batch, #running-req: 1, #token: 96400, gen throughput (token/s): 2.10"),
            (20, prefill.format(500, 96500)),
        ],
    )
    onset = analyze(load_source(path)).to_dict()["onset"]
    assert (onset["trigger"]["new_tokens"], onset["trigger"]["cached_tokens"]) == (6400, 90000)  # 9x the others
    assert onset["t"] == onset["trigger"]["t"] == "2026-09-23T09:15:22"


def test_with_nothing_in_the_window_the_event_just_before_it_is_the_trigger(tmp_path):
    """A dropped request right before the last healthy line: a change can show a line late."""
    path = _freetoken(tmp_path, [])
    text = path.read_text().splitlines()
    at = next(i for i, line in enumerate(text) if "09:15:07" in line)
    text.insert(
        at, "[2026-09-23|09:15:06] WARNING  Input sequence length 262144 exceeds 245760, request 77 is dropped."
    )
    path.write_text("\n".join(text) + "\n")
    onset = analyze(load_source(path)).to_dict()["onset"]
    assert onset["trigger"]["kind"] == "dropped_request" and onset["trigger"]["t"] == "2026-09-23T09:15:06"
    assert pd.Timestamp(onset["t"]) > pd.Timestamp(onset["trigger"]["t"])  # the onset stays in its window
