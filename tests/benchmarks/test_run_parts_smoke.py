"""benchmarks/run_parts.py still runs on tiny sizes; its figures come from the full run (docs/benchmarks.md)."""

import re

from tests.benchmarks import run_benchmark


def test_run_parts_prints_the_read_ratio_last():
    last = run_benchmark("run_parts.py", "--flushes", "40", "--rows", "5", "--reps", "1", timeout=120)[-1]
    assert re.fullmatch(r"read time, unmerged over merged: [\d.]+x \(40 parts against 10\)", last), last
