"""The twin: a second built-in engine probed beside the soaked one every cycle. Here both engines
are the fake server started as `soak serve` would be, each writing a journal of the generations it
served, so the tests see the exact sequence of calls each engine got."""

import asyncio
import json
import os
import sys

import pytest

from rundir import reader
from soak.config import SoakConfig
from soak.run import Soak
from soak.targets import BuiltinTarget
from tests.soak.conftest import write_trace


def _fake_engines(monkeypatch, journal, control_args=()):
    """Every built-in engine the soak starts is the fake server; the twin (its log is control.log)
    gets `control_args` too."""
    journal.mkdir()

    def command(self):
        args = [sys.executable, "-m", "tests.soak.fake_server", "--token-delay", "0.004", "--journal", str(journal)]
        return args + list(control_args) if self.log_path.name == "control.log" else args

    monkeypatch.setattr(BuiltinTarget, "command", property(command))


def _soak(tmp_path, **kw):
    tmp_path.mkdir(exist_ok=True)
    trace = write_trace(tmp_path / "trace.jsonl", sessions=3, turns=6, think=0.1, gap=0.2)
    options = dict(
        trace=str(trace),
        duration_s=7.0,
        concurrency=2,
        speed=2.0,
        probe_every_s=1.0,
        probe_input_tokens=16,
        probe_output_tokens=8,
        flush_every_s=0.5,
        sample_every_s=0.4,
        profiles=False,
        probe_wait_s=5.0,
        twin_restart_every_s=2.5,
        engine_start_timeout_s=30.0,
    )
    options.update(kw)
    run_dir = tmp_path / "run"
    status = asyncio.run(Soak(SoakConfig(**options), run_dir, command=["soak", "run"]).run())
    return status, run_dir


