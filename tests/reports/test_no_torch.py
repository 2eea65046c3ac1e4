"""reports/ never imports torch: `diag report` must run on a machine that has only logs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[2] / "reports"


def test_no_module_in_reports_imports_torch():
    for path in REPORTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n == "torch" or n.startswith("torch.") for n in names), f"{path} imports torch"


def test_rendering_a_report_loads_no_torch(tmp_path):
    log = Path(__file__).resolve().parents[2] / "examples" / "freetoken-excerpt.log"
    script = (
        "import sys, datetime as dt\n"
        "from tokdrift.cli.diag import app\n"
        "from reports.inputs import load\n"
        "from reports.report import render_report\n"
        "from reports.summary import render_summary\n"
        "from reports.bundle import write_bundle\n"
        "from reports.compare import render_compare\n"
        f"i = load({str(log)!r}, date=dt.date(2026, 9, 23))\n"
        "render_report(i); render_summary(i)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
