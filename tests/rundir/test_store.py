"""The run store: parts by temp name and rename, events flushed line by line, torn tails cut."""

import json
from pathlib import Path

import pytest

from rundir import reader
from rundir.reader import read_rows
from rundir.writer import RunStore


def test_parts_are_readable_by_diagnostics_and_typed_by_the_schema(tmp_path):
    store = RunStore(tmp_path)
    store.add("requests", {"request_id": "a#0", "t_send": 1.5e9, "status": "ok", "turn": 0, "output_tokens": 7})
    store.add("requests", {"request_id": "a#1", "t_send": 1.5e9 + 1, "status": "refused", "error": "too long"})
    store.add("probes", {"t": 1.5e9, "decode_tps": 42.0, "status": "ok", "reason": "start"})
    assert store.flush() == 3
    store.add("requests", {"request_id": "a#2", "t_send": 1.5e9 + 2, "status": "ok"})
    store.close()
    parts = sorted(p.name for p in (tmp_path / "requests").iterdir())
    assert parts == ["part-000001.parquet", "part-000003.parquet"]
    assert not list(tmp_path.glob("*/*.tmp"))
    df = reader.read_table(tmp_path, "requests")
    assert list(df["request_id"]) == ["a#0", "a#1", "a#2"]
    assert str(df["turn"].dtype) in ("int64", "Int64", "float64")
    assert df.loc[1, "error"] == "too long"
    assert reader.read_table(tmp_path, "probes")["reason"].tolist() == ["start"]


def test_a_reopened_store_numbers_parts_after_the_existing_ones_and_cuts_a_torn_event(tmp_path):
    store = RunStore(tmp_path)
    store.event("start", run_id="x")
    store.add("steps", {"t": 1.0, "phase": "decode"})
    store.close()
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"t": 2.0, "kind": "pro')  # SIGKILL mid-write
    (tmp_path / "steps" / "part-000009.parquet.tmp").write_bytes(b"torn")
    store = RunStore(tmp_path)
    store.event("resume")
    store.add("steps", {"t": 3.0, "phase": "decode"})
    store.close()
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert kinds == ["start", "resume"]
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == ["part-000001.parquet", "part-000002.parquet"]
    assert [r["t"] for r in read_rows(tmp_path, "steps", ["t"])] == [1.0, 3.0]


def test_unknown_event_kind_is_refused(tmp_path):
    store = RunStore(tmp_path)
    try:
        store.event("exploded")
    except KeyError as exc:
        assert "engine_exit" in str(exc)
    else:
        raise AssertionError("an unknown event kind was written")


def test_a_version_1_part_is_read_under_the_renamed_columns(tmp_path):
    """Schema 2 renamed steps' num_mamba_used / num_mamba_total; a run written before reads the same."""
    import pandas as pd

    (tmp_path / "steps").mkdir()
    pd.DataFrame(
        {"t": [1.0, 2.0], "phase": ["decode", "decode"], "num_mamba_used": [3.0, 4.0], "num_mamba_total": [32.0, 32.0]}
    ).to_parquet(tmp_path / "steps" / "part-000000.parquet")
    df = reader.read_table(tmp_path, "steps")
    assert df["mamba_slots_used"].tolist() == [3.0, 4.0] and df["mamba_slots_total"].tolist() == [32.0, 32.0]
    assert "num_mamba_used" not in df.columns
    rows = reader.read_rows(tmp_path, "steps", ["t", "mamba_slots_used"])
    assert rows == [{"t": 1.0, "mamba_slots_used": 3.0}, {"t": 2.0, "mamba_slots_used": 4.0}]


