"""`diag bundle`: what a bug issue needs, in one tar.gz, redacted unless asked not to be.

    <name>/report.html      the HTML report
    <name>/analysis.json    `diag analyze --json`
    <name>/summary.md       `diag summary` (it says what was redacted)
    <name>/manifest.json    run directories only
    <name>/engine.log       the engine log, trimmed to the lines that matter
    <name>/profiles/*.json  speedscope profiles, run directories only

The trimmed log keeps the startup lines, every warning and error, the lines around the onset
and around each restart, and the tail; each gap is marked with how many lines it held.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
from pathlib import Path
from typing import NamedTuple

from reports.inputs import Inputs, restarts
from reports.redact import Redactor
from reports.report import render_report
from reports.summary import render_summary
from reports.tables import trigger_line

MAX_LOG_LINES = 4000  # a log at most this long goes in whole
HEAD_LINES = 200
TAIL_LINES = 500
AROUND_LINES = 200  # either side of the onset and of each restart
MAX_NOTABLE = 500  # warnings and errors kept beyond the windows
NOTABLE = re.compile(r"\b(WARNING|WARN|ERROR|CRITICAL|Traceback|exception|dropped|retract|preempt)", re.IGNORECASE)


class BundleResult(NamedTuple):
    path: Path
    members: list[str]
    redaction: str  # Redactor.describe()
    log_lines: tuple[int, int] | None  # (kept, of) when there is an engine log


def write_bundle(inputs: Inputs, out: Path, redact: bool = True) -> BundleResult:
    redactor = Redactor(enabled=redact)
    redactor.anchor_to(inputs.source.path, inputs.command)
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", redactor.text(inputs.name)).strip("_") or "run"
    root = f"tokdrift-bundle-{name}"
    files: list[tuple[str, bytes]] = []
    log_counts = None

    # Inputs first, so that the summary written last can say everything that was redacted.
    m = inputs.source.manifest
    if m is not None:
        files.append(("manifest.json", _json(redactor.json(m.raw))))
    if inputs.engine_log is not None:
        lines, log_counts = trimmed_log(inputs)
        files.append(("engine.log", "".join(redactor.text(line) for line in lines).encode("utf-8")))
    for path in inputs.profiles:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            files.append((f"profiles/{path.name}", _json(redactor.json(doc))))
        except (OSError, ValueError):
            files.append((f"profiles/{path.name}", redactor.text(path.read_text("utf-8", "replace")).encode("utf-8")))
    files.append(("analysis.json", _json(redactor.json(inputs.analysis.to_dict()))))
    files.append(("report.html", render_report(inputs, redactor).encode("utf-8")))
    files.append(("summary.md", render_summary(inputs, redactor, report_name="report.html").encode("utf-8")))

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    now = time.time()
    with tarfile.open(out, "w:gz") as tar:
        for rel, data in files:
            info = tarfile.TarInfo(f"{root}/{rel}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
    return BundleResult(out, [f"{root}/{rel}" for rel, _ in files], redactor.describe(), log_counts)


def trimmed_log(inputs: Inputs) -> tuple[list[str], tuple[int, int]]:
    """The engine log's lines worth attaching, with '[... N lines left out ...]' at each gap."""
    assert inputs.engine_log is not None  # bundle() trims a log only where there is one
    with open(inputs.engine_log, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    n = len(lines)
    if n <= MAX_LOG_LINES:
        return lines, (n, n)
    keep = set(range(min(HEAD_LINES, n))) | set(range(max(0, n - TAIL_LINES), n))
    centers = []
    line = trigger_line(inputs)
    if line is not None:
        centers.append(line - 1)
    steps = inputs.source.steps
    if "line" in steps:
        for t in restarts(inputs.source):
            at = steps.loc[(steps["t"] >= t) & steps["line"].notna(), "line"]
            if len(at):
                centers.append(int(at.iloc[0]) - 1)
    for c in centers:
        keep |= set(range(max(0, c - AROUND_LINES), min(n, c + AROUND_LINES + 1)))
    notable = [i for i, text in enumerate(lines) if i not in keep and NOTABLE.search(text)]
    keep |= set(notable[:MAX_NOTABLE])
    out, last = [], -1
    for i in sorted(keep):
        if i > last + 1:
            out.append(f"[... {i - last - 1} lines left out ...]\n")
        out.append(lines[i])
        last = i
    if last < n - 1:
        out.append(f"[... {n - 1 - last} lines left out ...]\n")
    return out, (len(keep), n)


def _json(obj: object) -> bytes:
    return (json.dumps(obj, indent=2, default=str) + "\n").encode("utf-8")
