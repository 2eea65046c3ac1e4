"""The step record of tokdrift's vLLM plugin, written by the plugin's own writer from stand-ins
for vLLM's stats objects, read as steps and events; and diag on such a record."""

import json

import numpy as np
import pandas as pd
import pytest

from diagnostics.source.source import load_source
from logformats import looks_like_log, parse_log
from logformats.errors import LogFormatError
from rundir.schema import StepPhase
from tests.logformats import analyze_json
from tests.vllm_plugin import (
    IterationDetails,
    IterationStats,
    SchedulerStats,
    decode_step,
    prefill_end,
    vllm_config,
)
from vllm_plugin.fault import StepCostSpec
from vllm_plugin.steps import StepWriter, engine_header


def write_record(path, lives, fault=None, details=False, utc_offset_s=0, pids=None):
    """One start line per life, then its steps ((SchedulerStats, IterationStats) pairs); `pids`, the
    pid each start line states (the API server's), else this process's."""
    writer = StepWriter(str(path), fault=fault)
    for k, (start_t, steps) in enumerate(lives):
        header = engine_header(vllm_config(details=details), 0, "0.32.0")
        header.update(t=start_t, utc_offset_s=utc_offset_s)
        if pids is not None:
            header["pid"] = pids[k]
        writer.start(header)
        for sched, it in steps:
            writer.step(sched, it)
    writer.close()
    return path


def one_life(t0):
    """A prefill, decodes at batch 1, a chunk beside a decode, a second prefill ending, decodes at batch 2."""
    chunk = (
        SchedulerStats(num_running_reqs=2, kv_cache_usage=0.15),
        IterationStats(t0 + 1.3, num_generation_tokens=1, inter_token_latencies_iter=[0.09]),
    )
    return [
        prefill_end(t0 + 1.0, prompt=1000, cached=600),
        decode_step(t0 + 1.1, batch=1, step_s=0.02, usage=0.1),
        decode_step(t0 + 1.2, batch=1, step_s=0.021, usage=0.1),
        chunk,
        prefill_end(t0 + 1.4, prompt=300, decoding=1, step_s=0.08),
        decode_step(t0 + 1.5, batch=2, step_s=0.03, usage=0.2),
        decode_step(t0 + 1.6, batch=2, step_s=0.03, usage=0.2, finished=1),
    ]


def test_a_step_record_is_detected_and_read_as_steps(tmp_path):
    path = write_record(tmp_path / "steps.jsonl", [(1000.0, one_life(1000.0))])
    assert looks_like_log(path) == "vllm-steps"
    parsed = parse_log(path)
    steps, info = parsed.steps, parsed.info
    assert (info.format, info.num_step_lines, info.kv_capacity, info.num_bad_lines) == ("vllm-steps", 7, 16000, 0)
    assert steps["phase"].tolist() == [
        StepPhase.PREFILL,
        StepPhase.DECODE,
        StepPhase.DECODE,
        StepPhase.MIXED,  # a running request made nothing: its prompt chunk was computing
        StepPhase.MIXED,
        StepPhase.DECODE,
        StepPhase.DECODE,
    ]
    decode = steps[steps["phase"] == StepPhase.DECODE]
    assert decode["step_time_s"].tolist() == [0.02, 0.021, 0.03, 0.03]
    assert decode["num_running_reqs"].tolist() == [1, 1, 2, 2]  # the last: one running after it, one finished in it
    assert decode["num_decode_tokens"].tolist() == [1, 1, 2, 2]
    assert decode["num_tokens"].tolist() == pytest.approx([1600, 1600, 3200, 3200])
    first = steps.iloc[0]
    assert (first["new_tokens"], first["cached_tokens"], first["cache_hit_rate"]) == (400, 600, 0.6)
    assert np.isnan(first["step_time_s"])  # a prefill step has no decode step time
    assert steps["t"].iloc[0] == pd.Timestamp(1001.0, unit="s")
    assert info.notes and "iteration-details" in info.notes[0]


