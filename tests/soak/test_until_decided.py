"""`soak run --until-decided`, and a `Soak(SoakConfig(until_decided=True))` built in Python: the
soak ends at the first decided running verdict, and says so."""

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from typer.testing import CliRunner

from rundir import reader
from soak.config import SoakConfig
from soak.errors import SoakError
from soak.run import Soak
from tests.soak.conftest import write_trace
from tokdrift.cli.diag import app as diag_app
from tokdrift.cli.soak import app


def _run(tmp_path, main, control, *extra, seconds=90):
    trace = write_trace(tmp_path / "trace.jsonl", sessions=3, turns=4)
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--trace",
            str(trace),
            "--target",
            main.url,
            "--control-target",
            control.url,
            "--until-decided",
            "--seconds",
            str(seconds),
            "--probe-every",
            "0.2",
            "--probe-tokens",
            "16",
            "--probe-output",
            "24",
            "--probe-wait",
            "5",
            "--concurrency",
            "1",
            "--speed",
            "4",
            "--no-profiles",
            "--flush-every",
            "0.5",
            "--sample-every",
            "0.5",
            "--no-live",
            "-o",
            str(run_dir),
            *extra,
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    return run_dir, result.output


def test_an_engine_that_slows_is_decided_aged_and_the_soak_stops_early(tmp_path, fake_server):
    # noisy enough that the fast cycles cannot rule a loss out; from the twelfth probe on, 2.5x slower,
    # so that the youth (the first eight cycles) is all fast: a youth of fast and slow cycles mixed
    # took more than the 90 s once on a loaded host
    main = fake_server(
        "--token-delay", "0.004", "--jitter", "0.15", "--slow-after-probes", "12", "--slow-factor", "2.5"
    )
    control = fake_server("--token-delay", "0.004", "--jitter", "0.15")
    run_dir, output = _run(tmp_path, main, control)
    manifest = reader.read_manifest(run_dir)
    assert manifest.stop_reason == "decided" and manifest.elapsed_s < 60
    assert manifest.decided.verdict == "engine_age_degradation" and manifest.decided.details["looks_planned"] > 100
    assert manifest.decided.details["level"] > 0.99  # hundreds of planned looks: every interval far wider than 90 %
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["verdict"] for e in events if e["kind"] == "decided"] == ["engine_age_degradation"]
    assert [e["reason"] for e in events if e["kind"] == "stop"] == ["decided"]
    assert "decided: engine age" in output and "stopped once decided (--until-decided)" in output
    reasons = list(reader.read_table(run_dir, "probes").drop_duplicates("cycle")["reason"])
    assert "end" not in reasons  # the look that decided was the last look at the aged engine
    analysis = json.loads(CliRunner().invoke(diag_app, ["analyze", str(run_dir), "--json"]).output)
    assert analysis["verdict"] == "engine_age_degradation"  # diag says what the running verdict decided
    if analysis["slowdown"]["basis"] == "paired_control":  # the running verdict's own figure: at its level
        # (under load 6-10 another comparison may carry diag's slowdown, at the one look's 90 %)
        assert analysis["slowdown"]["level"] == pytest.approx(manifest.decided.details["level"], abs=1e-4)
    assert any(c["name"] == "stopped_early" for c in analysis["checks"])


def _library_run(tmp_path, main, control, seconds=90, **options):
    """What `_run` asks of the command, asked of the library: no command, no callback."""
    config = SoakConfig(
        trace=str(write_trace(tmp_path / "trace.jsonl", sessions=3, turns=4)),
        duration_s=seconds,
        target=main.url,
        control_target=control.url,
        until_decided=True,
        probe_every_s=0.2,
        probe_input_tokens=16,
        probe_output_tokens=24,
        probe_wait_s=5,
        concurrency=1,
        speed=4,
        profiles=False,
        flush_every_s=0.5,
        sample_every_s=0.5,
    )
    run_dir = tmp_path / "run"
    assert asyncio.run(Soak(config, run_dir, **options).run()) == "completed"
    return run_dir


def test_a_soak_built_in_python_with_until_decided_decides_as_the_command_does(tmp_path, fake_server):
    # the engine of the first test above, soaked through the library alone
    main = fake_server(
        "--token-delay", "0.004", "--jitter", "0.15", "--slow-after-probes", "12", "--slow-factor", "2.5"
    )
    control = fake_server("--token-delay", "0.004", "--jitter", "0.15")
    run_dir = _library_run(tmp_path, main, control)
    manifest = reader.read_manifest(run_dir)
    assert manifest.stop_reason == "decided" and manifest.elapsed_s < 60
    assert manifest.decided.verdict == "engine_age_degradation" and manifest.decided.details["looks_planned"] > 100
    assert "decided: engine age" in manifest.decided.line
    assert reader.read_table(run_dir, "probes")["cycle"].nunique() > 8  # its baseline was --until-decided's


@dataclass
class _Said:
    line: str
    decided: str | None
    awaits_young_control: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class _AlwaysAged:
    """A judge that says every look is decided age."""

    def __init__(self) -> None:
        self.looks = 0

    def look(self, probes: list[dict[str, Any]]) -> _Said:
        self.looks += 1
        return _Said(f"look {self.looks}", "engine_age_degradation", details={"rows": len(probes)})


def test_a_soak_asks_the_judge_it_is_handed(tmp_path, fake_server):
    main, control = fake_server("--token-delay", "0.004"), fake_server("--token-delay", "0.004")
    judge = _AlwaysAged()
    run_dir = _library_run(tmp_path, main, control, seconds=30, judge=judge)
    manifest, probes = reader.read_manifest(run_dir), reader.read_table(run_dir, "probes")
    decided = manifest.decided
    assert manifest.stop_reason == "decided" and decided.verdict == "engine_age_degradation"
    # the start cycle and the baseline's eight judge engines that served nothing yet: the tenth look is the first taken
    assert decided.line == "look 10" and decided.details["rows"] == (probes["cycle"] <= decided.cycle).sum()


