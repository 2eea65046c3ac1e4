"""Engine log readers: every variant of every format, bad lines, events and engine lives."""

import datetime as dt
import json
import logging
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from diagnostics.errors import DiagnosticsError
from logformats import parse_log
from logformats.errors import LogFormatError
from tests.logformats import write_log
from tokdrift.cli.diag import app

DAY = dt.date(2026, 9, 23)


def test_freetoken_full_prefix_with_pid_rank_and_colours(tmp_path):
    path = write_log(
        tmp_path,
        "ft.log",
        [
            "[2026-09-23|21:03:12] INFO     Resolved config: moe_backend='offload', page_size=1",
            "[2026-09-23|21:03:22|pid=77] INFO     Cache rebuilt: KV 245760 pages (245760 tokens, 4.69 GiB), mamba 32 slots",
            "\x1b[32m[2026-09-23|21:04:00|core|rank=0] INFO     \x1b[0mPrefill batch, #new-seq: 4, #new-token: 4982, "
            "#cached-token: 7306, token usage: 0.31, #mamba-slot: 96/96, mamba usage: 1.00, #running-req: 12, "
            "#queue-req: 4, input throughput (token/s): 2210.55",
            "[2026-09-23|21:04:24] INFO     Decode batch, #running-req: 1, #token: 230129, token usage: 0.94, "
            "#mamba-slot: 4/32, mamba usage: 0.12, gen throughput (token/s): 38.16, #queue-req: 0",
            "[2026-09-23|21:04:30] WARNING  Input sequence length 249912 exceeds 245760, request 16 is dropped.",
            "[2026-09-23|21:04:31] INFO     Adjust max_tokens to 1024 for request 17.",
            "[2026-09-23|21:04:40] INFO     Scheduler is idle, waiting for new reqs...",
        ],
    )
    parsed = parse_log(path)
    assert parsed.info.format == "freetoken"
    assert parsed.info.kv_capacity == 245760
    steps = parsed.steps
    assert steps["phase"].tolist() == ["prefill", "decode", "idle"]
    prefill, decode = steps.iloc[0], steps.iloc[1]
    assert (prefill["new_tokens"], prefill["cached_tokens"], prefill["num_running_reqs"]) == (4982, 7306, 12)
    assert (prefill["mamba_slots_used"], prefill["mamba_slots_total"], prefill["input_tps"]) == (96, 32 * 3, 2210.55)
    assert (decode["num_tokens"], decode["gen_tps"], decode["token_usage"]) == (230129, 38.16, 0.94)
    assert decode["t"] == pd.Timestamp("2026-09-23 21:04:24")
    assert decode["engine_age_s"] == 72.0  # from the first startup line, not the second
    dropped = parsed.events[parsed.events["kind"] == "dropped_request"].iloc[0]
    assert dropped["new_tokens"] == 249912 and dropped["limit"] == 245760 and "request 16" in dropped["detail"]


def test_tokdrift_engine_log_is_read_by_the_freetoken_reader(tmp_path):
    path = write_log(
        tmp_path,
        "engine.log",
        [
            "[2026-09-23|09:00:00] INFO     tokdrift engine 0.1.0 starting",
            "[2026-09-23|09:00:05] INFO     Decode batch, #running-req: 2, #token: 1000, token usage: 0.01, "
            "#mamba-slot: 2/8, mamba usage: 0.25, gen throughput (token/s): 50.00, #queue-req: 0",
        ],
    )
    parsed = parse_log(path)
    assert parsed.info.format == "tokdrift"
    assert parsed.steps["gen_tps"].tolist() == [50.0]


