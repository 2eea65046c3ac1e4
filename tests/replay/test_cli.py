"""`soak trace ...` end to end, and the docs' example command."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from replay import TraceError, read_trace
from tokdrift.cli.trace import trace_app

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
runner = CliRunner()


def test_synth_then_stats_json(tmp_path):
    out = tmp_path / "a.jsonl"
    result = runner.invoke(
        trace_app,
        [
            "synth",
            "--profile",
            "agentic",
            "--seed",
            "5",
            "--sessions",
            "3",
            "--calls-min",
            "5",
            "--calls-max",
            "9",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "3 sessions" in result.output
    result = runner.invoke(trace_app, ["stats", str(out), "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.output)
    trace = read_trace(out)
    assert stats["num_calls"] == len(trace.calls) and stats["num_sessions"] == 3
    assert stats["max_context"] == 230_000 and 0.5 < stats["prefix_reuse"] < 1
    table = runner.invoke(trace_app, ["stats", str(out)])
    assert "prefix reuse" in table.output and "3 sessions" in table.output


def test_import_writes_a_readable_trace(tmp_path):
    out = tmp_path / "oc.jsonl"
    result = runner.invoke(
        trace_app,
        ["import", "opencode", str(FIXTURES / "opencode_export.json"), "-o", str(out), "--prefix-tokens", "4096"],
    )
    assert result.exit_code == 0, result.output
    trace = read_trace(out)
    assert trace.header.meta["prefix_tokens"] == 4096
    assert [c.kind for c in trace.calls].count("compaction") == 1


def test_stats_of_a_malformed_trace_is_one_line_error_or_skipped(tmp_path):
    path = tmp_path / "bad.jsonl"
    lines = (ROOT / "examples" / "opencode.jsonl").read_text().splitlines()[:5]
    lines[3] = lines[3].replace('"input_tokens"', '"input_tokenz"')
    path.write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-c", "from tokdrift.cli.soak import main; main()", "trace", "stats", str(path)]
    env = {**os.environ, "COLUMNS": "1000"}  # rich wraps long messages at the terminal width
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {path}:4: missing field input_tokens"]
    proc = subprocess.run(cmd + ["--skip-bad", "--json"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert (stats["num_calls"], stats["num_skipped_lines"]) == (3, 1)


def test_record_refuses_a_bad_listen_address(tmp_path):
    result = runner.invoke(
        trace_app,
        ["record", "--upstream", "http://127.0.0.1:1", "--listen", "nowhere", "-o", str(tmp_path / "r.jsonl")],
    )
    assert isinstance(result.exception, TraceError)
    assert "--listen: expected HOST:PORT, found 'nowhere'" in str(result.exception)


def test_docs_example_command_rebuilds_the_example_trace(tmp_path):
    doc = (ROOT / "docs" / "trace-format.md").read_text()
    block = re.search(r"<!-- example-command -->\s*```\s*(.+?)\s*```", doc, re.S).group(1)
    args = shlex.split(block)
    assert args[:3] == ["soak", "trace", "synth"]
    out = tmp_path / "example.jsonl"
    args[args.index("-o") + 1] = str(out)
    result = runner.invoke(trace_app, args[2:])
    assert result.exit_code == 0, result.output
    assert out.read_text() == (ROOT / "examples" / "opencode.jsonl").read_text()
    calls = read_trace(out).calls
    assert len({c.session for c in calls}) == 4 and 30 <= len(calls) <= 60
    assert max(c.input_tokens for c in calls) < 6000  # sized for the built-in engine on two CPU cores


def test_docs_format_example_is_a_valid_trace(tmp_path):
    doc = (ROOT / "docs" / "trace-format.md").read_text()
    block = re.search(r"```json\n(.+?)```", doc, re.S).group(1)
    path = tmp_path / "doc.jsonl"
    path.write_text(block)
    trace = read_trace(path)
    assert len(trace.calls) == 4 and trace.calls[-1].kind == "compaction"
    for call in trace.calls:
        assert len(call.hash_ids) == -(-call.input_tokens // trace.header.block_size)