def _events(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def _journal(journal, port):
    path = journal / f"{port}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_twin_probes_pair_by_cycle_alone_in_alternating_order(tmp_path, monkeypatch):
    journal = tmp_path / "journal"
    _fake_engines(monkeypatch, journal)
    status, run_dir = _soak(tmp_path)
    assert status == "completed"
    events = _events(run_dir)
    main_ports = {e["port"] for e in events if e["kind"] == "engine_start"}
    control_ports = {e["port"] for e in events if e["kind"] == "control_start"}
    assert main_ports and control_ports and not main_ports & control_ports

    # Every generation either engine served, in time order.
    served = sorted(
        [{**g, "role": "main"} for p in main_ports for g in _journal(journal, p)]
        + [{**g, "role": "control"} for p in control_ports for g in _journal(journal, p)],
        key=lambda g: g["t0"],
    )
    assert all(g["probe"] for g in served if g["role"] == "control")  # the twin takes no replay traffic

    probes = reader.read_table(run_dir, "probes")
    assert set(probes["role"]) == {"main", "control"} and probes["status"].eq("ok").all()
    assert probes["probe_id"].nunique() == 1
    by_cycle = probes.sort_values("t").groupby("cycle", sort=True)
    assert list(by_cycle.groups) == list(range(len(by_cycle)))  # 0, 1, 2, ... with no gap
    for number, rows in by_cycle:
        order = list(rows["role"])
        assert order == (["main", "control"] if number % 2 == 0 else ["control", "main"]), (number, order)
        assert rows["reason"].nunique() == 1  # the control's probe carries its main probe's reason
    reasons = list(probes.sort_values("t").drop_duplicates("cycle")["reason"])
    assert reasons[0] == "start" and "periodic" in reasons
    assert reasons[-7:] == ["end", *["after_restart"] * 6]  # the restart control

    # The exact sequence of probe calls: each probe, preceded by a warm-up on an engine life's first one.
    expected, cycle_of_call, seen = [], [], set()
    for _, row in probes.sort_values(["cycle", "t"]).iterrows():
        num_calls = 1 if (row["role"], row["engine_life"]) in seen else 2
        seen.add((row["role"], row["engine_life"]))
        expected += [row["role"]] * num_calls
        cycle_of_call += [row["cycle"]] * num_calls
    probe_calls = [g for g in served if g["probe"]]
    assert [g["role"] for g in probe_calls] == expected
    for a, b in zip(probe_calls, probe_calls[1:]):  # back to back, never side by side
        assert a["t1"] <= b["t0"] + 0.005
    # While a cycle's probes ran, the main engine served nothing else.
    replayed = [g for g in served if not g["probe"]]
    assert len(replayed) >= 6
    windows = _windows(probe_calls, cycle_of_call)
    for g in replayed:
        assert all(g["t1"] <= w0 + 0.005 or g["t0"] >= w1 - 0.005 for w0, w1 in windows), g

    # The twin was restarted on its schedule, between cycles, never during one.
    restarts = [e for e in events if e["kind"] == "control_restart"]
    assert restarts and all(e["reason"] == "scheduled" for e in restarts)
    starts = [e for e in events if e["kind"] == "control_start"]
    assert [e["control_life"] for e in starts] == list(range(len(starts))) and len(starts) == len(restarts) + 1
    for restart, start in zip(restarts, starts[1:]):
        assert all(restart["t"] >= w1 or start["t"] <= w0 for w0, w1 in windows), (restart, start)
    control = probes[probes["role"] == "control"]
    assert control["engine_life"].nunique() >= 2 and control["engine_age_s"].max() < 2.5 + 3.0

    # Control probes are not the main engine's traffic; control events are not engine lives.
    requests = reader.read_table(run_dir, "requests")
    main = probes[probes["role"] == "main"]
    assert sorted(requests.loc[requests["kind"] == "probe", "request_id"]) == sorted(
        f"probe-{c}-{r}" for c, r in zip(main["cycle"], main["reason"])
    )
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0, 1]
    assert not any("engine_life" in e for e in events if e["kind"].startswith("control_"))

    manifest = reader.read_manifest(run_dir).raw
    assert manifest["control"] == {
        "kind": "twin",
        "url": manifest["control"]["url"],
        "restart_every_s": 2.5,
        "restart_after_probes": 16,
        "restart_cmd": None,
        "enabled": True,
        "why_off": None,
    }
    if len(os.sched_getaffinity(0)) >= 2:
        allowed = sorted(os.sched_getaffinity(0))
        assert manifest["affinity"] == {"driver": allowed[:1], "engine": allowed[1:]}
    assert (run_dir / "control.log").exists()
    snaps = reader.read_table(run_dir, "snapshots")
    for column in ("driver_cpu_percent", "driver_rss_bytes", "host_cpu_percent", "control_rss_bytes"):
        assert snaps[column].notna().any(), column
    assert snaps["driver_rss_bytes"].dropna().gt(1e7).all() and snaps["host_other_cpu_percent"].dropna().ge(0).all()


def _windows(probe_calls, cycle_of_call):
    """(start, end) of each cycle's calls, warm-ups included."""
    windows = {}
    for g, cycle in zip(probe_calls, cycle_of_call):
        window = windows.setdefault(cycle, [g["t0"], g["t1"]])
        window[0], window[1] = min(window[0], g["t0"]), max(window[1], g["t1"])
    return list(windows.values())


def test_a_twin_that_cannot_start_turns_off_and_the_soak_completes(tmp_path, monkeypatch):
    _fake_engines(monkeypatch, tmp_path / "journal", control_args=["--exit-at-once"])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # a 1-CPU machine
    status, run_dir = _soak(tmp_path, duration_s=3.0)
    assert status == "completed"
    events = _events(run_dir)
    off = [e for e in events if e["kind"] == "control_off"]
    assert len(off) == 1 and "could not start" in off[0]["why"] and "code 3" in off[0]["why"]
    assert not any(e["kind"] == "control_start" for e in events)
    probes = reader.read_table(run_dir, "probes")
    assert set(probes["role"]) == {"main"} and probes["cycle"].is_unique and len(probes) >= 3
    manifest = reader.read_manifest(run_dir).raw
    assert manifest["control"]["enabled"] is False and "could not start" in manifest["control"]["why_off"]
    assert manifest["affinity"] == {"why_off": "the soak may use 1 CPU; separate cores need at least 2"}