def test_the_manifest_is_one_typed_object_that_round_trips(tmp_path):
    from dataclasses import fields

    from rundir import schema
    from rundir.manifest import RunManifest

    names = {f.name for f in fields(RunManifest)} - {"extra"}
    assert names == set(schema.MANIFEST_REQUIRED) | set(schema.MANIFEST_OPTIONAL)
    store = RunStore(tmp_path)
    manifest = RunManifest(run_id="r", status="running", started_at="2026-12-01T00:00:00Z", target="builtin")
    manifest.extra["written_by_a_later_version"] = {"x": 1}
    store.write_manifest(manifest)
    raw = json.loads((tmp_path / "manifest.json").read_text())
    assert raw["schema_version"] == schema.SCHEMA_VERSION and "ended_at" not in raw
    again = reader.read_manifest(tmp_path)
    assert again == manifest and again.raw["written_by_a_later_version"] == {"x": 1}
    again.status, again.ended_at = "completed", "2026-12-01T01:00:00Z"
    store.write_manifest(again)
    assert reader.read_manifest(tmp_path).status == "completed"


def _flushes(store, start, count, **extra):
    for i in range(start, start + count):
        store.add("steps", {"t": float(i), "phase": "decode", "num_running_reqs": i % 4, **extra})
        store.flush()


def test_parts_are_merged_as_the_run_goes_and_every_row_is_read_once_in_order(tmp_path):
    from rundir import parts

    store = RunStore(tmp_path)
    n = parts.FAN_IN**2 + parts.FAN_IN + 3  # one level-2 merge, one level-1, three flushes left
    _flushes(store, 0, n)
    store.close()
    live = parts.live(tmp_path / "steps")
    assert [p.level for p in live] == [2, 1, 0, 0, 0]
    assert sorted(p.name for p in (tmp_path / "steps").iterdir()) == sorted(p.path.name for p in live)
    df = reader.read_table(tmp_path, "steps")
    assert df["t"].tolist() == list(df["t"].sort_values()) and len(df) == n
    assert [r["t"] for r in read_rows(tmp_path, "steps", ["t"])] == [float(i) for i in range(n)]


def test_a_merge_never_goes_past_the_top_level(tmp_path, monkeypatch):
    from rundir import parts

    monkeypatch.setattr(parts, "FAN_IN", 2)
    store = RunStore(tmp_path)
    _flushes(store, 0, 9)  # with a fan-in of 2 and two levels: 4 + 4 + 1
    store.close()
    assert [p.level for p in parts.live(tmp_path / "steps")] == [2, 2, 0]
    assert len(reader.read_table(tmp_path, "steps")) == 9


def test_a_crash_between_a_merge_and_its_deletes_reads_each_row_once_and_the_reopened_store_cleans_up(tmp_path):
    import shutil

    from rundir import parts

    store = RunStore(tmp_path)
    _flushes(store, 0, parts.FAN_IN - 1)
    store.close()
    kept = tmp_path / "kept"
    shutil.copytree(tmp_path / "steps", kept)  # the parts as they were before the merge
    store = RunStore(tmp_path)
    _flushes(store, 100, 1)  # the FAN_IN-th flush merges them
    store.close()
    for p in kept.iterdir():  # the crash: the merged part was renamed in, its parts not yet deleted
        shutil.copy(p, tmp_path / "steps" / p.name)
    (tmp_path / "steps" / "part-999999.parquet.tmp").write_bytes(b"a merge torn by the crash")
    assert len(list((tmp_path / "steps").glob(parts.GLOB))) == parts.FAN_IN  # the merged part and the 15
    assert len(reader.read_table(tmp_path, "steps")) == parts.FAN_IN
    store = RunStore(tmp_path)  # resume
    _flushes(store, 200, 1)
    store.close()
    names = sorted(p.name for p in (tmp_path / "steps").iterdir())
    assert names == [parts.name(1, 16, 1), parts.name(17, 17, 0)]
    assert [r["t"] for r in read_rows(tmp_path, "steps", ["t"])] == [*map(float, range(15)), 100.0, 200.0]


