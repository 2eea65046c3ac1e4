"""Every log reader, fed damaged logs through the real CLI: exit 0 or 2, never a traceback.

For each format's sample log, each damage below is applied with a random generator seeded by
the pair's name (the test is deterministic), and `diag analyze FILE --json` runs on the result.
Exit 0 must give the analysis with the damage counted in the `log_lines` check; exit 2 (a
DiagnosticsError, the CLI's one-line error) is allowed where nothing readable is left.
"""

import datetime as dt
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from diagnostics.errors import DiagnosticsError
from logformats import parse_log
from tokdrift.cli.diag import app

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# name -> (sample, whether its lines carry a date or time that can be made impossible)
SAMPLES = {
    "freetoken": (FIXTURES / "freetoken.log", True),
    "freetoken-excerpt": (EXAMPLES / "freetoken-excerpt.log", True),
    "sglang": (FIXTURES / "sglang.log", True),
    "sglang-time-only": (FIXTURES / "sglang-2024.log", True),
    "vllm": (FIXTURES / "vllm.log", True),
    "llama.cpp-relative": (FIXTURES / "llama-server-timestamps.log", True),
    "llama.cpp-plain": (FIXTURES / "llama-server-plain.log", False),
    "llama.cpp-2024": (FIXTURES / "llama-server-2024.log", False),  # Unix stamps: garbled ones read as none
    "ollama-journal": (FIXTURES / "ollama-journal.log", True),
    "ollama-access": (FIXTURES / "ollama-access-only.log", True),
}
DAY, YEAR = dt.date(2026, 9, 23), 2026
ARGS = ["--date", DAY.isoformat(), "--year", str(YEAR)]
runner = CliRunner()


def _truncated(lines: list[str], rng: random.Random) -> bytes:
    out = [line[: rng.randrange(len(line) + 1)] if rng.random() < 0.4 else line for line in lines]
    return "\n".join(out).encode()


def _swapped(lines: list[str], rng: random.Random) -> bytes:
    lines = list(lines)
    for _ in range(max(1, len(lines) // 3)):
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines).encode()


def _impossible_dates(lines: list[str], rng: random.Random) -> bytes:
    # Every digit of a line's first 40 characters drawn from 5-9: `2419-91-37|94:25:02`.
    def garble(line: str) -> str:
        return re.sub(r"\d", lambda _: rng.choice("56789"), line[:40]) + line[40:]

    return "\n".join(garble(line) if rng.random() < 0.5 else line for line in lines).encode()


def _impossible_numbers(lines: list[str], rng: random.Random) -> bytes:
    # Numbers after the prefix: 400 digits (not a float), negative, scientific, nan.
    choices = ["9" * 400, "-5", "1e999", "nan", "0", "00.00.00"]

    def garble(line: str) -> str:
        return line[:40] + re.sub(r"\d+(?:\.\d+)?", lambda _: rng.choice(choices), line[40:])

    return "\n".join(garble(line) if rng.random() < 0.5 else line for line in lines).encode()


def _random_bytes(lines: list[str], rng: random.Random) -> bytes:
    out = [line.encode() for line in lines]
    for _ in range(5):
        out.insert(rng.randrange(len(out) + 1), bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 80))))
    return b"\n".join(out)


def _nul_bytes(lines: list[str], rng: random.Random) -> bytes:
    out = [line.encode() for line in lines]
    i = rng.randrange(len(out))
    out[i] = out[i][:10] + b"\x00" * 7 + out[i][10:]
    out.insert(rng.randrange(len(out) + 1), b"\x00" * 4096)  # a crash's unflushed tail
    return b"\n".join(out)


def _long_line(lines: list[str], rng: random.Random) -> bytes:
    out = [line.encode() for line in lines]
    out.insert(rng.randrange(len(out) + 1), lines[-1].encode() + b"x" * (2 * 1024 * 1024))
    return b"\n".join(out)


def _utf16(lines: list[str], rng: random.Random) -> bytes:
    return "\n".join(lines).encode("utf-16")


def _crlf(lines: list[str], rng: random.Random) -> bytes:
    return "\r\n".join(lines).encode()


def _empty(lines: list[str], rng: random.Random) -> bytes:
    return b""


DAMAGE = {
    f.__name__.lstrip("_"): f
    for f in (
        _truncated,
        _swapped,
        _impossible_dates,
        _impossible_numbers,
        _random_bytes,
        _nul_bytes,
        _long_line,
        _utf16,
        _crlf,
        _empty,
    )
}
# Damage that always leaves lines to count: skipped, bad, or numbers left empty.
COUNTED = {"random_bytes", "long_line"}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_damaged_logs_are_read_or_refused_in_one_line(tmp_path, sample, damage):
    source, stamped = SAMPLES[sample]
    lines = source.read_text(encoding="utf-8").splitlines()
    rng = random.Random(f"{sample}/{damage}")
    path = tmp_path / f"{sample}.log"
    path.write_bytes(DAMAGE[damage](lines, rng))
    result = runner.invoke(app, ["analyze", str(path), "--json", *ARGS])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # The CLI prints a DiagnosticsError in one line and exits 2; anything else is a traceback.
        assert isinstance(result.exception, DiagnosticsError), (
            f"{sample}/{damage}: {type(result.exception).__name__}: {result.exception}"
        )
        assert damage == "empty" and "the file is empty" in str(result.exception), (sample, damage)
        return
    assert damage != "empty"
    assert result.exit_code == 0, result.output
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    info = parse_log(path, date=DAY, year=YEAR).info
    counted = info.num_unknown_lines + info.num_bad_lines + info.num_bad_values
    detail = checks["log_lines"]["detail"]
    assert f"{info.num_unknown_lines} lines with no known prefix skipped" in detail
    assert f"{info.num_bad_lines} bad lines" in detail and f"{info.num_bad_values} malformed numbers" in detail
    if damage in COUNTED or (damage == "impossible_dates" and stamped):
        assert counted > 0 and checks["log_lines"]["status"] == "warn", (sample, damage, detail)
    if damage in ("utf16", "crlf"):
        assert counted == 0, (sample, damage, detail)


@pytest.mark.parametrize(
    "content",
    [
        b"[2026-09-23|21:03:12] INFO     Resolved config: x\n[2419-91-37|94:25:02] INFO     Decode batch, "
        b"#running-req: 1, gen throughput (token/s): 10.00\n",
        b"slot print_timing: id  0 | task 0 | " + b"x" * (2 * 1024 * 1024) + b"\n",
        b"",
    ],
    ids=["garbled-stamp", "2MB-line", "empty"],
)
def test_the_installed_cli_exits_0_or_2_without_a_traceback(tmp_path, content):
    path = tmp_path / "engine.log"
    path.write_bytes(content)
    proc = subprocess.run(
        [sys.executable, "-c", "from tokdrift.cli.diag import main; main()", "analyze", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["verdict"]
    else:
        assert str(path) in proc.stderr
