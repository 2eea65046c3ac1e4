"""Smoke tests of the benchmark scripts: each runs a script on tiny sizes and checks its lines."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(script: str, *args: str, timeout: float = 240) -> list[str]:
    """`benchmarks/SCRIPT ARGS` in the repository root: its stdout lines, after a clean exit."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()
