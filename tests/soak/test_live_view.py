"""The live view: what a user watching `soak run --live` sees."""

import subprocess
from pathlib import Path

from soak.client import CallResult
from soak.clock import ServingClock
from soak.cycle import Cycle, Taken
from soak.live_view import LiveView, Progress, SoakPhase, cycle_line, render, status_line
from soak.probes import ProbeResult
from tests.soak.conftest import ROOT, write_trace
from tests.soak.test_resume import SOAK


def _text(renderable) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(renderable)
    return console.export_text()


def _probe(t, decode_tps, status, call, reason):
    return ProbeResult(
        t=t,
        probe_id="abc",
        prompt_tokens=32,
        output_tokens=16,
        ttft_s=0.1 if decode_tps is not None else None,
        decode_tps=decode_tps,
        status=status,
        call=call,
        reason=reason,
    )


def _cycle(number, main_tps, control_tps=None):
    call = CallResult(
        t_send=0.0,
        t_first_token=0.1,
        t_first_content=0.1,
        t_last_token=1.0,
        prompt_tokens=32,
        cached_tokens=0,
        output_tokens=16,
        reasoning_tokens=None,
        status="ok",
        error=None,
        num_token_chunks=16,
    )
    taken = [Taken("main", _probe(0.0, main_tps, "ok", call, "periodic"), 1, 5.0)]
    if control_tps is not None:
        taken.append(Taken("control", _probe(1.0, control_tps, "ok", call, "periodic"), 0, 3.0))
    return Cycle(number, "periodic", tuple(taken))


def _progress(**kw):
    call = CallResult.aborted(0.0, "x")
    probes = (
        _probe(0.0, 41.5, "ok", call, "start"),
        _probe(9.0, None, "error", call, "periodic"),
    )
    fields = dict(
        run_dir="runs/x",
        elapsed_s=3725.0,
        remaining_s=60.0,
        num_calls=12,
        num_failed=2,
        num_in_flight=1,
        live_tps=33.3,
        probes=probes,
        engine="up (life 1, pid 7, age 5 s)",
        phase=SoakPhase.REPLAY,
        last_cycle=_cycle(4, 61.2, 60.8),
        num_engine_restarts=1,
        control="twin (life 0, pid 8, age 3 s)",
    )
    fields.update(kw)
    return Progress(**fields)


def test_view_shows_time_calls_rate_probes_the_last_pair_the_verdict_and_engines():
    text = _text(render(_progress(), "verdict so far: probes 61.0 -> 61.2 tok/s (1.00x)"))
    assert "1:02:05 / 0:01:00" in text
    assert "12 done, 2 failing, 1 in flight" in text
    assert "33.3 tok/s" in text and "41.5, error" in text and "life 1" in text
    assert "main 61.2 / control 60.8 tok/s (cycle 4)" in text
    assert "probes 61.0 -> 61.2 tok/s (1.00x)" in text and "twin (life 0" in text


def test_status_line_says_time_calls_rate_last_pair_and_restarts_on_one_line():
    line = status_line(_progress())
    assert line == (
        "[1:02:05] 12 calls, 2 failed, 1 in flight; live 33.3 tok/s; last probes main 61.2 / "
        "control 60.8 tok/s (cycle 4); engine restarts 1; replay"
    )
    assert "main 61.2 / control off tok/s" in status_line(_progress(last_cycle=_cycle(5, 61.2)))
    assert "last probes none yet" in status_line(_progress(last_cycle=None))


def test_cycle_line_names_the_cycle_and_both_rates():
    rows = _cycle(3, 58.04, 60.0).rows
    assert cycle_line(rows, _progress()) == "[1:02:05] probe cycle 3 (periodic): main 58.0 / control 60.0 tok/s"


def test_a_soak_is_shown_before_its_engine_is_up_and_a_view_that_fails_does_not_stop_it(caplog):
    class Starting:  # a soak whose run directory is not open yet (soak.live_view.Watched)
        run_dir, phase, recorder, session = Path("runs/x"), SoakPhase.STARTING, None, None
        clock = ServingClock(duration_s=60.0)

    shown = []
    view = LiveView(Starting(), shown.append)
    view.show()
    assert [(p.engine, p.phase, p.num_calls, p.elapsed_s, p.control) for p in shown] == [
        ("starting", "starting", 0, 0.0, "off")
    ]

    def broken(progress):
        raise RuntimeError("the terminal went away")

    view.on_progress = broken
    with caplog.at_level("ERROR", logger="soak.live_view"):
        view.show()
    assert "live view failed" in caplog.text


def test_soak_run_live_draws_the_view_on_stderr(tmp_path, fake_server):
    server = fake_server()
    trace = write_trace(tmp_path / "trace.jsonl", sessions=2, turns=3)
    proc = subprocess.run(
        [
            *SOAK,
            "run",
            "--trace",
            str(trace),
            "--seconds",
            "2",
            "--target",
            server.url,
            "-o",
            str(tmp_path / "run"),
            "--live",
            "--probe-tokens",
            "8",
            "--probe-output",
            "4",
            "--no-profiles",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "elapsed / remaining" in proc.stderr and "probes (tok/s)" in proc.stderr
    assert "last probe pair" in proc.stderr and "verdict so far" in proc.stderr
    assert "engine restarts" not in proc.stderr  # no status lines beside the live view
    assert "run run: completed" in proc.stdout


def test_without_a_terminal_a_status_line_and_the_verdict_after_every_cycle(tmp_path, fake_server):
    """Under nohup, systemd or CI: plain lines, written as they happen (not at the end)."""
    import re
    import time

    server, other = fake_server("--token-delay", "0.01"), fake_server("--token-delay", "0.01")
    trace = write_trace(tmp_path / "trace.jsonl", sessions=3, turns=30, think=0.3, gap=0.5)
    proc = subprocess.Popen(
        [
            *SOAK,
            "run",
            "--trace",
            str(trace),
            "--seconds",
            "20",
            "--target",
            server.url,
            "--control-target",
            other.url,
            "-o",
            str(tmp_path / "run"),
            "--probe-every",
            "5",
            "--probe-tokens",
            "8",
            "--probe-output",
            "16",
            "--no-profiles",
            "--concurrency",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if re.match(r"\[0:00:\d\d\] \d+ calls", line):
            assert proc.poll() is None  # it came while the soak ran
            break
    out, err = proc.communicate(timeout=90)
    lines += err.splitlines()
    assert proc.returncode == 0, "\n".join(lines[-30:])
    status = [line for line in lines if re.match(r"\[\d:\d\d:\d\d\] \d+ calls, \d+ failed", line)]
    assert status and "last probes main " in status[0] and "/ control " in status[0], lines
    assert "engine restarts 0" in status[0]
    cycles = [line for line in lines if " probe cycle " in line]
    assert len(cycles) >= 5, lines  # start, every 5 s, end
    assert all("verdict so far: " in line and " / control " in line for line in cycles), cycles
    assert re.search(r"probe cycle 0 \(start\): main \d+\.\d / control \d+\.\d tok/s", cycles[0])
    assert "run run: completed" in out
