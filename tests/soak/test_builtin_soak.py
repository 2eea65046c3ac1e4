"""A real soak on the built-in engine (default checkpoint, small KV pool, scaled-down example trace),
with the engine killed mid-run: recorded, started again, and the soak goes on to its restart control."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from diagnostics.source.source import load_source
from rundir import reader
from rundir.reader import read_rows
from tests.soak.conftest import ROOT

SOAK = [sys.executable, "-c", "from tokdrift.cli.soak import main; main()"]


def _events(run_dir):
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.timeout(240)
def test_builtin_soak_survives_an_engine_crash_and_writes_a_complete_run(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *SOAK,
            "run",
            "--trace",
            str(ROOT / "examples" / "opencode.jsonl"),
            "--seconds",
            "24",
            "--scale",
            "0.1",
            "--speed",
            "4",
            "--concurrency",
            "2",
            "--probe-every",
            "8",
            "--probe-tokens",
            "32",
            "--probe-output",
            "16",
            "--flush-every",
            "1",
            "--sample-every",
            "1",
            "--profile-drop",
            "0.3",
            "--engine-arg=--kv-tokens=200",
            "--engine-arg=--max-running-requests=2",
            "-o",
            str(run_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Kill the engine once replayed calls have been written.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        calls = (
            [
                r
                for r in read_rows(run_dir, "requests", ["kind", "status"])
                if r["kind"] != "probe" and r["status"] == "ok"
            ]
            if (run_dir / "requests").exists()
            else []
        )
        if len(calls) >= 2:
            break
        time.sleep(0.3)
    starts = [e for e in _events(run_dir) if e["kind"] == "engine_start"]
    assert len(starts) == 1, proc.stderr.read() if proc.poll() is not None else starts
    killed_at = time.time()
    os.kill(starts[0]["pid"], signal.SIGKILL)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]

    manifest = reader.read_manifest(run_dir)
    assert manifest.status == "completed" and manifest.raw["steps_source"] == "engine"
    assert manifest.raw["configs"]["engine"]["kv_tokens"] == 200
    assert manifest.raw["host"]["num_cpus"] >= 1

    events = _events(run_dir)
    kinds = [e["kind"] for e in events]
    exit_event = next(e for e in events if e["kind"] == "engine_exit")
    assert exit_event["exit_code"] == -signal.SIGKILL and exit_event["engine_life"] == 0
    assert "Resolved config" in exit_event["log_tail"] or "Prefill batch" in exit_event["log_tail"]
    # Started, crashed and started again, then restarted on purpose for the control probe; the twin's
    # starts are its own (control_start), not lives of the soaked engine.
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0, 1, 2]
    assert [e["control_life"] for e in events if e["kind"] == "control_start"] == [0]
    assert "control_exit" not in kinds and "control_off" not in kinds
    assert next(e for e in events if e["kind"] == "engine_restart")["reason"] == "control"
    assert kinds[0] == "start" and kinds[-1] == "stop"

    requests = reader.read_table(run_dir, "requests")
    calls = requests[requests["kind"] != "probe"]
    assert set(calls["status"]) <= {"ok", "error", "refused", "aborted"}  # aborted: cut at the deadline
    assert calls["status"].eq("ok").sum() >= 2 and 0 in set(calls["engine_life"])
    refused = calls[calls["status"] == "refused"]  # prompts over the 200-token pool
    assert len(refused) >= 1 and refused["error"].str.contains("exceeds").all()
    assert any(e["kind"] == "dropped_request" and e["limit"] == 200 for e in events)
    ok = calls[calls["status"] == "ok"]
    assert (ok["t_send"] < ok["t_first_token"]).all() and (ok["t_first_token"] <= ok["t_last_token"]).all()
    assert ok["prompt_tokens"].gt(0).all() and ok["output_tokens"].gt(0).all()

    all_probes = reader.read_table(run_dir, "probes")
    assert all_probes["probe_id"].nunique() == 1
    probes = all_probes[all_probes["role"] == "main"]
    assert list(probes["reason"])[0] == "start" and list(probes["reason"])[-6:] == ["after_restart"] * 6
    ok_probes = probes[probes["status"] == "ok"]
    assert len(ok_probes) >= 3 and ok_probes["decode_tps"].gt(0).all()
    assert probes["engine_life"].iloc[-1] == 2
    assert (probes.loc[probes["reason"] == "end", "engine_life"] == 1).all()  # the soak went on after the crash
    twin = all_probes[all_probes["role"] == "control"]  # the young twin, probed in every cycle, never restarted
    assert sorted(twin["cycle"]) == sorted(probes["cycle"]) and twin["engine_life"].eq(0).all()
    assert twin["status"].eq("ok").all() and "Resolved config" in (run_dir / "control.log").read_text()
    assert manifest.raw["control"]["kind"] == "twin" and manifest.raw["control"]["enabled"]

    steps = reader.read_table(run_dir, "steps")
    assert {"decode", "prefill"} <= set(steps["phase"]) and steps["step_time_s"].notna().any()
    assert set(steps["engine_life"]) >= {0, 1, 2}
    snaps = reader.read_table(run_dir, "snapshots")
    assert snaps["radix_nodes"].notna().any() and snaps["rss_bytes"].dropna().gt(1e7).all()
    # Only a sample taken between the kill and the soak noticing it finds no process to measure. A
    # snapshot is stamped when its round begins and measures the process last (soak.watch), so the
    # round in flight at the kill, stamped just before it, may be one of them; rounds run one at a time.
    without_rss = snaps.loc[snaps["rss_bytes"].isna(), "t"]
    killed = pd.Timestamp(killed_at, unit="s")
    in_flight = snaps.loc[snaps["t"] <= killed, "t"].max()
    window = (in_flight if pd.notna(in_flight) else killed, pd.Timestamp(exit_event["t"] + 1.0, unit="s"))
    assert without_rss.between(*window).all(), (without_rss.tolist(), window)
    assert snaps["control_rss_bytes"].gt(1e7).any() and snaps["driver_rss_bytes"].gt(1e7).all()
    assert snaps["kv_free_tokens"].dropna().between(0, 200).all()
    assert "Resolved config" in (run_dir / "engine.log").read_text()

    profiles = list((run_dir / "profiles").glob("*.speedscope.json"))
    profile_events = [e for e in events if e["kind"] == "profile"]
    assert len(profiles) == len(profile_events)  # py-spy may lack permission; then neither exists
    if profiles:
        assert json.loads(profiles[0].read_text())["$schema"].startswith("https://www.speedscope.app")

    source = load_source(run_dir)
    assert source.engine == "tokdrift" and len(source.steps) == len(steps)
    status = subprocess.run([*SOAK, "status", str(run_dir)], cwd=ROOT, capture_output=True, text=True)
    assert "completed" in status.stdout and "1 crash(es)" in status.stdout and "control probes:" in status.stdout
    # Not on a terminal: the running verdict after every probe cycle.
    assert err.count("verdict so far: ") == len(probes) and "probe cycle 0 (start): main " in err


def test_ctrl_c_while_the_engine_starts_stops_at_once_and_leaves_no_engine(tmp_path):
    import psutil

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *SOAK,
            "run",
            "--trace",
            str(ROOT / "examples" / "opencode.jsonl"),
            "--minutes",
            "5",
            "--no-profiles",
            "-o",
            str(run_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    children = []
    while time.monotonic() < deadline and not children:
        children = psutil.Process(proc.pid).children()
        time.sleep(0.1)
    assert children, "the engine was never started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert reader.read_manifest(run_dir).status == "interrupted"
    kinds = [e["kind"] for e in _events(run_dir)]
    assert "probe" not in kinds and kinds[-1] == "stop"  # it stopped waiting for the engine, not after
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
