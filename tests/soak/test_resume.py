"""kill -9 of the driver, then `soak resume`: the same run goes on from what was written."""

import json
import os
import signal
import subprocess
import sys
import time

from rundir import reader
from rundir.reader import read_rows
from tests.soak.conftest import ROOT, write_trace

SOAK = [sys.executable, "-c", "from tokdrift.cli.soak import main; main()"]


def test_kill_9_then_resume_continues_the_same_run(tmp_path, fake_server):
    server = fake_server("--token-delay", "0.01")
    trace = write_trace(tmp_path / "trace.jsonl", sessions=3, turns=8, think=0.2, gap=0.3)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *SOAK,
            "run",
            "--trace",
            str(trace),
            "--seconds",
            "8",
            "--target",
            server.url,
            "-o",
            str(run_dir),
            "--flush-every",
            "0.3",
            "--probe-every",
            "0",
            "--probe-tokens",
            "16",
            "--probe-output",
            "8",
            "--no-profiles",
            "--concurrency",
            "3",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(read_rows(run_dir, "requests", ["status"])) < 6:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    before = read_rows(run_dir, "requests", ["session", "turn", "status", "kind"])
    assert len(before) >= 6
    assert reader.read_manifest(run_dir).status == "running"  # nobody could write anything else
    status = subprocess.run([*SOAK, "status", str(run_dir)], cwd=ROOT, capture_output=True, text=True)
    assert status.returncode == 0 and "running" in status.stdout

    resumed = subprocess.run([*SOAK, "resume", str(run_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    manifest = reader.read_manifest(run_dir)
    assert manifest.status == "completed" and manifest.run_id == "run"
    assert len(manifest.raw["resumes"]) == 1 and manifest.raw["resumes"][0]["previous_status"] == "running"
    assert 7.5 <= manifest.raw["elapsed_s"] < 30  # the 8 s budget spans both runs, not 8 s each
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds.count("start") == 1 and kinds.count("resume") == 1 and kinds[-1] == "stop"
    assert kinds.index("resume") > kinds.index("start")
    # The resumed engine is a new life, and probe cycles go on from the last one written.
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0, 1]
    probes = reader.read_table(run_dir, "probes").sort_values("t")
    assert list(probes["cycle"]) == [0, 1, 2] and list(probes["reason"]) == ["start", "start", "end"]
    assert list(probes["engine_life"]) == [0, 1, 1]
    probe_ids = [
        r["request_id"] for r in read_rows(run_dir, "requests", ["request_id", "kind"]) if r["kind"] == "probe"
    ]
    assert probe_ids == ["probe-0-start", "probe-1-start", "probe-2-end"]

    after = read_rows(run_dir, "requests", ["session", "turn", "status", "kind"])
    assert after[: len(before)] == before  # nothing written was lost or rewritten
    sent = [(r["session"], r["turn"]) for r in after if r["kind"] != "probe" and r["status"] != "aborted"]
    assert len(sent) == len(set(sent))  # no call written before the kill was sent again
    # Sessions in progress at the kill went on from their next turn, not from turn 0.
    last_before = {}
    for r in before:
        if r["kind"] != "probe":
            last_before[r["session"]] = max(last_before.get(r["session"], -1), r["turn"])
    new = after[len(before) :]
    for session, turn in last_before.items():
        later = [r["turn"] for r in new if r["session"] == session and r["kind"] != "probe"]
        if later:
            assert min(later) == turn + 1, (session, turn, later)
    assert any(r["session"] in last_before for r in new if r["kind"] != "probe")


def test_a_completed_run_is_not_resumed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_text(
        json.dumps({"schema_version": 1, "run_id": "run", "status": "completed", "started_at": "2026-01-01T00:00:00Z"})
    )
    proc = subprocess.run([*SOAK, "resume", str(run_dir)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "completed" in proc.stderr and "Traceback" not in proc.stderr


def test_a_malformed_trace_line_is_named_and_nothing_is_started(tmp_path):
    trace = write_trace(tmp_path / "trace.jsonl", sessions=1, turns=2)
    lines = trace.read_text().splitlines()
    lines.insert(
        2, '{"t": 1.0, "session": "s9", "turn": 0, "hash_ids": [1, "x"], "input_tokens": 4, "output_tokens": 1}'
    )
    trace.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    proc = subprocess.run(
        [*SOAK, "run", "--trace", str(trace), "--seconds", "5", "-o", str(run_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{trace}:3: hash_ids: expected a list of integers" in proc.stderr.replace("\n", "")
    assert not run_dir.exists()


def test_ctrl_c_stops_cleanly_as_interrupted(tmp_path, fake_server):
    server = fake_server("--token-delay", "0.01")
    trace = write_trace(tmp_path / "trace.jsonl", sessions=2, turns=20, think=0.1)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *SOAK,
            "run",
            "--trace",
            str(trace),
            "--seconds",
            "60",
            "--target",
            server.url,
            "-o",
            str(run_dir),
            "--flush-every",
            "0.5",
            "--probe-every",
            "0",
            "--probe-tokens",
            "16",
            "--probe-output",
            "8",
            "--no-profiles",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(read_rows(run_dir, "requests", ["status"])) < 3:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()[-2000:]
    assert "Traceback" not in err.decode()
    manifest = reader.read_manifest(run_dir)
    assert manifest.status == "interrupted" and manifest.ended_at is not None
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "stop" and events[-1]["status"] == "interrupted"
    assert "interrupted" in out.decode()  # the summary printed at the end
    rows = read_rows(run_dir, "requests", ["status"])
    assert {r["status"] for r in rows} <= {"ok", "aborted"}


def test_resume_refuses_a_trace_that_changed(tmp_path, fake_server):
    server = fake_server()
    trace = write_trace(tmp_path / "trace.jsonl", sessions=1, turns=2)
    run_dir = tmp_path / "run"
    subprocess.run(
        [
            *SOAK,
            "run",
            "--trace",
            str(trace),
            "--seconds",
            "1",
            "--target",
            server.url,
            "-o",
            str(run_dir),
            "--probe-tokens",
            "8",
            "--probe-output",
            "4",
            "--no-profiles",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["status"] = "running"  # as a SIGKILL would leave it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    write_trace(trace, sessions=2, turns=2)
    proc = subprocess.run([*SOAK, "resume", str(run_dir)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "different file" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_directory_that_names_decode_path_still_resumes_with_it(tmp_path):
    """A run soaked before the option was renamed (forward_path, was decode_path) keeps the words it
    was given: `soak resume` reads its config from the manifest, and the engine it restarts takes the
    same path."""
    import warnings

    from soak.config import SoakConfig

    trace = write_trace(tmp_path / "trace.jsonl")
    written = SoakConfig(trace=str(trace), duration_s=60.0).to_json() | {"engine_args": ["--decode-path=reference"]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = SoakConfig.from_json(json.loads(json.dumps(written)))
    assert config.engine_args == ("--decode-path=reference",)  # the manifest stays as it was written
    assert config.engine_options.engine == {"forward_path": "reference"}
    assert config.engine_options.engine_config().forward_path == "reference"
    assert any("decode_path is now named forward_path" in str(w.message) for w in caught)


def test_the_resume_point_counts_on_from_what_was_written(tmp_path):
    """Request rows give the trace position, start events the engine and control lives (a torn last
    event, as a kill -9 leaves it, is skipped), probe rows the next cycle."""
    from rundir.writer import RunStore
    from soak.resume import resume_point

    store = RunStore(tmp_path)
    for life in (0, 1):
        store.event("engine_start", pid=10 + life, engine_life=life)
    store.event("control_start", pid=20, control_life=0, url="http://x")
    for turn, status in enumerate(("ok", "ok", "aborted")):
        store.add(
            "requests", {"request_id": f"a@0#{turn}", "session": "a@0", "turn": turn, "t_send": 1.0, "status": status}
        )
    store.add("probes", {"t": 1.0, "decode_tps": 60.0, "cycle": 6})
    store.close()
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"t": 9.0, "kind": "engine_start", "engine_life": 7')
    at = resume_point(tmp_path)
    assert (at.engine_life, at.control_life, at.next_cycle, at.num_calls) == (1, 0, 7, 3)
    assert at.position.loop == 0 and at.position.next_turn == {"a": 2}