def test_a_steady_engine_is_decided_healthy_once_a_loss_is_ruled_out_and_its_control_stayed_young(
    tmp_path, fake_server
):
    # 10 ms a token, not 4: on a loaded host (load 6-10, seen in full runs) a 4-ms sleep is jittered by
    # as much as itself, and the looks could not rule the loss out within the run.
    main, control = fake_server("--token-delay", "0.01"), fake_server("--token-delay", "0.01")
    run_dir, output = _run(
        tmp_path,
        main,
        control,
        "--rule-out",
        "0.15",
        "--control-restart-cmd",
        "true",
        "--control-restart-after",
        "100",
        seconds=240,
    )
    manifest = reader.read_manifest(run_dir)
    assert manifest.stop_reason == "decided" and manifest.decided.verdict == "no_degradation"
    assert manifest.elapsed_s < 240
    assert "a loss of more than 15% ruled out" in manifest.decided.line
    # the look that first ruled the loss out had a control never restarted: it was restarted then,
    # and the run stopped only once the cycles after showed the fresh control no faster
    assert "the control is restarted first, to verify that it stayed young" in output
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    restarts = [e for e in events if e["kind"] == "control_restart"]
    assert restarts and {e["reason"] for e in restarts} == {"verify"}  # a noisy restart may ask for another
    probes = reader.read_table(run_dir, "probes")
    control = probes[probes["role"] == "control"]
    after = control[control["engine_life"] > restarts[0]["control_life"]]
    assert len(after) >= 4 and manifest.decided.cycle >= after["cycle"].min() + 3  # four fresh cycles
    analysis = json.loads(CliRunner().invoke(diag_app, ["analyze", str(run_dir), "--json"]).output)
    youth = [c for c in analysis["checks"] if c["name"] == "control_youth"]
    assert [c["status"] for c in youth] == ["ok"] and "stayed young" in youth[0]["detail"]


def test_no_age_does_not_end_a_soak_whose_control_cannot_be_restarted(tmp_path, fake_server):
    # Without --control-restart-cmd whether the control stayed young cannot be verified: the looks
    # rule the loss out, and the soak runs its length.
    main, control = fake_server("--token-delay", "0.004"), fake_server("--token-delay", "0.004")
    run_dir, output = _run(tmp_path, main, control, "--rule-out", "0.15", seconds=20)
    manifest = reader.read_manifest(run_dir)
    assert manifest.stop_reason == "duration" and manifest.decided is None
    assert "not taken: the control is off or cannot be restarted" in output


def test_max_hours_belongs_to_until_decided(tmp_path):
    result = CliRunner().invoke(
        app, ["run", "--trace", "examples/opencode.jsonl", "--max-hours", "1", "-o", str(tmp_path / "run")]
    )
    assert isinstance(result.exception, SoakError) and "--max-hours: only with --until-decided" in str(result.exception)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--hours", "0"], "--hours: expected a duration > 0, found 0"),
        (["--minutes", "-5"], "--minutes: expected a duration > 0, found -5"),
        (["--hours", "1", "--minutes", "0"], "--minutes: expected a duration > 0, found 0"),
        (["--hours", "1", "--minutes", "5"], "expected exactly one of --hours, --minutes, --seconds"),
    ],
)
def test_a_duration_is_one_positive_number(tmp_path, args, message):
    result = CliRunner().invoke(app, ["run", "--trace", "examples/opencode.jsonl", *args, "-o", str(tmp_path / "r")])
    assert isinstance(result.exception, SoakError) and message in str(result.exception)


def test_a_baseline_before_the_replay_is_the_youth_an_engine_that_slows_with_its_first_calls_is_compared_with(
    tmp_path, fake_server
):
    # the engine slows from its first call on (caches filled by the first sessions): only probes
    # taken before any traffic see it young
    main = fake_server("--token-delay", "0.004", "--jitter", "0.1", "--slow-after-calls", "1", "--slow-factor", "2.5")
    control = fake_server("--token-delay", "0.004", "--jitter", "0.1")
    run_dir, output = _run(tmp_path, main, control, "--baseline", "8")
    probes = reader.read_table(run_dir, "probes")
    baseline = probes[probes["reason"] == "baseline"]
    assert baseline["cycle"].nunique() == 8
    requests = reader.read_table(run_dir, "requests")
    calls = requests[requests["kind"] != "probe"]
    assert len(calls) and calls["t_send"].min() > baseline["t"].max()  # nothing was sent during the baseline
    manifest = reader.read_manifest(run_dir)
    assert manifest.decided.verdict == "engine_age_degradation" and manifest.stop_reason == "decided"
    assert manifest.elapsed_s < 60  # serving time: the baseline is not counted
    events = [json.loads(line)["kind"] for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert "baseline" in events
    analysis = json.loads(CliRunner().invoke(diag_app, ["analyze", str(run_dir), "--json"]).output)
    assert analysis["verdict"] == "engine_age_degradation"
    paired = next(c for c in analysis["comparisons"] if c["basis"] == "paired_control")
    assert paired["num_early"] == baseline["cycle"].nunique() + 1  # the start cycle and the baseline's


def test_a_baseline_is_probe_cycles(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--trace",
            "examples/opencode.jsonl",
            "--minutes",
            "1",
            "--baseline",
            "8",
            "--probe-every",
            "0",
            "-o",
            str(tmp_path / "run"),
        ],
    )
    assert isinstance(result.exception, SoakError) and "with baseline_cycles" in str(result.exception)
