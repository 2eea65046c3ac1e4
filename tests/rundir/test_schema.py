"""The run directory's schema: a typed row names exactly its table's documented columns."""

from typing import get_type_hints

import pytest

from rundir import rows, schema

PYTHON_TYPES = {"float64": float, "int64": int, "string": str}
ROW_TYPES = {
    "requests": rows.RequestRow,
    "steps": rows.StepRow,
    "snapshots": rows.SnapshotRow,
    "probes": rows.ProbeRow,
}
# Required columns a row may leave empty: the column is in every part, its value not always.
NULLABLE = {("probes", "decode_tps")}  # a failed probe has no decode rate


def test_every_table_has_its_row_type():
    assert set(ROW_TYPES) == set(schema.TABLES)


@pytest.mark.parametrize("table", list(ROW_TYPES))
def test_a_row_type_is_its_table_column_for_column_and_type_for_type(table):
    hints = get_type_hints(ROW_TYPES[table])
    assert list(hints) == schema.column_names(table)
    for name, (kind, required, _) in schema.TABLES[table].items():
        nullable = not required or (table, name) in NULLABLE
        expected = PYTHON_TYPES[kind] | None if nullable else PYTHON_TYPES[kind]
        assert hints[name] == expected, f"{table}.{name}: {hints[name]}, the table says {kind} (required: {required})"


def test_a_snapshots_figures_named_at_run_time_split_into_its_columns_and_the_rest():
    snap = rows.Snapshot.of({"rss_bytes": 5.0, "expert_miss_rate": 0.5, "eviction_s_total": 1.5})
    assert snap.row == {"rss_bytes": 5.0, "expert_miss_rate": 0.5}
    assert snap.extra == {"eviction_s_total": 1.5}
    assert rows.said({"t": 1.0, "gpu_util": None, "rss_bytes": 0.0}) == {"t": 1.0, "rss_bytes": 0.0}


def test_an_event_is_the_keys_every_event_has_then_its_own_fields():
    hints = get_type_hints(rows.Event)
    assert list(hints)[:2] == list(schema.EVENT_COLUMNS)
    for name, (kind, _, _) in schema.EVENT_COLUMNS.items():
        assert hints[name] == PYTHON_TYPES[kind]
    assert list(hints)[2:] == ["fields", "line"]


def test_the_decided_record_reads_back_as_written_and_anything_else_is_kept_as_it_was():
    from rundir.manifest import Decided, RunManifest

    written = {
        "verdict": "no_degradation",
        "cycle": 19,
        "elapsed_s": 324.599,
        "line": "verdict so far: no_degradation; decided: a loss of more than 10% ruled out",
        "looks_planned": 720,
        "level": 0.99612,
        "onset_cycle": None,
    }
    decided = Decided.from_json(written)
    assert (decided.verdict, decided.cycle, decided.elapsed_s) == ("no_degradation", 19, 324.599)
    assert decided.details == {"looks_planned": 720, "level": 0.99612, "onset_cycle": None}
    assert list(decided.to_json().items()) == list(written.items())
    manifest = {"schema_version": 2, "run_id": "r", "status": "completed", "started_at": "t0"}
    assert RunManifest.from_json({**manifest, "decided": written}).decided == decided
    for foreign in ({"cycle": 3}, "decided at 3", {"verdict": "no_degradation", "cycle": "three"}):
        read = RunManifest.from_json({**manifest, "decided": foreign})
        assert read.decided is None and read.to_json()["decided"] == foreign