def test_pasted_excerpt_needs_a_date(tmp_path):
    lines = [
        "23:59:50  Decode batch, #running-req: 1, gen throughput (token/s): 10.00",
        "00:00:10  Decode batch, gen throughput (token/s): 11.00",
    ]
    path = write_log(tmp_path, "excerpt.log", lines)
    with pytest.raises(LogFormatError, match="--date"):
        parse_log(path)
    steps = parse_log(path, date=DAY).steps
    # Past midnight the clock goes back: the next day.
    assert steps["t"].tolist() == [pd.Timestamp("2026-09-23 23:59:50"), pd.Timestamp("2026-09-24 00:00:10")]
    named = write_log(tmp_path, "ft-2026-09-23-excerpt.log", lines)
    assert parse_log(named).steps["t"].iloc[0] == pd.Timestamp("2026-09-23 23:59:50")


def test_seed_excerpt_reads_every_line(excerpt):
    parsed = parse_log(excerpt, date=DAY)
    assert parsed.info.num_unknown_lines == 0
    steps = parsed.steps
    assert steps["phase"].tolist() == [
        "decode",
        "decode",
        "prefill",
        "decode",
        "decode",
        "decode",
        "prefill",
        "decode",
        "decode",
    ]
    prefill = steps.iloc[2]
    assert (prefill["new_tokens"], prefill["cached_tokens"], prefill["engine_age_s"]) == (5792, 121712, 938)
    assert steps["gen_tps"].dropna().tolist() == [101.34, 123.63, 3.63, 11.20, 11.49, 1.80, 12.53]


def test_sglang_old_and_new_forms_hybrid_and_swa(tmp_path):
    path = write_log(
        tmp_path,
        "sglang.log",
        [
            "[2025-02-27 10:11:00] server_args=ServerArgs(model_path='m', max_total_num_tokens=500000)",
            "[2025-02-27 10:11:10] Prefill batch. #new-seq: 1, #new-token: 812, #cached-token: 3000, cache hit rate: "
            "45.12%, token usage: 0.02, #running-req: 0, #queue-req: 0",
            "[2025-02-27 10:11:12] Decode batch. #running-req: 8, #token: 62531, token usage: 0.12, "
            "gen throughput (token/s): 186.64, #queue-req: 0",
            "[2026-03-01 09:00:00 TP0] Decode batch, #running-req: 3, #token: 41002, token usage: 0.31, cuda graph: True, "
            "gen throughput (token/s): 152.10, #queue-req: 0",
            "[2026-03-01 09:00:01 DP0 TP0] Decode batch [1234], #running-req: 3, #full token: 41100, full token usage: 0.30, "
            "mamba num: 6, mamba usage: 0.19, accept len: 2.10, accept rate: 0.70, cuda graph: False, "
            "gen throughput (token/s): 150.00, #queue-req: 1",
            "[2026-03-01 09:00:02 TP0] Decode batch, #running-req: 2, #full token: 9000, full token usage: 0.10, "
            "#swa token: 4096, swa token usage: 0.40, gen throughput (token/s): 140.00, #queue-req: 0",
            "[2026-03-01 09:00:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.5",
        ],
    )
    parsed = parse_log(path)
    assert parsed.info.format == "sglang"
    s = parsed.steps
    assert s.iloc[0]["cache_hit_rate"] == pytest.approx(0.4512)
    assert s.iloc[1][["num_running_reqs", "num_tokens", "gen_tps"]].tolist() == [8, 62531, 186.64]
    assert s.iloc[2]["cuda_graph"] == 1.0 and s.iloc[3]["cuda_graph"] == 0.0
    hybrid = s.iloc[3]
    assert (hybrid["num_tokens"], hybrid["full_token_usage"], hybrid["mamba_slots_used"], hybrid["mamba_usage"]) == (
        41100,
        0.30,
        6,
        0.19,
    )
    assert (hybrid["accept_len"], hybrid["accept_rate"], hybrid["num_queue_reqs"]) == (2.10, 0.70, 1)
    swa = s.iloc[4]
    assert (swa["num_tokens"], swa["num_swa_tokens"], swa["swa_token_usage"]) == (9000, 4096, 0.40)
    retract = parsed.events[parsed.events["kind"] == "preemption"].iloc[0]
    assert retract["count"] == 2
    assert parsed.info.kv_capacity == 500000


