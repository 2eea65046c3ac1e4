"""diag on real logs users published: each corpus log's pinned answer, and never engine age where
its source does not establish it (benchmarks/real_logs.json; docs/real-logs.md).

The logs are other people's data and are kept outside this repository: in `../shared/real-logs`
beside the checkout, or where `TOKDRIFT_REAL_LOGS` points. Where neither holds them, the tests
say so and skip; the catalogue itself is checked always."""

import hashlib
import json
import re

import pytest

from benchmarks.real_logs import CATALOGUE, OWN_CATALOGUE, ROOT, analyze_one, catalogue, corpus_dir

ENTRIES = catalogue()
OWN = catalogue(OWN_CATALOGUE)
FOLDER = corpus_dir()
VERDICTS = ("engine_age_degradation", "context_growth_only", "no_degradation", "insufficient_data")


def test_the_catalogue_names_each_log_its_source_and_truth():
    doc = json.loads(CATALOGUE.read_text(encoding="utf-8"))
    assert len(ENTRIES) >= 20
    for e in doc["logs"]:
        assert re.fullmatch(r"[0-9a-f]{40}", e["commit"]) and re.fullmatch(r"[0-9a-f]{40}", e["blob"]), e["file"]
        assert e["repository"].count("/") == 1 and e["path"], e["file"]
        assert e["truth"] in ("no_age_established", "age_established", "unknown"), e["file"]
        assert e["expect"] and set(e["expect"]) <= set(VERDICTS), e["file"]
        if e["truth"] != "age_established":
            assert "engine_age_degradation" not in e["expect"], e["file"]


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.file for e in ENTRIES])
def test_each_real_log_keeps_its_answer(entry):
    path = FOLDER / entry.file
    if not path.is_file():
        pytest.skip(f"the real-log corpus is not in {FOLDER} (docs/real-logs.md)")
    result = analyze_one(path, entry.args)
    # `expect` holds the answer right for this log (one verdict for each log today), never engine
    # age where its source does not establish it (the catalogue test above).
    assert result.verdict in entry.expect, result.reason
    if result.confidence == "high":  # a high confidence is given only where no data check warns
        assert not any(c.name == "confidence_cap" for c in result.checks)


def test_our_own_logs_are_catalogued_with_their_truth_and_kept_byte_for_byte():
    doc = json.loads(OWN_CATALOGUE.read_text(encoding="utf-8"))
    assert {e["truth"] for e in doc["logs"]} == {"age_established", "fixed"}
    for e in doc["logs"]:
        data = (ROOT / e["file"]).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == e["blob"], e["file"]  # git's blob id
        assert len(data) == e["bytes"] and (ROOT / e["run"] / "manifest.json").is_file(), e["file"]
        assert e["truth_basis"] and e["reproduce"] and e["what"], e["file"]
        assert e["expect"] and set(e["expect"]) <= set(VERDICTS), e["file"]
        if e["truth"] == "fixed":
            assert "engine_age_degradation" not in e["expect"], e["file"]
        elif e["expect"] == ["insufficient_data"]:  # an aged log refused: and why
            assert e["refused_because"], e["file"]
        elif e["expect"] != ["engine_age_degradation"]:  # an aged log missed: one answer, low (below), and why
            assert len(e["expect"]) == 1 and e["missed_because"], e["file"]
    refused = [
        e
        for e in doc["logs"]
        if e["truth"] == "age_established" and e["engine"] == "llamacpp" and e["expect"] != ["engine_age_degradation"]
    ]
    assert len(refused) <= 1, "at most one aged llama.cpp log of our own may be refused (issue 49)"


@pytest.mark.parametrize("entry", OWN, ids=[e.file.split("/", 3)[-1] for e in OWN])
def test_each_of_our_own_logs_read_alone_keeps_its_answer(entry):
    """The log alone, as a user of that build has it: the aged builds are called aged, the fixed
    ones are not (tests/diagnostics/test_log_alone.py says why, case by case)."""
    result = analyze_one(ROOT / entry.file, entry.args)
    assert result.source_kind == "log" and result.verdict in entry.expect, result.reason
    if entry.truth == "age_established" and result.verdict in ("no_degradation", "context_growth_only"):
        assert result.confidence == "low", result.reason  # an aged log missed is never called healthy with confidence
