"""The four verbs through `diag`, on a run directory and on plain logs."""

from __future__ import annotations

import subprocess
import sys
import tarfile

from bs4 import BeautifulSoup
from typer.testing import CliRunner

from diagnostics.cli import app

from .conftest import API_KEY

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
    out = tmp_path / "run.html"
    _ok("report", run_dir, "-o", out)
    assert API_KEY not in out.read_text()
    _ok("report", run_dir, "-o", out, "--no-redact")
    assert API_KEY in out.read_text()


def test_report_defaults_to_the_run_directory(run_dir):
    _ok("report", run_dir)
    assert (run_dir / "report.html").is_file()


def test_summary_prints_markdown(excerpt, run_dir, tmp_path):
    out = _ok("summary", excerpt, "--date", "2026-09-23")
    assert out.startswith("### tokdrift: `engine_age_degradation`")
    _ok("summary", run_dir, "-o", tmp_path / "s.md")
    assert "kv_fragmentation" in (tmp_path / "s.md").read_text()


def test_bundle_on_a_log_and_a_run_dir(age_log, run_dir, tmp_path):
    out = _ok("bundle", age_log, "-o", tmp_path / "log.tar.gz")
    assert "engine log:" in out and "redacted:" in out
    _ok("bundle", run_dir, "-o", tmp_path / "run.tar.gz", "--no-redact")
    with tarfile.open(tmp_path / "run.tar.gz") as tar:
        assert any(n.endswith("/profiles/20260921T143059-degraded.speedscope.json") for n in tar.getnames())


def test_compare_a_log_and_a_run_dir(excerpt, run_dir, tmp_path):
    out = _ok("compare", excerpt, run_dir, "--date", "2026-09-23", "-o", tmp_path / "c.html")
    assert "engine_age_degradation vs engine_age_degradation" in out
    assert (tmp_path / "c.html").read_text().count('class="verdict ') == 2


def test_user_errors_are_one_line(tmp_path, excerpt):
    proc = subprocess.run([sys.executable, "-c", "from diagnostics.cli import main; main()", "report", str(excerpt),
                           "--date", "23/09/2026"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "error: --date: expected YYYY-MM-DD, found '23/09/2026'"