def test_vllm_with_and_without_prefixes_and_a_new_year(tmp_path):
    path = write_log(
        tmp_path,
        "vllm.log",
        [
            "(APIServer pid=4120) INFO 12-31 23:59:40 [api_server.py:1] vLLM API server version 0.11.0",
            "INFO 12-31 23:59:50 [loggers.py:123] Engine 000: Avg prompt throughput: 5120.3 tokens/s, Avg generation "
            "throughput: 101.3 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 12.1%, "
            "Prefix cache hit rate: 85.2%",
            "(APIServer pid=4120) INFO 01-01 00:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 98.7 tokens/s, Running: 2 reqs, Waiting: 1 reqs, Preemptions: 3, "
            "GPU KV cache usage: 97.0%, Prefix cache hit rate: 80.1%",
            "(EngineCore_DP0 pid=4188) INFO 01-01 00:00:10 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 "
            "tokens/s, Avg generation throughput: 97.0 tokens/s, Running: 2 reqs, Waiting: 1 reqs, Deferred: 4 reqs, "
            "GPU KV cache usage: 97.5%, Prefix cache hit rate: 80.0%",
            "INFO 01-01 00:00:20 metrics.py:345] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 96.0 "
            "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 98.0%, CPU KV cache usage: 0.0%.",
        ],
    )
    parsed = parse_log(path, year=2026)
    assert parsed.info.format == "vllm"
    s = parsed.steps
    assert s["t"].tolist() == [
        pd.Timestamp("2026-12-31 23:59:50"),
        pd.Timestamp("2027-01-01 00:00:00"),
        pd.Timestamp("2027-01-01 00:00:10"),
        pd.Timestamp("2027-01-01 00:00:20"),
    ]
    assert s["gen_tps"].tolist() == [101.3, 98.7, 97.0, 96.0]
    assert s["input_tps"].tolist() == [5120.3, 0.0, 0.0, 0.0]
    assert s["phase"].tolist() == ["mixed", "decode", "decode", "decode"]  # the first window also held prefill
    assert s["token_usage"].tolist() == pytest.approx([0.121, 0.97, 0.975, 0.98])
    assert s["num_queue_reqs"].iloc[3] == 1  # V0 says Pending
    assert s["num_preemptions"].iloc[1] == 3 and pd.isna(s["num_preemptions"].iloc[0])
    assert s["num_deferred"].iloc[2] == 4 and s["num_queue_reqs"].iloc[2] == 1
    assert s["engine_age_s"].tolist() == [10.0, 20.0, 30.0, 40.0]


def test_unknown_lines_are_counted_and_a_bad_number_warns_with_its_line(tmp_path, caplog):
    path = write_log(
        tmp_path,
        "ft.log",
        [
            "[2026-09-23|09:00:00] INFO     Decode batch, #running-req: 1, #token: 100, gen throughput (token/s): 10.00",
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "[2026-09-23|09:00:05] INFO     Decode batch, #running-req: 1, #token: 1x0, gen throughput (token/s): 11.00",
            "[2026-09-23|09:00:10] INFO     Decode batch, #running-req: 1, #token: 120, gen throughput (token/s): 12.00",
        ],
    )
    with caplog.at_level(logging.WARNING, logger="logformats"):
        parsed = parse_log(path)
    assert parsed.info.num_unknown_lines == 2
    assert parsed.info.num_bad_values == 1
    assert any("ft.log:4" in r.getMessage() and "1x0" in r.getMessage() for r in caplog.records)
    # The rest of the bad line is kept; only the bad field is empty.
    assert parsed.steps["gen_tps"].tolist() == [10.0, 11.0, 12.0]
    assert parsed.steps["num_tokens"].isna().tolist() == [False, True, False]


