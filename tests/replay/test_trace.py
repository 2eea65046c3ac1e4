import json
import subprocess
import sys

import pytest

from replay import Call, TraceError, TraceHeader, TraceWriter, read_trace, write_trace


def _call(i, **kw):
    base = dict(t=float(i), session="s0", turn=i, hash_ids=(1, 2, 3 + i), input_tokens=150 + i, output_tokens=10)
    return Call(**{**base, **kw})


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "t.jsonl"
    calls = [
        _call(0),
        _call(1, reasoning_tokens=4, think_time=2.5, kind="compaction", cached_tokens=128, ttft=0.2, duration=1.5),
        _call(2, kind="subagent", parent="s0", session="s0/sub", messages=[{"role": "user", "content": "hi"}]),
    ]
    header = TraceHeader(block_size=64, source="test", created="2026-09-23T21:03:12+00:00", meta={"max_context": 4096})
    assert write_trace(path, header, calls) == 3
    trace = read_trace(path)
    assert trace.header == header
    assert trace.calls == calls
    assert trace.num_bad == 0
    first = json.loads(path.read_text().splitlines()[0])
    assert first["format"] == "tokdrift-trace" and first["version"] == 1


def _write_lines(path, lines):
    header = {"format": "tokdrift-trace", "version": 1, "block_size": 16, "source": "test"}
    path.write_text("\n".join([json.dumps(header)] + lines) + "\n")


GOOD = '{"t": 0, "session": "a", "turn": 0, "hash_ids": [1], "input_tokens": 10, "output_tokens": 2}'


@pytest.mark.parametrize(
    "line, expected",
    [
        ('{"t": 0, "session": "a", "turn": 0, "hash_ids": [1], "input_tokens": 10}', "missing field output_tokens"),
        (
            '{"t": 0, "session": "a", "turn": 0, "hash_ids": [1, "x"], "input_tokens": 10, "output_tokens": 2}',
            "hash_ids: expected a list of integers",
        ),
        (
            '{"t": -1, "session": "a", "turn": 0, "hash_ids": [], "input_tokens": 10, "output_tokens": 2}',
            "t: expected a number of seconds >= 0, found -1",
        ),
        (
            '{"t": 0, "session": "a", "turn": 0, "hash_ids": [], "input_tokens": 10, "output_tokens": 2, "kind": "chat"}',
            "kind: expected one of turn, compaction, subagent, found 'chat'",
        ),
        (
            '{"t": 0, "session": "a", "turn": 0, "hash_ids": [], "input_tokens": 10, "output_tokens": 2, '
            '"reasoning_tokens": 5}',
            "reasoning_tokens: expected at most output_tokens (2), found 5",
        ),
        (
            '{"t": 0, "session": "a", "turn": 0, "hash_ids": [], "input_tokens": 1.5, "output_tokens": 2}',
            "input_tokens: expected an integer >= 0, found 1.5",
        ),
        (
            '{"t": 0, "session": 7, "turn": 0, "hash_ids": [], "input_tokens": 1, "output_tokens": 2}',
            "session: expected a non-empty string, found 7",
        ),
        ("[1, 2]", "expected an object, found [1, 2]"),
        ('{"t": 0, "session": ', "not valid JSON"),
    ],
)
def test_malformed_line_names_file_line_and_problem(tmp_path, line, expected):
    path = tmp_path / "bad.jsonl"
    _write_lines(path, [GOOD, line, GOOD])
    with pytest.raises(TraceError) as info:
        read_trace(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ")
    assert expected in message


def test_skip_bad_counts_and_skips(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write_lines(path, [GOOD, "{oops", GOOD, '{"t": 0}', GOOD])
    trace = read_trace(path, skip_bad=True)
    assert len(trace.calls) == 3
    assert trace.num_bad == 2
    assert trace.bad_lines[0].startswith(f"{path}:3: ")
    assert trace.bad_lines[1].startswith(f"{path}:5: missing field")


@pytest.mark.parametrize(
    "header, expected",
    [
        ({"format": "tokdrift-trace", "version": 2, "block_size": 16}, "understands trace version 1, found 2"),
        ({"format": "mooncake", "version": 1, "block_size": 16}, 'expected a header with "format": "tokdrift-trace"'),
        ({"format": "tokdrift-trace", "version": 1, "block_size": 0}, "block_size: expected an integer >= 1, found 0"),
        ({"format": "tokdrift-trace", "version": 1}, "header is missing block_size"),
    ],
)
def test_bad_header_is_refused(tmp_path, header, expected):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(header) + "\n" + GOOD + "\n")
    with pytest.raises(TraceError, match=expected.replace("(", r"\(").replace(")", r"\)")) as info:
        read_trace(path, skip_bad=True)  # a bad header is never skipped
    assert str(info.value).startswith(f"{path}:1: ")


def test_empty_and_missing_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(TraceError, match="empty file"):
        read_trace(tmp_path / "empty.jsonl")
    with pytest.raises(TraceError, match="cannot open trace"):
        read_trace(tmp_path / "nope.jsonl")


def test_writer_flushes_each_call_and_append_cuts_a_torn_line(tmp_path):
    path = tmp_path / "rec.jsonl"
    header = TraceHeader(block_size=16, source="record")
    writer = TraceWriter(path, header, append=True)
    writer.write(_call(0))
    # Readable while the writer is still open: nothing waits in a buffer.
    assert len(read_trace(path).calls) == 1
    writer.close()
    with open(path, "a") as f:
        f.write('{"t": 1, "session": "s0", "tu')  # a crash mid-line
    with TraceWriter(path, header, append=True) as writer:
        writer.write(_call(1))
    trace = read_trace(path)
    assert [c.turn for c in trace.calls] == [0, 1]
    with pytest.raises(TraceError, match="block_size 64 differs from the trace's 16"):
        TraceWriter(path, TraceHeader(block_size=64, source="record"), append=True)


def test_importing_replay_does_not_import_torch():
    code = (
        "import sys\n"
        "import replay, tokdrift.cli.trace, replay.proxy, replay.synth, replay.stats, replay.importers, replay.materialize\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_writer_refuses_a_bad_path_and_a_file_that_is_not_a_trace(tmp_path):
    header = TraceHeader(block_size=16, source="record")
    with pytest.raises(TraceError, match="cannot write trace"):
        TraceWriter(tmp_path / "no" / "such" / "dir.jsonl", header)
    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"hello": 1}\n')
    with pytest.raises(TraceError, match="expected a header"):
        TraceWriter(notes, header, append=True)
    assert notes.read_text() == '{"hello": 1}\n'  # left alone
