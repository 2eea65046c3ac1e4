"""The readers take a log or a scrape series as text as well as a path (a soak parses the lines it
just tailed without writing them anywhere): the same content reads the same either way."""

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from logformats import Text, detect, parse_log
from logformats.errors import LogFormatError
from logformats.prometheus import parse_scrapes
from logformats.text import head, read_lines

LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
DAY = dt.date(2026, 9, 23)


@pytest.mark.parametrize(
    "name", ["freetoken.log", "sglang.log", "vllm.log", "llama-server-timestamps.log", "ollama-journal.log"]
)
def test_a_log_as_text_reads_as_the_file(name):
    path = LOGS / name
    from_file = parse_log(path, date=DAY, year=2026)
    from_text = parse_log(Text(path.read_bytes(), name), date=DAY, year=2026)
    assert from_text.info.format == from_file.info.format
    assert not from_file.steps.empty
    pd.testing.assert_frame_equal(from_text.steps, from_file.steps)
    pd.testing.assert_frame_equal(from_text.events, from_file.events)


def test_utf16_bytes_are_read_as_text():
    text = (LOGS / "freetoken.log").read_text(encoding="utf-8")
    as_utf16 = parse_log(Text(text.encode("utf-16"), "x.log"))
    assert len(as_utf16.steps) == len(parse_log(Text(text, "x.log")).steps) > 0


def test_text_that_is_no_log_names_itself():
    with pytest.raises(LogFormatError, match="^tailed: expected an engine log"):
        parse_log(Text("hello\nworld\n", "tailed"))
    assert detect(head(Text(""))) is None


def test_scrapes_as_text():
    body = (
        "# scrape_time: 1790000000.0\nvllm:generation_tokens_total 100\nvllm:num_requests_running 1\n"
        "# scrape_time: 1790000002.0\nvllm:generation_tokens_total 160\nvllm:num_requests_running 1\n"
    )
    steps, events, engine = parse_scrapes(Text(body, "/metrics"))
    assert engine == "vllm" and len(steps) == 2
    assert steps["gen_tps"].iloc[1] == pytest.approx(30.0)


def test_a_gzip_log_reads_as_its_text_and_a_cut_one_up_to_the_cut(tmp_path):
    import gzip

    lines = [f"line {k}" for k in range(2000)]
    path = tmp_path / "engine.log.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert [text for _, text in read_lines(path)] == lines
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    got = [text for _, text in read_lines(cut)]
    assert 0 < len(got) < len(lines) and got == lines[: len(got)]