def test_no_twin_where_memory_is_short_and_with_no_twin(tmp_path, monkeypatch):
    import psutil

    class Memory:
        available, total = 3 * 2**30, 8 * 2**30

    _fake_engines(monkeypatch, tmp_path / "journal")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory())
    status, run_dir = _soak(tmp_path, duration_s=2.0, probe_every_s=0.0)
    assert status == "completed"
    control = reader.read_manifest(run_dir).raw["control"]
    assert control["kind"] == "twin" and not control["enabled"] and "3.0 GiB of memory available" in control["why_off"]
    assert [e["why"] for e in _events(run_dir) if e["kind"] == "control_off"] == [control["why_off"]]
    assert set(reader.read_table(run_dir, "probes")["role"]) == {"main"}

    status, run_dir = _soak(tmp_path / "off", duration_s=2.0, probe_every_s=0.0, twin=False, affinity=False)
    manifest = reader.read_manifest(run_dir).raw
    assert manifest["control"]["kind"] is None and manifest["control"]["why_off"] == "--no-twin"
    assert manifest["affinity"] == {"why_off": "--no-affinity"}
    assert not any(e["kind"].startswith("control_") for e in _events(run_dir))


def test_a_twin_that_dies_is_recorded_and_started_again(tmp_path, monkeypatch):
    import signal

    from soak import control as control_module

    _fake_engines(monkeypatch, tmp_path / "journal")
    killed = []
    keep = control_module.ControlEngine.keep

    async def keep_and_kill(self):  # kill the first twin once it has served a probe
        async def kill_later():
            while not (self.client and self.client.base_url and self.target.life == 0 and self.target.proc):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.5)
            killed.append(self.target.pid)
            os.kill(self.target.pid, signal.SIGKILL)

        task = asyncio.create_task(kill_later())
        try:
            await keep(self)
        finally:
            task.cancel()

    monkeypatch.setattr(control_module.ControlEngine, "keep", keep_and_kill)
    status, run_dir = _soak(tmp_path, duration_s=5.0, twin_restart_every_s=600.0)
    assert status == "completed" and killed
    events = _events(run_dir)
    exits = [e for e in events if e["kind"] == "control_exit"]
    assert len(exits) == 1 and exits[0]["exit_code"] == -signal.SIGKILL and exits[0]["control_life"] == 0
    assert [e["control_life"] for e in events if e["kind"] == "control_start"] == [0, 1]
    assert [e["engine_life"] for e in events if e["kind"] == "engine_start"] == [0, 1]  # the main one's alone
    control = reader.read_table(run_dir, "probes").query("role == 'control'")
    assert 1 in set(control["engine_life"])  # probed again after it came back


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"twin": True, "target": "http://127.0.0.1:9"}, "twin: expected off for a URL target"),
        ({"control_target": "http://127.0.0.1:9"}, "control_target: expected unset for the builtin target"),
        ({"target": "http://127.0.0.1:9", "control_target": "http://127.0.0.1:9"}, "a second instance"),
        ({"target": "http://127.0.0.1:9", "control_restart_cmd": "true"}, "control_restart_cmd: expected unset"),
        ({"twin_restart_every_s": 0}, "twin_restart_every_s: expected a number of seconds > 0"),
        ({"control_restart_after": 0}, "control_restart_after: expected a number of probes >= 1"),
        ({"twin_engine_args": ("--no-such-option",)}, "--twin-engine-arg / --fault"),
        (
            {"target": "http://127.0.0.1:9", "twin_engine_args": ("--fault-after=4",)},
            "twin_engine_args: expected none for a URL target",
        ),
    ],
)
def test_control_options_are_checked(kw, message):
    from soak.errors import SoakError

    with pytest.raises(SoakError, match=message):
        SoakConfig(trace="t.jsonl", duration_s=1.0, **kw)


def test_the_twin_has_the_soaked_engines_options_but_no_warm_up(tmp_path):
    """Restarted every ten minutes, the twin never gets old; a warm-up at every restart would take a
    core beside the soaked engine for half a minute. One the user asked for is kept."""
    from soak.control import ControlEngine, twin_options

    config = SoakConfig(
        trace=write_trace(tmp_path / "t.jsonl"), duration_s=5, engine_args=("--kv-tokens=2048", "--fault=gc-pressure")
    )
    control = ControlEngine(config, None, tmp_path, lambda *a, **k: None)
    assert control.target.options.engine == config.engine_options.engine  # the same engine, faults included
    assert control.target.options.server == {**config.engine_options.server, "warmup_chunks": 0}
    asked = SoakConfig(trace=config.trace, duration_s=5, engine_args=("--warmup-chunks=1",)).engine_options
    assert twin_options(asked) == asked


