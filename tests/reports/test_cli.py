"""The four verbs through `diag`, on a run directory and on plain logs."""

from __future__ import annotations

import tarfile

from bs4 import BeautifulSoup
from typer.testing import CliRunner

from reports.errors import ReportError
from tokdrift.cli.diag import app

from .conftest import API_KEY, HOME

runner = CliRunner()


def _ok(*args):
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_report_on_a_log_and_a_run_dir(excerpt, run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "engine_age_degradation: report written to report.html" in _ok("report", excerpt, "--date", "2026-09-23")
    soup = BeautifulSoup((tmp_path / "report.html").read_text(), "html.parser")
    assert soup.title.get_text() == "tokdrift report: freetoken-excerpt.log"
    assert f"report written to {run_dir / 'report.html'}" in _ok("report", run_dir)  # beside the run's data
    page = (run_dir / "report.html").read_text()
    assert 'id="suspects"' in page and API_KEY not in page


def test_summary_on_a_log_and_a_run_dir(excerpt, run_dir, tmp_path):
    out = _ok("summary", excerpt, "--date", "2026-09-23")
    assert out.startswith(
        "### tokdrift: freetoken-excerpt.log\n\n**Can't tell (leaning aged)**, from a 35.7-min FreeToken log excerpt "
        "alone: decode is 90% slower late in the run"
    )
    _ok("summary", run_dir, "-o", tmp_path / "s.md", "--no-redact")
    text = (tmp_path / "s.md").read_text()
    assert "kv_fragmentation" in text and f"{HOME}/traces/agent.jsonl" in text


def test_bundle_on_a_log_and_a_run_dir(excerpt, run_dir, tmp_path):
    out = _ok("bundle", excerpt, "--date", "2026-09-23", "-o", tmp_path / "log.tar.gz")
    assert "engine log: 11 of 11 lines kept" in out
    # The log's own folder, said relative to it (its next step, to confirm the low-confidence verdict with
    # a soak, names no path of it).
    assert "redacted: 2 paths of the machine that ran it (" in out
    out = _ok("bundle", run_dir, "-o", tmp_path / "run.tar.gz")
    assert "bundle written to" in out and "API keys and secrets" in out
    with tarfile.open(tmp_path / "run.tar.gz") as tar:
        assert any(n.endswith("/profiles/20260921T143059-degraded.speedscope.json") for n in tar.getnames())


def test_a_bundle_is_named_after_its_source_by_default(excerpt, run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _ok("bundle", excerpt, "--date", "2026-09-23")
    _ok("bundle", run_dir)
    assert sorted(p.name for p in tmp_path.glob("*.tar.gz")) == sorted(
        ["freetoken-excerpt-bundle.tar.gz", f"{run_dir.name}-bundle.tar.gz"]
    )


def test_compare_a_log_and_a_run_dir(excerpt, run_dir, tmp_path):
    out = _ok("compare", excerpt, run_dir, "--date", "2026-09-23", "-o", tmp_path / "c.html")
    assert "engine_age_degradation vs engine_age_degradation" in out
    assert (tmp_path / "c.html").read_text().count('class="verdict ') == 2


def test_bad_date_is_a_user_error(excerpt):
    result = runner.invoke(app, ["report", str(excerpt), "--date", "23/09/2026"])
    assert isinstance(result.exception, ReportError)
    assert str(result.exception) == "--date: expected YYYY-MM-DD, found '23/09/2026'"
