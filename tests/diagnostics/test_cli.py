"""`diag ingest` and `diag analyze` as a user runs them."""

import json
import subprocess
import sys

import pandas as pd
from typer.testing import CliRunner

from tokdrift.cli.diag import app

from .rundirs import make_run_dir

runner = CliRunner()


def test_ingest_writes_steps_and_events(tmp_path, excerpt):
    out, events = tmp_path / "steps.parquet", tmp_path / "events.parquet"
    result = runner.invoke(
        app, ["ingest", str(excerpt), "--date", "2026-09-23", "-o", str(out), "--events", str(events)]
    )
    assert result.exit_code == 0, result.output
    assert "9 steps" in result.output and "0 with no known prefix skipped" in result.output
    steps = pd.read_parquet(out)
    assert steps["new_tokens"].dropna().tolist() == [5792, 8192]
    ev = pd.read_parquet(events)
    assert ev.loc[ev["kind"] != "engine_config", "kind"].tolist() == ["engine_start", "engine_start"]
    # `Resolved config: moe_backend='offload', attention_backend='triton', ...` says what the engine is
    assert "moe_backend=offload" in ev.loc[ev["kind"] == "engine_config", "detail"].tolist()


def test_analyze_json_is_the_design_document(tmp_path, excerpt):
    saved = tmp_path / "analysis.json"
    result = runner.invoke(app, ["analyze", str(excerpt), "--date", "2026-09-23", "--json", "-o", str(saved)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["verdict"] == "engine_age_degradation" and doc["onset"]["t"] == "2026-09-23T21:18:50"
    assert json.loads(saved.read_text()) == doc


def test_analyze_prints_a_summary_of_a_run_directory(tmp_path):
    run = make_run_dir(tmp_path / "run", minutes=30, fault_at_min=15, restart_at_min=None)
    result = runner.invoke(app, ["analyze", str(run)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "engine_age_degradation" in result.output
    assert "kv_fragmentation" in result.output  # the suspects table
    assert "client_engine_agreement" in result.output  # the checks table


def test_bad_input_is_one_line_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", "from tokdrift.cli.diag import main; main()", "analyze", str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "missing.log" in proc.stderr and "nothing is there" in proc.stderr
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from tokdrift.cli.diag import main; main()",
            "analyze",
            str(tmp_path),
            "--date",
            "23/09/2026",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "YYYY-MM-DD" in proc.stderr


def test_ingest_reads_run_directories_and_scrape_series(tmp_path):
    from logsim.synthetic import Scenario, write

    run = make_run_dir(tmp_path / "run", minutes=10, fault_at_min=None, restart_at_min=None)
    result = runner.invoke(app, ["ingest", str(run)])
    assert result.exit_code == 0, result.output
    assert "run_dir" in result.output and "600 steps" in result.output
    scrapes = write(Scenario(hours=0.2), "prometheus", tmp_path / "scrapes.prom")
    result = runner.invoke(app, ["ingest", str(scrapes), "-o", str(tmp_path / "s.parquet")])
    assert result.exit_code == 0, result.output
    assert "prometheus" in result.output
    assert pd.read_parquet(tmp_path / "s.parquet")["step_time_s"].notna().sum() > 20
