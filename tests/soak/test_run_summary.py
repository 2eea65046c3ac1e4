"""`soak status`: a run's summary from what is on disk."""

from rundir.manifest import RunManifest
from rundir.writer import RunStore
from soak.run_summary import render, summarize


def _run(tmp_path, probe_age_s):
    store = RunStore(tmp_path / "run")
    store.write_manifest(RunManifest(run_id="run", status="completed", started_at="t0", target="http://remote:8000"))
    store.event("start", t=1.0, run_id="run")
    store.event("engine_start", t=1.0, engine_life=0)
    for cycle, tps in enumerate((60.0, 48.0)):
        store.add("requests", {"request_id": f"probe-{cycle}", "t_send": 2.0 + cycle, "status": "ok", "kind": "probe"})
        store.add(
            "probes",
            {
                "t": 2.0 + cycle,
                "engine_life": 0,
                "engine_age_s": probe_age_s,
                "decode_tps": tps,
                "status": "ok",
                "role": "main",
                "cycle": cycle,
            },
        )
    store.close()
    return tmp_path / "run"


def test_status_counts_what_the_run_wrote(tmp_path):
    s = summarize(_run(tmp_path, 30.0))
    assert s.requests == {"ok": 2} and s.events == {"start": 1, "engine_start": 1} and s.num_engine_starts == 1
    assert s.probes == [(0, 30.0, 60.0), (0, 30.0, 48.0)]
    assert "probes: 2 ok; first 60.0 tok/s, last 48.0 tok/s (life 0, age 30 s)" in render(s)


def test_status_of_a_remote_engine_whose_age_is_unknown(tmp_path):
    """A URL target whose process start cannot be read (another machine's) has probes without an
    engine age: the summary still says what they read."""
    s = summarize(_run(tmp_path, None))
    assert s.probes == [(0, None, 60.0), (0, None, 48.0)]
    assert "probes: 2 ok; first 60.0 tok/s, last 48.0 tok/s (life 0, age 0 s)" in render(s)


def test_status_counts_the_events_written_and_not_a_torn_last_line(tmp_path):
    run = _run(tmp_path, 30.0)
    with open(run / "events.jsonl", "a") as f:
        f.write('{"t": 9.0, "kind": "engine_start", "engine_li')  # a crash mid-write
    s = summarize(run)
    assert s.events == {"start": 1, "engine_start": 1} and s.num_engine_starts == 1


def test_status_says_where_the_running_verdict_was_decided(tmp_path):
    from rundir.manifest import Decided
    from rundir.reader import read_manifest

    run = _run(tmp_path, 30.0)
    manifest = read_manifest(run)
    manifest.decided, manifest.stop_reason = Decided("no_degradation", 12, 90.0, "decided: healthy"), "decided"
    RunStore(run).write_manifest(manifest)
    text = render(summarize(run))
    assert "run run: completed (stopped once decided (--until-decided))" in text
    assert "  decided at probe cycle 12, 1.5 min into the soak: decided: healthy" in text