def test_a_merge_keeps_a_column_that_only_later_parts_have(tmp_path):
    from rundir import parts

    store = RunStore(tmp_path)
    _flushes(store, 0, parts.FAN_IN // 2)
    _flushes(store, 50, parts.FAN_IN - parts.FAN_IN // 2, kv_defrag_moves=3)  # an undocumented column, late
    store.close()
    df = reader.read_table(tmp_path, "steps")
    assert len(parts.live(tmp_path / "steps")) == 1 and len(df) == parts.FAN_IN
    assert df["kv_defrag_moves"].isna().sum() == parts.FAN_IN // 2 and (df["kv_defrag_moves"].dropna() == 3).all()


def test_a_merge_promotes_a_column_that_was_empty_then_whole_numbers_then_fractions(tmp_path):
    from rundir import parts

    store = RunStore(tmp_path)
    third = parts.FAN_IN // 3
    _flushes(store, 0, third, kv_defrag_moves=None)  # written as nulls: no type yet
    _flushes(store, 50, third, kv_defrag_moves=3)  # integers
    _flushes(store, 100, parts.FAN_IN - 2 * third, kv_defrag_moves=2.5)  # fractions
    store.close()
    assert len(parts.live(tmp_path / "steps")) == 1
    df = reader.read_table(tmp_path, "steps")
    assert df["kv_defrag_moves"].isna().sum() == third
    assert df["kv_defrag_moves"].dropna().tolist() == [3.0] * third + [2.5] * (parts.FAN_IN - 2 * third)


def test_a_row_of_another_table_does_not_type_check(tmp_path, monkeypatch):
    """RunStore.add takes each table's own row type (rundir.rows): mypy refuses a steps row handed
    to the probes table, and a row with another table's column."""
    api = pytest.importorskip("mypy.api")
    import rundir

    program = tmp_path / "rows.py"
    program.write_text(
        "from pathlib import Path\n"
        "from rundir.rows import ProbeRow, StepRow\n"
        "from rundir.writer import RunStore\n"
        "store = RunStore(Path('run'))\n"
        "step: StepRow = {'t': 1.0, 'phase': 'decode'}\n"
        "probe: ProbeRow = {'t': 1.0, 'decode_tps': 60.0}\n"
        "store.add('steps', step)\n"
        "store.add('probes', probe)\n"
        "store.add('snapshots', {'t': 1.0, 'rss_bytes': 5.0}, {'eviction_s_total': 1.5})\n"
        "store.add('probes', step)\n"
        "store.add('steps', {'t': 1.0, 'decode_tps': 60.0})\n"
    )
    monkeypatch.setenv("MYPYPATH", str(Path(rundir.__file__).parents[1]))
    out, _, _ = api.run(
        ["--strict", "--follow-imports=silent", "--ignore-missing-imports", "--no-incremental", str(program)]
    )
    refused = sorted(int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line)
    assert refused == [10, 11], out


def test_events_read_back_as_written_and_a_line_that_is_not_one_is_skipped_and_counted(tmp_path, caplog):
    store = RunStore(tmp_path)
    written = [
        store.event("start", t=1.0, run_id="x"),
        store.event("engine_start", t=2.0, pid=7, engine_life=0),
        store.event("decided", t=3.0, verdict="no_degradation", cycle=4, elapsed_s=60.0, line="decided: healthy"),
    ]
    store.close()
    log = reader.read_events(tmp_path)
    assert log.events == [e._replace(line=i) for i, e in enumerate(written, 1)] and log.num_skipped == 0
    assert log.events[2].fields["line"] == "decided: healthy"  # a field named `line` is the event's own
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('\n["not", "an", "event"]\n{"t": 5.0, "kind": "probe"}\n{"t": 6.0, "kind": "pro')  # a crash mid-write
    with caplog.at_level("WARNING", logger="rundir.reader"):
        log = reader.read_events(tmp_path)
    assert [e.kind for e in log.events] == ["start", "engine_start", "decided", "probe"]
    assert log.events[-1].line == 6 and log.num_skipped == 2  # the blank line 4 is passed over
    where = [r.getMessage().split(": skipped")[0].rsplit("/", 1)[-1] for r in caplog.records]
    assert where == ["events.jsonl:5", "events.jsonl:7"]
