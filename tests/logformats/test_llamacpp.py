"""llama.cpp's server and Ollama: fixtures written from the lines the engines print (docs/diagnostics.md)."""

import datetime as dt
import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from logformats import parse_log
from tests.logformats import analyze_json, write_log

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
runner = CliRunner()


def test_llama_server_with_timestamps_reads_each_slot_and_the_engine_age():
    parsed = parse_log(FIXTURES / "llama-server-timestamps.log")
    info, steps = parsed.info, parsed.steps
    assert (info.format, info.clock, info.kv_capacity) == ("llama.cpp", "relative", 32768)
    assert steps["phase"].value_counts().to_dict() == {"decode": 3, "mixed": 2, "prefill": 1, "idle": 2}
    # Task 1 finished first, at 0.16.000.003: its stamp is its engine age.
    done = steps[(steps["phase"] == "decode") & (steps["line"] == 16)].iloc[0]
    assert (done["gen_tps"], done["step_time_s"]) == (22.22, pytest.approx(0.045))
    assert done["engine_age_s"] == pytest.approx(16.000003)
    assert done["num_running_reqs"] == 2
    # One KV cache for both slots: its own context mid-request (800 + 60), slot 0's so far (1200 + 100).
    assert done["num_tokens"] == 2160
    prefill = steps[steps["new_tokens"].notna() & (steps["line"] == 16)].iloc[0]
    assert (prefill["new_tokens"], prefill["cached_tokens"], prefill["input_tps"]) == (300, 500, 4000)
    assert prefill["engine_age_s"] == pytest.approx(16.000003 - 5.4)  # before its 5400 ms of decode
    progress = steps[steps["line"] == 14].iloc[0]  # n_gen = 100, tg_3s = 25.00
    assert (progress["gen_tps"], progress["num_decode_tokens"], progress["engine_age_s"]) == (25.0, 100, 14.0)
    # The stamps place each window: task 1's 300-token prompt went in (10.525-10.6 s) while task 0
    # decoded these 100 tokens (10.3-14.0 s), in the same batches: a mixed window, not a decode step's
    # time; task 1 decoded beside it from 10.6 s on (on average 0.92 slots more).
    assert progress["phase"] == "mixed" and progress["input_tps"] == pytest.approx(300 / 3.7)
    assert progress["num_running_reqs"] == pytest.approx(1 + 3.4 / 3.7, abs=1e-3)
    # Task 0 decoded through task 1's prefill: in the same batches, so its time is not its own (mixed).
    assert (prefill["phase"], prefill["num_running_reqs"]) == ("mixed", 2)
    alone = steps[steps["new_tokens"].notna() & (steps["line"] == 23)].iloc[0]  # task 0's prompt: nothing beside it
    assert (alone["phase"], alone["num_running_reqs"]) == ("prefill", 1)
    # Task 0 after its progress lines: the rest of the request, and its draft acceptance.
    tail = steps[(steps["phase"] == "decode") & (steps["line"] == 23)].iloc[0]
    assert (tail["num_decode_tokens"], tail["num_running_reqs"]) == (20, 1)
    assert tail["accept_rate"] == pytest.approx(0.46218) and tail["accept_len"] == pytest.approx(2.38)
    events = parsed.events
    assert events["detail"].iloc[0] == "engine start (llama.cpp's stamps count from it)"
    assert (events["t"].iloc[0], events["kind"].iloc[0]) == (pd.Timestamp("1970-01-01"), "engine_start")
    assert (events["kind"] == "request").sum() == 2


def test_llama_stamps_that_go_back_are_a_restart(tmp_path):
    block = (
        "slot print_timing: id  0 | task 0 | prompt eval time =     100.00 ms /    50 tokens (    2.00 ms per token,"
        "   500.00 tokens per second)",
        "slot print_timing: id  0 | task 0 |        eval time =    {ms}.00 ms /   100 tokens (   {per}.00 ms per "
        "token,    {tps}.00 tokens per second)",
    )
    path = write_log(
        tmp_path,
        "llama.log",
        [
            "0.00.010.000 I build: 6092 (c81de6e1) with cc (GCC) 13.3.0 for x86_64-linux-gnu",
            "0.20.000.000 I " + block[0],
            "0.20.000.001 I " + block[1].format(ms=2000, per=20, tps=50),
            "0.00.009.000 I build: 6092 (c81de6e1) with cc (GCC) 13.3.0 for x86_64-linux-gnu",
            "0.30.000.000 I " + block[0],
            "0.30.000.001 I " + block[1].format(ms=2500, per=25, tps=40),
        ],
    )
    decode = parse_log(path).steps.query("phase == 'decode'")
    assert decode["engine_life"].tolist() == [0, 1]
    assert decode["engine_age_s"].tolist() == pytest.approx([20.000001, 30.000001])
    assert decode["gen_tps"].tolist() == [50.0, 40.0]


