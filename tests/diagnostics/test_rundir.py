"""Run directories: the reader, schema versions, and the analysis of a built-in engine run."""

import json
import logging

import pytest

from diagnostics.analysis import analyze
from diagnostics.errors import DiagnosticsError
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source
from rundir import schema

from .rundirs import make_run_dir


def test_reader_takes_every_part_and_ignores_tmp_and_a_torn_event(tmp_path, caplog):
    run = make_run_dir(tmp_path / "run", minutes=10, fault_at_min=None, restart_at_min=None)
    with caplog.at_level(logging.WARNING, logger="rundir.reader"):
        src = load_source(run)
    assert src.kind == "run_dir" and src.engine == "tokdrift"
    assert len(src.steps) == 600 and len(src.snapshots) == 60
    assert src.manifest.run_id == "test" and src.manifest.schema_version == schema.SCHEMA_VERSION
    assert src.events["kind"].tolist() == ["start", "engine_start"]
    assert any("events.jsonl:3" in r.getMessage() for r in caplog.records)
    assert src.steps["t"].is_monotonic_increasing
    assert list(src.steps.columns[:4]) == ["t", "engine_life", "engine_age_s", "phase"]


def test_engine_lives_come_from_events_when_rows_lack_them(tmp_path):
    run = make_run_dir(tmp_path / "run", minutes=20, fault_at_min=None, restart_at_min=10, drop_life_columns=True)
    steps = load_source(run).steps
    assert sorted(steps["engine_life"].unique()) == [0, 1]
    assert steps.loc[steps["engine_life"] == 1, "engine_age_s"].min() == 0.0


def test_newer_schema_is_refused_with_a_clear_message(tmp_path):
    run = make_run_dir(tmp_path / "run", minutes=5, schema_version=schema.SCHEMA_VERSION + 1)
    with pytest.raises(DiagnosticsError, match="newer tokdrift"):
        load_source(run)


def test_missing_required_column_names_it(tmp_path):
    run = make_run_dir(tmp_path / "run", minutes=5)
    import pandas as pd

    part = next((run / "probes").glob("part-*.parquet"))
    pd.read_parquet(part).drop(columns=["decode_tps"]).to_parquet(part)
    with pytest.raises(DiagnosticsError, match="decode_tps"):
        load_source(run)


def test_older_parts_without_optional_columns_read_as_nulls(tmp_path):
    run = make_run_dir(tmp_path / "run", minutes=5)
    import pandas as pd

    for part in (run / "steps").glob("part-*.parquet"):
        pd.read_parquet(part).drop(columns=["forward_s", "token_usage"]).to_parquet(part)
    steps = load_source(run).steps
    assert steps["forward_s"].isna().all() and steps["token_usage"].isna().all()


def test_fault_run_is_engine_age_with_the_true_suspect_first(tmp_path):
    result = analyze(load_source(make_run_dir(tmp_path / "run")))
    doc = result.to_dict()
    assert doc["verdict"] == "engine_age_degradation"
    assert doc["onset"]["engine_age_s"] == pytest.approx(1800, abs=30)
    assert doc["onset"]["trigger"]["kind"] == "fault_on"
    assert doc["slowdown"]["ratio"] == pytest.approx(1 / 3, abs=0.03)
    assert doc["recovered_by_restart"] is True
    assert doc["suspects"][0]["name"] == "kv_fragmentation"
    names = [s["name"] for s in doc["suspects"]]
    assert "rss_bytes" not in names  # noise does not track the slowdown
    assert "expert_hits" not in names  # a steady counter, read as its rate, neither
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["client_engine_agreement"]["status"] == "ok"
    assert "probes" in checks["matched_conditions"]["detail"]


def test_healthy_run_is_not_age_and_names_what_context_costs(tmp_path):
    # Its requests run at 20K-40K tokens of context, the long ones 12% slower than the short ones.
    doc = analyze(load_source(make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None))).to_dict()
    assert doc["verdict"] == "context_growth_only" and "Context explains what slowed" in doc["reason"]
    assert doc["onset"] is None and doc["recovered_by_restart"] is None


def test_client_engine_disagreement_is_reported(tmp_path):
    doc = analyze(
        load_source(make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None, client_bias=0.8))
    ).to_dict()
    check = {c["name"]: c for c in doc["checks"]}["client_engine_agreement"]
    assert check["status"] == "warn" and "apart" in check["detail"]


def test_schema_module_lists_what_the_docs_document():
    doc = schema.__file__.replace("rundir/schema.py", "docs/run-directory.md")
    text = open(doc, encoding="utf-8").read()
    for table in schema.TABLES.values():
        for name in table:
            assert f"`{name}`" in text, f"{name} is not documented in docs/run-directory.md"
    for kind in schema.EVENT_KINDS:
        assert f"`{kind}`" in text
    assert json.dumps(schema.SCHEMA_VERSION) in text


def test_probes_alone_decide_when_there_are_no_steps(tmp_path):
    run = make_run_dir(tmp_path / "run")
    for part in (run / "steps").glob("part-*"):
        part.unlink()
    doc = analyze(load_source(run)).to_dict()
    assert doc["verdict"] == "engine_age_degradation"
    assert doc["slowdown"]["ratio"] == pytest.approx(1 / 3, abs=0.03)
    assert doc["recovered_by_restart"] is True
    assert doc["onset"]["engine_age_s"] == pytest.approx(1800, abs=180)  # probes every 3 minutes
    assert doc["onset"]["trigger"]["kind"] == "fault_on"
    assert {c["name"]: c for c in doc["checks"]}["data"]["status"] == "warn"


def test_agreement_names_the_missing_engine_side_when_only_the_client_timed_the_requests():
    # transformers serve: the requests were streamed and timed, the engine has no /metrics and no log.
    from types import SimpleNamespace

    import pandas as pd

    from diagnostics.decision.checks import _agreement

    t0 = pd.Timestamp("2026-12-01 21:30:00")
    requests = pd.DataFrame(
        {"t_first_token": [t0], "t_last_token": [t0 + pd.Timedelta(seconds=2)], "output_tokens": [64], "status": ["ok"]}
    )
    check = _agreement(SimpleNamespace(requests=requests), pd.DataFrame())
    assert check.status == CheckStatus.OK and "engine reports no decode timing" in check.detail