def test_a_restart_begins_a_new_engine_life(tmp_path):
    decode = "INFO     Decode batch, #running-req: 1, gen throughput (token/s): 10.00"
    path = write_log(
        tmp_path,
        "ft.log",
        [
            "[2026-09-23|09:00:00] INFO     Parsed arguments: model=m",
            "[2026-09-23|09:00:10] INFO     Resolved config: moe_backend='resident'",
            f"[2026-09-23|09:01:00] {decode}",
            "[2026-09-23|10:00:00] INFO     Parsed arguments: model=m",
            "[2026-09-23|10:00:10] INFO     Cache rebuilt: KV 1000 pages (1000 tokens, 0.01 GiB), mamba 8 slots (0.01 GiB)",
            f"[2026-09-23|10:01:00] {decode}",
        ],
    )
    parsed = parse_log(path)
    assert parsed.steps["engine_life"].tolist() == [0, 1]
    assert parsed.steps["engine_age_s"].tolist() == [60.0, 60.0]
    assert parsed.info.age_known


def test_a_file_that_is_no_engine_log_is_refused(tmp_path):
    path = write_log(tmp_path, "notes.txt", ["hello", "world"])
    with pytest.raises(LogFormatError, match="none of the first 2 lines"):
        parse_log(path)


FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def test_sglang_2024_time_only_lines_need_a_date():
    path = FIXTURES / "sglang-2024.log"
    with pytest.raises(
        LogFormatError,
        match=r"only a time of day \(SGLang releases of 2024 print no date\); "
        r"expected --date YYYY-MM-DD",
    ):
        parse_log(path)
    result = CliRunner().invoke(app, ["analyze", str(path)])
    assert isinstance(result.exception, DiagnosticsError) and "no known prefix" not in str(result.exception)
    parsed = parse_log(path, date=dt.date(2024, 8, 31))
    assert parsed.info.format == "sglang-time-only"
    steps = parsed.steps
    assert steps["phase"].tolist() == ["prefill"] + ["decode"] * 5
    assert steps["gen_tps"].dropna().tolist() == [441.20, 410.05, 236.90, 238.12, 237.44]
    assert steps["t"].iloc[1] == pd.Timestamp("2024-08-31 04:40:54")
    assert steps["engine_age_s"].iloc[1] == 162.0  # from server_args at 04:38:12
    assert parsed.info.kv_capacity == 425061


def test_a_garbled_stamp_is_a_bad_line_not_a_failure(tmp_path):
    decode = "INFO     Decode batch, #running-req: 1, #token: 100, gen throughput (token/s): 10.00"
    path = write_log(
        tmp_path,
        "ft.log",
        [
            "[2026-09-23|09:00:00] INFO     Resolved config: moe_backend='resident'",
            f"[2026-09-23|09:01:00] {decode}",
            f"[2419-91-37|94:25:02] {decode}",
            f"[2026-09-23|09:03:00] {decode}",
        ],
    )
    parsed = parse_log(path)
    assert (parsed.info.num_bad_lines, parsed.info.num_step_lines) == (1, 2)
    assert parsed.steps["line"].tolist() == [2, 4]
    result = CliRunner().invoke(app, ["analyze", str(path), "--json"])
    assert result.exit_code == 0, result.output
    check = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "log_lines")
    assert check["status"] == "warn" and "1 bad lines (impossible time, truncated) skipped" in check["detail"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-8-sig"])
def test_a_log_saved_in_another_encoding_reads_the_same(tmp_path, excerpt, encoding):
    text = excerpt.read_text(encoding="utf-8").replace("\n", "\r\n")
    path = tmp_path / "freetoken-2026-09-23-excerpt.log"
    path.write_bytes(text.encode(encoding))
    parsed, original = parse_log(path), parse_log(excerpt, date=DAY)
    assert parsed.info.num_unknown_lines == 0
    pd.testing.assert_frame_equal(parsed.steps, original.steps)