def test_plain_llama_server_log_runs_on_engine_busy_time():
    parsed = parse_log(FIXTURES / "llama-server-plain.log")
    assert (parsed.info.format, parsed.info.clock) == ("llama.cpp", "busy")
    steps = parsed.steps
    decode, prefill = steps[steps["phase"] == "decode"], steps[steps["phase"] == "prefill"]
    # Request 1: 1024 ms of prompt, 5100 of eval. Request 2: 132 ms of prompt, then the windows its
    # `tg` implies (100 tokens at 40 t/s: 2.5 s of decode; 220: 5.5 s) and the rest of its 8000 ms.
    assert decode["engine_age_s"].tolist() == pytest.approx([6.124, 8.756, 11.756, 14.256])
    assert decode["gen_tps"].tolist() == pytest.approx([50.20, 40.0, 40.0, 32.0])
    # These builds print the release line before the timing block; the context is known all the same.
    assert decode["num_tokens"].tolist() == [640, 850, 960, 1060]
    assert prefill["new_tokens"].tolist() == [512, 33] and prefill["cached_tokens"].tolist() == [0, 767]
    _, checks = analyze_json(FIXTURES / "llama-server-plain.log")
    assert checks["engine_age"]["detail"].startswith("clock: engine busy time (the log has no timestamps)")


def test_2024_server_lines_with_unix_timestamps():
    parsed = parse_log(FIXTURES / "llama-server-2024.log")
    assert (parsed.info.format, parsed.info.clock, parsed.info.kv_capacity) == ("llama.cpp", "wall", 8192)
    steps = parsed.steps
    prefill, decode = steps[steps["phase"] == "prefill"].iloc[0], steps[steps["phase"] == "decode"].iloc[0]
    assert (prefill["new_tokens"], prefill["input_tps"], prefill["cached_tokens"]) == (406, 499.82, 0)
    assert (decode["gen_tps"], decode["step_time_s"], decode["num_decode_tokens"]) == (25.0, 0.04, 128)
    assert decode["t"] == pd.Timestamp("2024-04-25 12:17:10")  # timestamp=1714047430, UTC
    assert decode["engine_age_s"] == 30.0  # from `build info`


def test_ollama_journal_with_llama_server_lines():
    parsed = parse_log(FIXTURES / "ollama-journal.log")
    assert (parsed.info.format, parsed.info.clock) == ("ollama", "wall")
    steps = parsed.steps
    decode = steps[steps["phase"] == "decode"]
    assert decode["t"].dt.strftime("%H:%M:%S").tolist() == ["12:36:18", "12:36:20", "12:36:44"]
    assert decode["gen_tps"].tolist() == pytest.approx([33.10, 60 / (4.8 - 100 / 33.0), 30.0])
    assert decode["engine_age_s"].tolist() == [7.0, 9.0, 33.0]  # from `starting llama-server`, not `Listening on`
    second = steps[steps["phase"] == "prefill"].iloc[1]
    assert (second["new_tokens"], second["cached_tokens"]) == (193, 2207)
    requests = parsed.events[parsed.events["kind"] == "request"]
    assert len(requests) == 2  # GET /api/version is not a request to the model
    assert requests["detail"].iloc[0] == "POST /api/chat -> 200 in 8.924 s from 127.0.0.1"


def test_ollama_access_lines_alone_are_insufficient_data():
    path = FIXTURES / "ollama-access-only.log"
    parsed = parse_log(path)
    assert parsed.steps.empty and parsed.info.format == "ollama"
    requests = parsed.events[parsed.events["kind"] == "request"]
    assert requests["detail"].str.extract(r"in ([\d.]+) s")[0].astype(float).tolist() == pytest.approx(
        [5.258, 4.918, 12.014, 524.0], abs=1e-3
    )  # the last printed as 8m44s
    doc, checks = analyze_json(path)
    assert doc["verdict"] == "insufficient_data"
    assert checks["log_lines"]["status"] == "warn"
    assert "only access lines: request latency without token counts" in checks["log_lines"]["detail"]
    # The refusal names what is missing and what would give it.
    assert "request latencies only" in checks["data"]["detail"] and "soak run --target" in checks["data"]["detail"]