def test_the_start_line_is_the_engines_identity_and_a_restart_a_new_life(tmp_path):
    path = write_record(tmp_path / "steps.jsonl", [(1000.0, one_life(1000.0)), (2000.0, one_life(2000.0))])
    parsed = parse_log(path)
    ev = parsed.events
    assert ev["kind"].tolist().count("engine_start") == 2
    facts = set(ev.loc[ev["kind"] == "engine_config", "detail"])
    assert {"version=0.32.0", "model=Qwen3-8B", "dtype=bfloat16", "tp=1", "prefix_caching=True"} <= facts
    assert parsed.steps.groupby("engine_life").size().tolist() == [7, 7]
    assert parsed.info.age_known
    assert load_source(path).engine == "vllm"


def test_the_engines_utc_offset_gives_the_times_its_log_shows(tmp_path):
    path = write_record(tmp_path / "steps.jsonl", [(1000.0, one_life(1000.0))], utc_offset_s=3600)
    assert parse_log(path).steps["t"].iloc[0] == pd.Timestamp(1001.0 + 3600, unit="s")


def test_with_iteration_details_the_phase_is_what_the_step_scheduled(tmp_path):
    sched, it = decode_step(10.0, batch=2, step_s=0.05)
    sched.iteration_details = IterationDetails(1, 256, 2, 2, elapsed_ms=48.0)  # a chunk rode along
    plain, it2 = decode_step(10.1, batch=2, step_s=0.02)
    plain.iteration_details = IterationDetails(0, 0, 2, 2, elapsed_ms=19.0)
    parsed = parse_log(write_record(tmp_path / "s.jsonl", [(9.0, [(sched, it), (plain, it2)])], details=True))
    steps = parsed.steps
    assert steps["phase"].tolist() == [StepPhase.MIXED, StepPhase.DECODE]
    assert steps["new_tokens"].iloc[0] == 256 and steps["num_running_reqs"].tolist() == [3, 2]
    assert parsed.info.notes == ()


def test_the_fault_on_line_is_an_event_diag_names(tmp_path):
    steps = [decode_step(float(k), batch=2, step_s=0.02, finished=1) for k in range(1, 6)]
    parsed = parse_log(write_record(tmp_path / "s.jsonl", [(0.5, steps)], fault=StepCostSpec(after=2)))
    ev = parsed.events[parsed.events["kind"] == "fault_on"]
    assert ev["detail"].tolist() == ["fault=step-cost, after=2, entries=2048, limit=20000000"]
    assert ev["t"].tolist() == [pd.Timestamp(2.0, unit="s")]


def test_a_line_cut_short_by_a_crash_is_skipped_and_counted(tmp_path):
    path = write_record(tmp_path / "s.jsonl", [(1000.0, one_life(1000.0))])
    with open(path, "a") as f:
        f.write('{"kind":"step","t":1002.0,"running":2,"kv_us')
    parsed = parse_log(path)
    assert (parsed.info.num_step_lines, parsed.info.num_bad_lines) == (7, 1)


