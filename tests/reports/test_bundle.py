"""The bug-report bundle: what is in it, and that nothing planted in the inputs leaks out."""

from __future__ import annotations

import json
import re
import shutil
import tarfile

import pytest

from reports import bundle as bundle_mod
from reports.bundle import trimmed_log, write_bundle
from reports.inputs import load

from .conftest import API_KEY, BEARER, HOME, PLANTED, PROMPT, ROOT_PATH


def _read(path):
    with tarfile.open(path) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode("utf-8") for m in tar.getmembers()}


@pytest.fixture(scope="module")
def redacted(run_inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle") / "bundle.tar.gz"
    result = write_bundle(run_inputs, out)
    return result, _read(out)


def test_run_bundle_holds_report_analysis_summary_manifest_log_and_profiles(redacted, run_inputs):
    result, files = redacted
    assert sorted(files) == [
        "analysis.json",
        "engine.log",
        "manifest.json",
        "profiles/20260921T143000-healthy.speedscope.json",
        "profiles/20260921T143059-degraded.speedscope.json",
        "report.html",
        "summary.md",
    ]
    assert all(m.startswith("tokdrift-bundle-test/") for m in result.members)
    assert json.loads(files["analysis.json"]) == run_inputs.analysis.to_dict()
    assert json.loads(files["manifest.json"])["host"]["gpu"] == "NVIDIA H200"
    assert "find_free_run" in files["profiles/20260921T143059-degraded.speedscope.json"]
    assert files["report.html"].startswith("<!DOCTYPE html>")
    assert files["summary.md"].startswith("### tokdrift: test\n\n**Aged (high confidence)**, from a soak of the built-in engine, a test fault set in it: "
    )


def test_bundle_is_redacted_by_default(redacted):
    result, files = redacted
    for name, text in files.items():
        for planted in PLANTED:
            assert planted not in text, f"{planted!r} left in {name}"
    manifest = json.loads(files["manifest.json"])
    assert manifest["command"] == ["soak", "run", "--api-key", "[redacted]", "--trace", "~/traces/agent.jsonl"]
    assert manifest["configs"]["soak"]["probe"]["prompt"].startswith("[redacted")
    assert manifest["configs"]["soak"]["probe"]["max_tokens"] == 128  # numbers stay
    assert "Received request r1: prompt: '[redacted" in files["engine.log"]
    assert "Decode batch, #running-req: 2, #token: 30000" in files["engine.log"]  # log lines that matter stay
    redacted_line = next(line for line in files["summary.md"].splitlines() if line.startswith("**Redacted:**"))
    for what in ("prompt or completion text", "API keys and secrets", "bearer tokens", "home-directory paths"):
        assert what in redacted_line
    assert result.redaction in redacted_line


def test_no_redact_keeps_everything(run_inputs, tmp_path):
    files = _read(write_bundle(run_inputs, tmp_path / "b.tar.gz", redact=False).path)
    everything = "".join(files.values())
    for planted in (API_KEY, BEARER, PROMPT, HOME, ROOT_PATH):
        assert planted in everything, planted
    assert "--no-redact" in files["summary.md"]


def test_log_bundle_trims_a_long_log_around_the_onset_and_restart(log_inputs, tmp_path, monkeypatch):
    monkeypatch.setattr(bundle_mod, "MAX_LOG_LINES", 300)
    monkeypatch.setattr(bundle_mod, "HEAD_LINES", 20)
    monkeypatch.setattr(bundle_mod, "TAIL_LINES", 20)
    monkeypatch.setattr(bundle_mod, "AROUND_LINES", 10)
    lines, (kept, total) = trimmed_log(log_inputs)
    assert total > 3000 and kept < 200
    text = "".join(lines)
    assert "#new-token: 5792, #cached-token: 121712" in text  # the trigger
    assert "odd client header" in text  # a warning
    assert text.count("Resolved config") >= 2  # the start, and the restart
    assert "lines left out ...]" in text
    result = write_bundle(log_inputs, tmp_path / "log.tar.gz")
    files = _read(result.path)
    assert sorted(files) == ["analysis.json", "engine.log", "report.html", "summary.md"]
    assert result.log_lines == (kept, total)


def test_seed_bundle_keeps_the_whole_excerpt(seed_inputs, excerpt, tmp_path):
    files = _read(write_bundle(seed_inputs, tmp_path / "seed.tar.gz").path)
    assert files["engine.log"] == excerpt.read_text()


def test_the_bundle_carries_no_path_of_the_machine_that_ran_it(run_dir, tmp_path):
    """The command as the user typed it (the executable by its name), every path relative to the run
    or to the project the soak ran from: in the summary, the manifest, the report, the analysis and
    the log (issue 53: the case study's bundle held `/work/main/.venv/bin/soak` and `/root/.cache/...`)."""
    root = tmp_path / "work" / "proj"
    run = root / "runs" / "soak-1"
    shutil.copytree(run_dir, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["command"] = [
        f"{root}/.venv/bin/soak",
        "run",
        "--trace",
        f"{root}/examples/agent.jsonl",
        "--engine-log",
        f"{root}/runs/soak-1.logs/target.log",
        "--restart-cmd",
        f"env PYTHON={root}/.venv/bin/python {root}/scripts/peer-engines.sh restart",
        "-o",
        str(run),
    ]
    manifest["trace"]["path"] = f"{root}/examples/agent.jsonl"
    manifest["configs"]["engine"]["log_file"] = "/opt/llama/logs/server.log"  # outside both: its last parts
    (run / "manifest.json").write_text(json.dumps(manifest))
    with (run / "engine.log").open("a") as f:
        f.write(f"[2026-09-21|14:40:00] INFO     profile written to {run}/profiles/x.json\n")
    files = _read(write_bundle(load(run), tmp_path / "b.tar.gz").path)
    for name, text in files.items():
        assert str(tmp_path) not in text, f"{tmp_path} left in {name}"
        assert not re.search(r"(?<![\w.~/:])/(?:tmp|work|opt|home|root)/", text), f"a machine path in {name}"
    assert json.loads(files["manifest.json"])["command"] == [
        "soak",
        "run",
        "--trace",
        "examples/agent.jsonl",
        "--engine-log",
        "soak-1.logs/target.log",
        "--restart-cmd",
        "env PYTHON=.venv/bin/python scripts/peer-engines.sh restart",
        "-o",
        "soak-1",
    ]
    assert json.loads(files["manifest.json"])["configs"]["engine"]["log_file"] == "…/logs/server.log"
    assert (
        "- command: `soak run --trace examples/agent.jsonl --engine-log soak-1.logs/target.log" in files["summary.md"]
    )
    assert "- source: `run_dir soak-1`" in files["summary.md"]
    assert "profile written to soak-1/profiles/x.json" in files["engine.log"]
    assert "paths of the machine that ran it" in files["summary.md"]