def test_journald_dates_take_a_year_and_roll_into_the_next(tmp_path):
    timing = (
        "slot print_timing: id  0 | task {t} |        eval time =    1000.00 ms /    50 tokens (   20.00 ms per "
        "token,    50.00 tokens per second)"
    )
    path = write_log(
        tmp_path,
        "llama-journal.log",
        [
            "Dec 31 23:59:50 kamala llama-server[52276]: build: 4261 (2759916d) with cc (GCC) 14.2.1 for x86_64",
            "Dec 31 23:59:58 kamala llama-server[52276]: " + timing.format(t=0),
            "Jan 01 00:00:07 kamala llama-server[52276]: " + timing.format(t=1),
        ],
    )
    steps = parse_log(path, year=2024).steps
    assert steps["t"].tolist() == [pd.Timestamp("2024-12-31 23:59:58"), pd.Timestamp("2025-01-01 00:00:07")]
    assert steps["engine_age_s"].tolist() == [8.0, 17.0]


def test_relative_clock_counts_from_the_date_given():
    steps = parse_log(FIXTURES / "llama-server-timestamps.log", date=dt.date(2026, 3, 1)).steps
    assert steps["t"].iloc[0] == pd.Timestamp("2026-03-01 00:00:05.500100")


def test_2024_server_json_lines_read_as_its_text_lines(tmp_path):
    def line(function, msg, **fields):
        return json.dumps(
            {"tid": "140302184869888", "level": "INFO", "function": function, "line": 1, "msg": msg, **fields}
        )

    slot = {"id_slot": 0, "id_task": 0}
    path = write_log(
        tmp_path,
        "server.json.log",
        [  # the fixture's lines as `--log-format json` prints them
            line("main", "build info", timestamp=1714047400, build=2715, commit="f4ab2a41"),
            line("update_slots", "all slots are idle", timestamp=1714047410),
            line("launch_slot_with_task", "slot is processing task", timestamp=1714047424, **slot),
            line(
                "print_timings",
                "prompt eval time     =     812.30 ms /   406 tokens (    2.00 ms per token,   499.82 "
                "tokens per second)",
                timestamp=1714047430,
                t_prompt_processing=812.3,
                n_prompt_tokens_processed=406,
                **slot,
            ),
            line(
                "print_timings",
                "generation eval time =    5120.00 ms /   128 runs   (   40.00 ms per token,    25.00 "
                "tokens per second)",
                timestamp=1714047430,
                t_token_generation=5120.0,
                n_decoded=128,
                **slot,
            ),
            line(
                "update_slots", "slot released", timestamp=1714047430, n_ctx=8192, n_past=533, truncated=False, **slot
            ),
            line("update_slots", "all slots are idle", timestamp=1714047430),
        ],
    )
    parsed = parse_log(path)
    expected = parse_log(FIXTURES / "llama-server-2024.log").steps
    assert (parsed.info.format, parsed.info.clock) == ("llama.cpp", "wall")
    pd.testing.assert_frame_equal(parsed.steps.drop(columns="line"), expected.drop(columns="line"))


def test_ollama_before_0_4_mixes_local_and_unix_times_into_one_clock(tmp_path):
    # slog prints local time (here UTC-6); the wrapped server's `timestamp=` is Unix (UTC). One clock: the local one.
    path = write_log(
        tmp_path,
        "ollama.log",
        [
            'time=2024-05-12T06:47:18.600-06:00 level=INFO source=server.go:320 msg="starting llama server" cmd="x"',
            "DEBUG [print_timings] prompt eval time     =     100.00 ms /    50 tokens (    2.00 ms per token,   500.00 "
            'tokens per second) | n_prompt_tokens_processed=50 slot_id=0 task_id=3 tid="1" timestamp=1715518040',
            "DEBUG [print_timings] generation eval time =    2000.00 ms /   100 runs   (   20.00 ms per token,    50.00 "
            'tokens per second) | n_decoded=100 slot_id=0 task_id=3 tid="1" timestamp=1715518040',
            '[GIN] 2024/05/12 - 06:47:21 | 200 |  2.310231475s |       127.0.0.1 | POST     "/api/generate"',
        ],
    )
    parsed = parse_log(path)
    assert parsed.info.format == "ollama"
    decode = parsed.steps[parsed.steps["phase"] == "decode"].iloc[0]
    assert decode["t"] == pd.Timestamp("2024-05-12 06:47:21")  # the access line after it, not 12:47:20 UTC
    assert decode["engine_age_s"] == pytest.approx(2.4) and decode["gen_tps"] == 50.0


