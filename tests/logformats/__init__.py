"""Tests of the log and /metrics readers; the helpers their files share."""

import json
from pathlib import Path


def write_log(tmp_path: Path, name: str, lines: list[str]) -> Path:
    """`lines` as a log file in `tmp_path`, one a line."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def analyze_json(path: Path, *args: str) -> tuple[dict, dict[str, dict]]:
    """`diag analyze PATH --json` through the command line: the document and its checks by name."""
    from typer.testing import CliRunner

    from tokdrift.cli.diag import app

    result = CliRunner().invoke(app, ["analyze", str(path), "--json", *args])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    return doc, {c["name"]: c for c in doc["checks"]}
