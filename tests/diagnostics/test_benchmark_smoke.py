"""benchmarks/analyze_scale.py still runs (tiny size); the figures come from its full run."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_analyze_scale_runs_and_prints_its_headline_last():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "analyze_scale.py"), "--hours", "0.3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert "verdict engine_age_degradation" in proc.stdout
    assert lines[-1].startswith("diag analyze on ") and "peak" in lines[-1]