def test_router_child_lines_with_a_bare_timing_block(tmp_path):
    # A router's child prefixes its lines with [port]; the timing block follows an empty header line.
    path = write_log(
        tmp_path,
        "router.log",
        [
            "[42027] 1.20.000.000 I slot launch_slot_: id  0 | task 388 | processing task, is_child = 0",
            "[42027] 1.20.500.000 I slot update_slots: id  0 | task 388 | prompt done, n_tokens = 27, batch.n_tokens = 27",
            "[42027] 1.35.716.244 I slot print_timing: id  0 | task 388 | n_decoded =    172, tg =  12.00 t/s",
            "[42027] 1.37.495.377 I slot print_timing: id  0 | task 388 | ",
            "[42027] prompt eval time =     789.03 ms /    27 tokens (   29.22 ms per token,    34.22 tokens per second)",
            "[42027]        eval time =   16112.50 ms /   192 tokens (   83.92 ms per token,    11.92 tokens per second)",
            "[42027]       total time =   16901.53 ms /   219 tokens",
            "[42027] draft acceptance rate = 0.61307 (  122 accepted /   199 generated)",
            "[42027] 1.37.495.428 I slot      release: id  0 | task 388 | stop processing: n_tokens = 218, truncated = 0",
            "[42027] 1.37.495.453 I srv  update_slots: all slots are idle",
        ],
    )
    parsed = parse_log(path)
    assert (parsed.info.format, parsed.info.clock, parsed.info.num_bad_lines) == ("llama.cpp", "relative", 0)
    decode = parsed.steps[parsed.steps["phase"] == "decode"]
    assert decode["engine_age_s"].tolist() == pytest.approx([95.716244, 97.495377])
    # 172 tokens at a cumulative 12.00 t/s took 14.33 s; the other 20 took the rest of 16.11 s.
    assert decode["gen_tps"].tolist() == pytest.approx([12.0, 20 / (16.1125 - 172 / 12.0)])
    assert decode["num_tokens"].tolist() == [27 + 86, 27 + 182]
    assert decode["accept_rate"].tolist()[1] == pytest.approx(0.61307)
    prefill = parsed.steps[parsed.steps["phase"] == "prefill"].iloc[0]
    assert (prefill["new_tokens"], prefill["cached_tokens"], prefill["input_tps"]) == (27, 0, 34.22)


def test_log_prefix_without_timestamps_runs_on_busy_time(tmp_path):
    timing = (
        "I slot print_timing: id  {s} | task {t} | {what} time = {ms:10.2f} ms / {n:5d} tokens ({per:8.2f} ms per "
        "token, {tps:8.2f} tokens per second)"
    )
    path = write_log(
        tmp_path,
        "prefix.log",
        [
            "I build: 6092 (c81de6e1) with cc (GCC) 13.3.0 for x86_64-linux-gnu",
            "W srv  load_model: loading model 'm.gguf'",
            timing.format(s=0, t=0, what="prompt eval", ms=500.0, n=1000, per=0.5, tps=2000.0),
            timing.format(s=0, t=0, what="       eval", ms=4000.0, n=200, per=20.0, tps=50.0),
            timing.format(s=0, t=1, what="prompt eval", ms=100.0, n=100, per=1.0, tps=1000.0),
            timing.format(s=0, t=1, what="       eval", ms=2500.0, n=100, per=25.0, tps=40.0),
        ],
    )
    parsed = parse_log(path)
    assert parsed.info.clock == "busy"
    steps = parsed.steps
    assert steps["phase"].tolist() == ["prefill", "decode", "prefill", "decode"]
    assert steps["engine_age_s"].tolist() == pytest.approx([0.5, 4.5, 4.6, 7.1])
    assert steps["gen_tps"].dropna().tolist() == [50.0, 40.0]
    assert steps["num_running_reqs"].isna().all()  # no release lines: which slots were busy is unknown