def test_the_twin_alone_takes_its_own_options_on_top_of_the_engines(tmp_path):
    from soak.control import ControlEngine

    config = SoakConfig(
        trace=write_trace(tmp_path / "t.jsonl"),
        duration_s=5,
        engine_args=("--kv-tokens=2048", "--fault-after=60"),
        faults=("output-buffer",),
        twin_engine_args=("--fault-after=4",),
    )
    control = ControlEngine(config, None, tmp_path, lambda *a, **k: None)
    assert config.engine_options.engine["fault_after"] == 60
    assert control.target.options.engine == {**config.engine_options.engine, "fault_after": 4}
    assert control.target.options.engine["faults"] == ["output-buffer"]


def test_the_twin_is_restarted_after_the_probes_it_answered(tmp_path, monkeypatch):
    # What ages an engine is the requests it served: a control that answers probes every cycle is
    # restarted after `control_restart_after` of them, long before its time is up.
    _fake_engines(monkeypatch, tmp_path / "journal")
    status, run_dir = _soak(
        tmp_path, duration_s=6.0, probe_every_s=0.5, twin_restart_every_s=600.0, control_restart_after=3
    )
    assert status == "completed"
    events = _events(run_dir)
    restarts = [e for e in events if e["kind"] == "control_restart"]
    assert restarts and {e["reason"] for e in restarts} == {"probes"}
    control = reader.read_table(run_dir, "probes").query("role == 'control'")
    per_life = control.groupby("engine_life").size()
    # the last life answers the end cycles too: no restart of the control between the restart
    # control's cycles, whose pairs must have one control on both sides of the main's restart
    # (a restart due after the last cycle leaves a life with no probe: restarts + 1 lives at most)
    assert len(per_life) <= len(restarts) + 1 and per_life.iloc[:-1].max() <= 3
    assert reader.read_manifest(run_dir).control["restart_after_probes"] == 3


@pytest.mark.parametrize("restart_cmd, warned", [(None, True), ("true", False)])
def test_a_url_control_that_cannot_be_restarted_is_warned_about(tmp_path, caplog, restart_cmd, warned):
    import logging

    from soak.control import ControlEngine

    config = SoakConfig(
        trace=write_trace(tmp_path / "t.jsonl"),
        duration_s=5,
        target="http://127.0.0.1:9",
        control_target="http://127.0.0.1:10",
        control_restart_cmd=restart_cmd,
        until_decided=True,
    )
    with caplog.at_level(logging.WARNING, logger="soak.control"):
        ControlEngine(config, None, tmp_path, lambda *a, **k: None)
    said = [r.getMessage() for r in caplog.records if "never restarted" in r.getMessage()]
    assert bool(said) == warned
    if warned:
        assert "--until-decided will not stop on 'no age'" in said[0]


def test_why_the_control_is_restarted_and_never_during_the_restart_control(tmp_path):
    import time

    from soak.control import VERIFY_AFTER_PROBES, ControlEngine, ControlRestart

    config = SoakConfig(
        trace=write_trace(tmp_path / "t.jsonl"), duration_s=5, control_restart_after=16, twin_restart_every_s=600
    )
    control = ControlEngine(config, None, tmp_path, lambda *a, **k: None)
    control._started(first=True)
    assert control._restart_due() is None
    for _ in range(VERIFY_AFTER_PROBES - 1):
        control.answered_probe()
    assert control.verify() and control._restart_due() is None  # too short a life to judge its age by
    control.answered_probe()
    assert control.verify() and control._restart_due() == ControlRestart.VERIFY
    with control.holding():
        assert control._restart_due() is None  # the restart control's cycles pair one control
    control._started(first=False)
    assert control.num_probes == 0 and control._restart_due() is None
    for _ in range(16):
        control.answered_probe()
    assert control._restart_due() == ControlRestart.PROBES
    control._started(first=False)
    control._started_wall = time.time() - 601
    assert control._restart_due() == ControlRestart.SCHEDULED
    control._turn_off("a test")
    assert not control.verify()