def test_a_newer_record_is_refused_with_its_version(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(
        json.dumps({"kind": "engine_start", "format": "tokdrift-vllm-steps", "version": 9, "t": 1.0}) + "\n"
    )
    with pytest.raises(LogFormatError, match="version 9, newer than this tokdrift reads"):
        parse_log(path)


def served(path, slow_per_request, num_requests=700, seed=0, fault_figures=False, host_other=None, gc_figures=False):
    """A record of two streams of 48-token requests at batch 2: each decode step costs 20 ms plus
    `slow_per_request` for every request finished before it (the step-cost fault's shape). With
    `fault_figures`, the fault's own lines every 10 s: the time its walks took, in all; with
    `host_other(fraction of the run)`, the writer's host lines every 10 s: the CPU beside vLLM; with
    `gc_figures`, two processes' GC lines every 10 s, the added cost spent in full collections (70 %
    in the engine core, 30 % in its worker) beside 1 % of the wall time in young ones."""
    rng = np.random.default_rng(seed)
    t, finished, steps, walked, figures, due = 100.0, 0, [], 0.0, [], 110.0
    for k in range(num_requests // 2):
        for _ in range(2):
            t += 0.06
            steps.append(prefill_end(t, prompt=400, cached=300, decoding=1, step_s=0.06))
        for j in range(48):
            step_s = (0.020 + slow_per_request * finished) * rng.lognormal(0, 0.05)
            walked += slow_per_request * finished
            t += step_s
            done = 2 if j == 47 else 0
            steps.append(decode_step(t, batch=2, step_s=step_s, usage=0.05 + 0.001 * j, finished=done))
            finished += done
            if t >= due:
                if fault_figures:
                    figures.append({"kind": "figures", "t": t, "pid": 7, "fault_walk_s_total": walked})
                if gc_figures:
                    for pid, part in ((8, 0.7), (9, 0.3)):
                        full = part * walked
                        young = part * 0.01 * (t - 100.0)
                        figures.append(
                            {"kind": "figures", "t": t, "pid": pid, "root": 5, "process": f"p{pid}"}
                            | {"gc_full_pause_s_total": full, "gc_pause_s_total": full + young}
                        )
                if host_other is not None:
                    other = host_other(k / (num_requests // 2))
                    figures.append({"kind": "figures", "t": t, "pid": 5, "host_other_cpu_percent": other})
                due += 10.0
    write_record(path, [(99.0, steps)])
    if figures:
        with open(path, "a") as f:
            f.writelines(json.dumps(line) + "\n" for line in figures)
    return path


def test_diag_finds_age_a_step_record_shows_and_not_in_a_healthy_one(tmp_path):
    aged, _ = analyze_json(served(tmp_path / "aged.jsonl", slow_per_request=0.00003))
    healthy, _ = analyze_json(served(tmp_path / "healthy.jsonl", slow_per_request=0.0))
    assert aged["verdict"] == "engine_age_degradation"
    assert healthy["verdict"] == "no_degradation"


def test_a_slowdown_while_the_cpu_beside_vllm_rose_is_not_called_age(tmp_path):
    """The step time is wall time: where the record's host lines say the neighbours' CPU rose by a
    core as decode slowed, the slowdown cannot be told from contention."""
    crowded, checks = analyze_json(
        served(tmp_path / "crowded.jsonl", slow_per_request=0.00003, host_other=lambda f: 150.0 * f)
    )
    quiet, _ = analyze_json(served(tmp_path / "quiet.jsonl", slow_per_request=0.00003, host_other=lambda f: 10.0))
    assert crowded["verdict"] != "engine_age_degradation" and checks["host_contention"]["status"] == "warn"
    assert quiet["verdict"] == "engine_age_degradation"


def test_the_faults_own_time_is_the_suspect_that_names_it(tmp_path):
    """Where the record holds the fault's figures, the time its walks took is the first suspect: its
    share of the engine's wall time grew as decode slowed."""
    aged, _ = analyze_json(served(tmp_path / "aged.jsonl", slow_per_request=0.00003, fault_figures=True))
    assert aged["verdict"] == "engine_age_degradation"
    first = aged["suspects"][0]
    assert first["name"] == "fault_walk_s_total" and "more of the engine's wall time went into it" in first["evidence"]


def test_garbled_lines_leave_the_rest_readable(tmp_path):
    path = write_record(tmp_path / "s.jsonl", [(1000.0, one_life(1000.0))])
    with open(path, "a") as f:
        f.write('{"kind":"step","t":1002.0,"running":"many","gen_tokens":1}\n')  # a figure that is no number
        f.write('{"kind":"engine_start","format":"tokdrift-vllm-steps","version":"1","t":1003.0}\n')
        f.write("[1, 2]\n\x00\x01 binary\n")
    parsed = parse_log(path)
    assert parsed.info.num_step_lines == 8
    assert np.isnan(parsed.steps["num_running_reqs"].iloc[-1])
    assert (parsed.info.num_bad_lines, parsed.info.num_unknown_lines) == (1, 2)  # the start line; no JSON objects
    assert parsed.events["kind"].tolist().count("engine_start") == 1


def test_the_faults_figures_lines_are_snapshots_of_its_life(tmp_path):
    """The step-cost fault's own lines (fault.StateReport, appended to the record by the process that
    runs the model) read as a snapshots table beside the steps, in each engine life."""
    from vllm_plugin import fault

    path = write_record(tmp_path / "s.jsonl", [(0.5, one_life(1.0)), (10.5, one_life(11.0))])
    for t, held, walked in ((2.0, 4096, 0.01), (3.0, 8192, 0.05), (12.0, 0, 0.0)):
        with open(path, "a") as f:
            f.write(
                json.dumps({"kind": "figures", "t": t, "pid": 7, "fault_entries": held, "fault_walk_s_total": walked})
                + "\n"
            )
    cost = fault.StepCost(fault.StepCostSpec(after=1, entries=5))
    cost.on_step(["a"], {})
    fault.StateReport(cost, str(path)).report()  # the writer's own line parses as these do
    parsed = parse_log(path)
    snaps = parsed.snapshots
    assert list(snaps.columns) == ["t", "engine_life", "engine_age_s", "fault_entries", "fault_walk_s_total"]
    assert snaps["fault_entries"].tolist()[:3] == [4096, 8192, 0] and snaps["fault_entries"].iloc[-1] == 5
    assert snaps["engine_life"].tolist()[:3] == [0, 0, 1]
    assert snaps["engine_age_s"].tolist()[:2] == pytest.approx([1.5, 2.5])
    assert not parsed.events["kind"].eq("figures").any() and len(parsed.steps) == 14
    assert load_source(path).snapshots["fault_walk_s_total"].tolist()[:2] == [0.01, 0.05]


def test_a_figure_several_processes_state_is_their_sum_in_each_life(tmp_path):
    """The engine core and its worker each count their own collector's pauses: the snapshot is the
    vLLM's, the sum of each process's latest count, started over in each life. A new life's processes
    begin writing while the model loads, before their start line: those lines are left out, since
    the life they would fall in by time is the previous one."""
    path = write_record(tmp_path / "s.jsonl", [(0.5, one_life(1.0)), (10.5, one_life(11.0))], pids=[100, 200])
    lines = [
        (0.2, 101, 100, 0.1),  # life 0's engine core while it starts: left out
        (1.05, 101, 100, 1.0),
        (1.1, 102, 100, 0.5),
        (1.5, 101, 100, 2.0),
        (1.55, 102, 100, 1.5),
        (9.0, 201, 200, 0.2),  # life 1's, before its start line: left out
        (12.0, 201, 200, 0.3),
        (12.2, 202, None, 0.4),  # a line that names no root (an older record's): kept where its time falls
    ]
    with open(path, "a") as f:
        for t, pid, root, pause in lines:
            line = {"kind": "figures", "t": t, "pid": pid, "gc_pause_s_total": pause, "process": "EngineCore_DP0"}
            f.write(json.dumps(line | ({"root": root} if root else {})) + "\n")
    snaps = parse_log(path).snapshots
    assert snaps["gc_pause_s_total"].tolist() == pytest.approx([1.0, 1.5, 2.5, 3.5, 0.3, 0.7])
    assert snaps["engine_life"].tolist() == [0, 0, 0, 0, 1, 1]
    assert "process" not in snaps and "root" not in snaps


def test_gc_pauses_that_grow_with_age_are_the_suspect_that_names_them(tmp_path):
    """The GC figures of two processes (vllm_plugin/gcstats.py): where the time in full
    collections grew as decode slowed, it is the first suspect; where the collector took the same
    share all along, the record is healthy."""
    aged, _ = analyze_json(served(tmp_path / "aged.jsonl", slow_per_request=0.00003, gc_figures=True))
    healthy, _ = analyze_json(served(tmp_path / "healthy.jsonl", slow_per_request=0.0, gc_figures=True))
    assert aged["verdict"] == "engine_age_degradation"
    first = aged["suspects"][0]
    assert first["name"] in ("gc_full_pause_s_total", "gc_pause_s_total")
    assert "more of the engine's wall time went into it" in first["evidence"]
    assert healthy["verdict"] == "no_degradation"
    assert not any(s["name"].startswith("gc_") for s in healthy.get("suspects") or [])