def test_a_bare_timing_block_through_journald_keeps_its_eval_line(tmp_path):
    """llama-server inside Ollama prints the timing block as bare lines aligned with spaces; journald
    puts its prefix before them, so `       eval time = ...` arrives with its spaces after the prefix."""
    head = "Sep 23 10:23:{:02d} gpu-box ollama[2817]: "
    path = write_log(
        tmp_path,
        "ollama-block.log",
        [
            head.format(0)
            + 'time=2026-09-23T10:23:00.000Z level=INFO source=server.go:398 msg="starting llama server"',
            head.format(1) + "slot launch_slot_: id  2 | task 537 | processing task",
            head.format(1)
            + "slot update_slots: id  2 | task 537 | prompt done, n_tokens = 101944, batch.n_tokens = 6609",
            head.format(50) + "slot print_timing: id  2 | task 537 | ",
            head.format(50) + "prompt eval time =     645.53 ms /  6609 tokens (    0.10 ms per token, 10238.12 tokens "
            "per second)",
            head.format(50) + "       eval time =   48099.23 ms /   345 tokens (  139.42 ms per token,     7.17 tokens "
            "per second)",
            head.format(50) + "      total time =   48744.76 ms /  6954 tokens",
            head.format(50) + "slot      release: id  2 | task 537 | stop processing: n_tokens = 102288, truncated = 0",
        ],
    )
    steps = parse_log(path, year=2026).steps
    prefill = steps[steps["phase"] == "prefill"].iloc[0]
    assert (prefill["new_tokens"], prefill["cached_tokens"]) == (6609, 95335)
    assert prefill["t"] == pd.Timestamp("2026-09-23 10:23:50") - pd.Timedelta(seconds=48.09923)
    decode = steps[steps["phase"] == "decode"]
    assert decode["gen_tps"].tolist() == [7.17]


def test_a_real_llama_server_log_reads_its_slots_and_its_kv_capacity():
    # The first 70 lines of llama-server's own log (llama.cpp pinned by scripts/peer-engines.sh;
    # `--log-file --log-timestamps --log-prefix -np 4 -c 32768`) during a soak of examples/opencode.jsonl.
    # This build prints no `new prompt` / `prompt done` lines at the default verbosity: a request's
    # context comes from its release line.
    parsed = parse_log(FIXTURES / "llama-server-real.log")
    info, steps = parsed.info, parsed.steps
    assert (info.format, info.clock, info.num_unknown_lines, info.num_bad_lines) == ("llama.cpp", "relative", 0, 0)
    assert (
        info.kv_capacity == 4 * 8192
    )  # `load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'false'`
    progress = steps[steps["line"] == 34].iloc[0]  # task 133: n_gen = 100, tg_3s = 26.39
    assert (progress["gen_tps"], progress["num_decode_tokens"]) == (26.39, 100)
    assert progress["engine_age_s"] == pytest.approx(12.063278)
    beside = steps[(steps["line"] == 30) & (steps["phase"] == "decode")].iloc[0]  # task 176 while 133 decodes
    assert (beside["gen_tps"], beside["num_running_reqs"]) == (31.11, 2)
    assert beside["step_time_s"] == pytest.approx(0.03214)
    # Task 241: 616 prompt tokens computed; its release (n_tokens = 1849, 112 generated) puts its
    # context at 1738, so 1122 came from the slot's cache.
    prefill = steps[(steps["line"] == 51) & (steps["phase"] == "prefill")].iloc[0]
    assert (prefill["new_tokens"], prefill["cached_tokens"]) == (616, 1122)
    assert parsed.events["kind"].tolist() == [
        "engine_start",
        "engine_start",
    ]  # stamp 0, and `load_model: loading model`


@pytest.mark.parametrize(
    "stamp",
    [
        "Nov 27 14:55:15 gpu-box ollama[40647]: ",  # journalctl's default, -o short
        "Nov 27 14:55:15 ollama[40647]: ",  # the same without the host field (as pasted, or -o cat-like tools)
        "Nov 27 14:55:15.123456 gpu-box ollama[40647]: ",  # -o short-precise
        "2025-11-27T14:55:15+0100 gpu-box ollama[40647]: ",  # -o short-iso
        "2025-11-27T14:55:15.123456+01:00 ollama[40647]: ",  # -o short-iso-precise, no host
    ],
)
def test_journald_variants_read_as_ollama(tmp_path, stamp):
    gin = '[GIN] 2025/11/27 - 14:55:15 | 200 |  5.257673085s |       127.0.0.1 | POST     "/api/chat"'
    timing = "       eval time =    1000.00 ms /    50 tokens (   20.00 ms per token,    50.00 tokens per second)"
    path = write_log(tmp_path, "ollama.log", [stamp + gin, stamp + timing, stamp + gin])
    parsed = parse_log(path, year=2025)
    assert parsed.info.format == "ollama"
    assert parsed.info.num_unknown_lines == 0
    assert len(parsed.events[parsed.events["kind"] == "request"]) == 2
    assert parsed.steps.loc[parsed.steps["phase"] == "decode", "gen_tps"].tolist() == [50.0]
