"""benchmarks/diag_accuracy.py still runs (--quick: three short cases in three formats); its figures
come from full runs (docs/diagnostics.md, section 9)."""

import re

from tests.benchmarks import run_benchmark


def test_diag_accuracy_quick_prints_a_row_per_case_and_format_and_the_headline_last():
    lines = run_benchmark("diag_accuracy.py", "--quick")
    assert lines[0].startswith("diag accuracy, corpus seed 0: 3 cases x 3 formats"), lines[0]
    rows = [
        line
        for line in lines
        if line.split()[:1] and line.split()[0] in ("step_after_append", "context_growth", "short_excerpt")
    ]
    assert len(rows) == 9, rows
    assert not any("error:" in row for row in rows), rows
    m = re.fullmatch(
        r"verdicts right: (\d+)/9, onsets within 60 s: (\d+)/(\d+), triggers found: (\d+)/(\d+)", lines[-1]
    )
    assert m, lines[-1]
    assert re.fullmatch(r"false age verdicts on healthy cases: \d+/6.*", lines[-2]), lines[-2]
