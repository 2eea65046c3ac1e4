"""benchmarks/run_parts.py still runs on tiny sizes; its figures come from the full run (docs/benchmarks.md)."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_parts_prints_the_read_ratio_last():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run_parts.py"), "--flushes", "40", "--rows", "5", "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"read time, unmerged over merged: [\d.]+x \(40 parts against 10\)", last), last
