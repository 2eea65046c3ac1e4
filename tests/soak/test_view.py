"""The live view: what a user watching `soak run --live` sees."""

import subprocess

from soak.client import CallResult
from soak.probes import ProbeResult
from soak.run import Progress
from soak.view import render
from tests.soak.conftest import ROOT, write_trace
from tests.soak.test_resume import SOAK


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def test_view_shows_time_calls_rate_probes_and_engine():
    call = CallResult(0.0, 0.1, 0.1, 1.0, 32, 0, 16, None, "ok", None, 16)
    probes = (ProbeResult(0.0, "abc", 32, 16, 0.1, 41.5, "ok", call, "start"),
              ProbeResult(9.0, "abc", 32, 16, None, None, "error", call, "periodic"))
    text = _text(render(Progress("runs/x", 3725.0, 60.0, 12, 2, 1, 33.3, probes, "up (life 1, pid 7, age 5 s)",
                                 "replay")))
    assert "1:02:05 / 0:01:00" in text
    assert "12 done, 2 failing, 1 in flight" in text
    assert "33.3 tok/s" in text and "41.5, error" in text and "life 1" in text


def test_soak_run_live_draws_the_view_on_stderr(tmp_path, fake_server):
    server = fake_server()
    trace = write_trace(tmp_path / "trace.jsonl", sessions=2, turns=3)
    proc = subprocess.run([*SOAK, "run", "--trace", str(trace), "--seconds", "2", "--target", server.url, "-o",
                           str(tmp_path / "run"), "--live", "--probe-tokens", "8", "--probe-output", "4",
                           "--no-profiles"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "elapsed / remaining" in proc.stderr and "probes (tok/s)" in proc.stderr
    assert "run run: completed" in proc.stdout
