"""The first words of every page (diagnostics.opening, issue 53): the answer, one figure with its
interval said once and in one direction, then what to do next, in about 60 words; a loss the
data leave possible is never said as no engine age, and a ratio above 1 never as a loss; what
held the confidence back and what an operator must know beside it.

The second reader test (docs/reader-test/README.md) found what these pin down: 'ran at 1.07 ...
up to 4% slower'; 'the slowdown may predate its healthy baseline' beside a restart that doubled
the speed; a 99% interval unexplained among 90% ones; a full KV cache buried among the checks;
'medium' on 2 early samples with nothing saying how thin that is; `soak run … --baseline 8`."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from diagnostics.comparison import Comparison
from diagnostics.intervals import Interval
from diagnostics.opening import check_title, held_back, measured, opening, warnings, when
from diagnostics.rerun import soak_command
from diagnostics.result import Check

ROOT = Path(__file__).resolve().parents[2]
# The engine called by anything but these is a reader's puzzle (issue 53's second reader test).
OTHER_NAMES = re.compile(r"\b(aged|healthy|main|restarted engine)\b", re.IGNORECASE)


def _comparison(basis: str, estimate: float, lo: float, hi: float, level: float = 0.9, n: int = 8) -> Comparison:
    return Comparison(
        basis=basis, interval=Interval(estimate, lo, hi, level), num_early=n, num_late=n, material=0.9, detail=""
    )


def _no_age(seed, estimate, lo, hi, verdict="no_degradation", basis="paired_control", confidence="low"):
    return dataclasses.replace(
        seed.analysis,
        source_kind="run_dir",
        verdict=verdict,
        confidence=confidence,
        basis=basis,
        cause=None,
        onset=None,
        recovered_by_restart=None,
        comparisons=(_comparison(basis, estimate, lo, hi),),
        checks=(),
    )


def _run(*command: str, elapsed_s: float = 144.0, events: pd.DataFrame | None = None) -> SimpleNamespace:
    """A run directory's source as the opening reads it: its manifest's command and length."""
    manifest = SimpleNamespace(command=list(command), elapsed_s=elapsed_s, engine={}, model=None, host={})
    return SimpleNamespace(
        path="runs/demo",
        kind="run_dir",
        manifest=manifest,
        log_info=None,
        requests=pd.DataFrame(),
        probes=pd.DataFrame(),
        events=events if events is not None else pd.DataFrame(),
    )


DEMO = (".venv/bin/soak", "run", "--trace", "examples/opencode.jsonl", "--minutes", "2", "--concurrency", "1")
DEMO += ("--engine-arg=--kv-tokens=2048", "-o", "runs/demo")


def _words(text: str) -> int:
    return len(text.split())


def test_a_ratio_above_one_is_no_slower_never_up_to_some_percent_slower(seed_inputs):
    """after-1 of the reader test: 1.07 (0.96-1.19) read 'up to 4% slower than the restarted engine'."""
    a = _no_age(seed_inputs, 1.07, 0.96, 1.19, basis="restart", confidence="high")
    o = opening(a, _run(*DEMO))  # type: ignore[arg-type]
    assert o.headline == "No slowdown measured (high confidence)"
    assert o.finding == (
        "The soaked engine ran at 1.07 of its own speed just after a restart (90% interval 0.96-1.19): no slower."
    )
    assert "slower than" not in o.paragraph and "up to" not in o.paragraph


@pytest.mark.parametrize(
    ("interval", "headline", "said"),
    [
        (
            (0.95, 0.92, 0.98),
            "Slightly slower, below what tokdrift calls engine age (medium confidence)",
            ": up to 8% slower than a fresh engine, below the 10% tokdrift calls engine age.",
        ),
        (
            (0.98, 0.95, 1.02),
            "No slowdown measured (medium confidence)",
            ": up to 5% slower than a fresh engine, below the 10% tokdrift calls engine age.",
        ),
        ((1.09, 1.00, 1.21), "No slowdown with engine age (medium confidence)", ": no slower."),
    ],
)
def test_a_small_loss_below_the_material_level_is_said_as_small(seed_inputs, interval, headline, said):
    o = opening(_no_age(seed_inputs, *interval, confidence="medium"))
    assert o.headline == headline
    assert o.finding.endswith(said)
    assert "no engine age" not in o.paragraph.lower()
    assert _words(o.paragraph) <= 60


def test_a_loss_the_interval_leaves_possible_is_said_once_in_one_direction(seed_inputs):
    """after-2: 'Slower as the context grew, not shown to slow with age' beside 'up to 17% slower ...
    not shown to reach the 10%': now slower as the context grew, and a loss from age possible."""
    a = _no_age(seed_inputs, 0.93, 0.83, 1.04, verdict="context_growth_only", basis="restart")
    o = opening(a, _run(*DEMO, elapsed_s=66))  # type: ignore[arg-type]
    assert o.headline == "Slower as the context grew, not shown to be engine age (low confidence)"
    assert o.finding == (
        "Decode slowed as the context grew; at the same conditions the soaked engine ran at 0.93 of its own speed "
        "just after a restart (90% interval 0.83-1.04): possibly up to 17% slower, more than this run can settle."
    )
    assert (
        o.next_step
        == "Run longer (this run lasted 66 s): `soak run --trace examples/opencode.jsonl --engine-arg=--kv-tokens=2048 --until-decided`."
    )
    assert "not shown to reach" not in o.paragraph
    # An estimate above 1 whose interval leaves a material loss open is no slower on the estimate.
    o = opening(_no_age(seed_inputs, 1.02, 0.85, 1.2))
    assert "no slower on this estimate, but the interval leaves a loss of up to 15% open" in o.finding


def test_a_short_run_says_how_long_it_was_and_that_hours_need_hours(seed_inputs):
    a = _no_age(seed_inputs, 1.07, 0.96, 1.19, basis="restart", confidence="high")
    o = opening(a, _run(*DEMO))  # type: ignore[arg-type]
    assert o.next_step == (
        "Nothing to restart or file. This run lasted 2.4 min; a slowdown that builds over hours needs a soak of "
        "hours: `soak run --trace examples/opencode.jsonl --engine-arg=--kv-tokens=2048 --hours 8`."
    )
    o = opening(a, _run(*DEMO, elapsed_s=5 * 3600))  # type: ignore[arg-type]
    assert o.next_step == "Nothing to restart or file; a longer soak would catch a slower drift."


def test_the_next_soak_is_a_complete_command_with_the_runs_own_target_and_trace():
    """`soak run … --baseline 8` and `--target URL` where the run knows both."""
    run = _run(
        "/work/main/.venv/bin/soak",
        "run",
        "--trace",
        "/work/main/examples/llamacpp-shared-kv.jsonl",
        "--until-decided",
        "--max-hours",
        "0.75",
        "--target",
        "http://127.0.0.1:8491",
        "--restart-cmd",
        "env NP=8 scripts/peer-engines.sh restart llama 8491",
        "--control-target",
        "http://127.0.0.1:8493",
        "--no-live",
        "-o",
        "/root/runs/x",
    )
    assert soak_command(run, "--baseline 8", "--until-decided") == (  # type: ignore[arg-type]
        "soak run --trace /work/main/examples/llamacpp-shared-kv.jsonl --target http://127.0.0.1:8491 "
        "--control-target http://127.0.0.1:8493 --baseline 8 --until-decided"
    )
    # The built-in engine is the default target; its options and faults are what was soaked.
    demo = _run(*DEMO, "--target", "builtin", "--fault", "output-buffer", "--engine-arg=--fault-after=15")
    assert soak_command(demo, "--until-decided") == (  # type: ignore[arg-type]
        "soak run --trace examples/opencode.jsonl --engine-arg=--kv-tokens=2048 --fault output-buffer "
        "--engine-arg=--fault-after=15 --until-decided"
    )
    # A log knows no trace and no address: the example trace, the address to fill in.
    assert soak_command(None, "--until-decided") == (
        "soak run --trace examples/opencode.jsonl --target http://HOST:PORT --until-decided"
    )


def test_the_figure_says_which_measure_it_is_why_and_what_the_others_read(seed_inputs):
    """after-4: the opening quoted 0.72 (paired control) while the table read 0.47-0.65, unexplained;
    after-1: the table said the engine got faster (probes 1.58), unexplained."""
    a = dataclasses.replace(
        _no_age(seed_inputs, 0.72, 0.63, 0.82, verdict="engine_age_degradation", confidence="medium"),
        comparisons=(
            _comparison("paired_control", 0.72, 0.63, 0.82),
            _comparison("restart", 0.65, 0.60, 0.71),
            _comparison("probes", 0.50, 0.25, 0.99),
            _comparison("step_series", 0.47, 0.39, 0.56),
            _comparison("control_drift", 0.69, 0.42, 1.14),
        ),
    )
    assert measured(a) == (
        "identical probes of the soaked engine and a fresh one, back to back, so that a change of the host or the "
        "load cancels; the other measures read: across the restart 0.65, own probes 0.50, step series 0.47 (those "
        "of the soaked engine over time carry the host's change too: a fresh engine's own speed fell to 0.69 of its "
        "first meanwhile)"
    )
    alone = dataclasses.replace(a, comparisons=a.comparisons[:1])
    assert measured(alone) is None  # no other measure to wonder about


def test_a_restart_that_sped_it_up_says_plainly_why_it_is_not_called_age(seed_inputs):
    """after-3 and after-10: 'the slowdown may predate its healthy baseline' beside a restart that
    made the engine twice as fast, which an operator reads as yes."""
    a = dataclasses.replace(
        seed_inputs.analysis,
        verdict="insufficient_data",
        confidence=None,
        basis="restart",
        onset=None,
        comparisons=(_comparison("restart", 0.48, 0.37, 0.62), _comparison("paired_control", 0.86, 0.63, 1.18)),
        checks=(Check("restart_slower", "fail", "..."),),
    )
    o = opening(a, _run(*DEMO))  # type: ignore[arg-type]
    assert o.finding == (
        "A restart made it faster: it had run at 0.48 of its speed after the restart (90% interval 0.37-0.62). "
        "But it never slowed during the run, so this is not engine age: it was slow from the start, or the host "
        "changed at the restart."
    )
    assert o.next_step == (
        "Soak again with a baseline first (this run lasted 2.4 min): "
        "`soak run --trace examples/opencode.jsonl --engine-arg=--kv-tokens=2048 --baseline 8 --until-decided`."
    )
    assert not OTHER_NAMES.search(o.paragraph), o.paragraph


def test_an_interval_wider_than_90_percent_says_why(seed_inputs):
    """after-5: a 99% interval among 90% ones: the soak stopped at a decided look."""
    a = dataclasses.replace(
        _no_age(seed_inputs, 0.14, 0.03, 0.65, verdict="engine_age_degradation", confidence="medium"),
        comparisons=(_comparison("paired_control", 0.14, 0.03, 0.65, level=0.9943),),
    )
    o = opening(a)
    assert (
        "0.14 of a fresh engine's speed (99% interval 0.03-0.65, not 90%: the soak checked after every probe cycle)"
        in o.finding
    )


def test_an_undecided_paired_control_says_its_figure_once_and_that_the_host_moved(seed_inputs):
    """The busy-host demo of the issue: paired 0.83 (0.68-1.00) while the fresh engine sped up 25 %."""
    a = dataclasses.replace(
        seed_inputs.analysis,
        verdict="insufficient_data",
        confidence=None,
        basis="paired_control",
        source_kind="run_dir",
        onset=None,
        recovered_by_restart=None,
        comparisons=(
            _comparison("paired_control", 0.83, 0.68, 1.00),
            _comparison("probes", 1.03, 0.87, 1.22),
            _comparison("control_drift", 1.25, 0.99, 1.57),
        ),
        checks=(Check("paired_slower", "fail", "..."), Check("host_contention", "warn", "...")),
    )
    o = opening(a, _run(*DEMO))  # type: ignore[arg-type]
    assert o.headline == "Cannot tell yet whether the engine slowed with age"
    assert o.paragraph.count("0.83") == 1 and "0.83 of a fresh engine's speed (90% interval 0.68-1.00)" in o.paragraph
    assert "The fresh engine's own speed changed +25% meanwhile" in o.paragraph
    assert o.next_step.startswith(
        "Run longer on a quieter host (this run lasted 2.4 min): `soak run --trace examples/opencode.jsonl"
    )
    assert not re.search(r"\d\.\d+x\b", o.paragraph)  # no ratio flipped into a multiple
    assert "…" not in o.paragraph and "URL" not in o.paragraph
    assert _words(o.paragraph) <= 65


def test_a_log_that_cannot_tell_names_the_option_that_would_let_it(seed_inputs):
    a = dataclasses.replace(
        seed_inputs.analysis,
        verdict="insufficient_data",
        confidence=None,
        basis="step_series",
        onset=None,
        comparisons=(_comparison("step_series", 0.75, 0.63, 0.89),),
        checks=(Check("confidence", "fail", "a loss without a cause: ..."), Check("engine_identity", "warn", "...")),
    )
    missing = SimpleNamespace(option="`--log-timestamps --log-prefix`")
    source = SimpleNamespace(
        path="server.log",
        log_info=SimpleNamespace(missing=(missing,)),
        manifest=None,
        requests=pd.DataFrame(),
        probes=pd.DataFrame(),
    )
    o = opening(a, source)  # type: ignore[arg-type]
    assert o.finding == (
        "Decode fell to 0.75 of its early speed at the same batch and context (90% interval 0.63-0.89), but with "
        "no fresh engine to compare with (its restarts ran another engine), it cannot tell longer context from "
        "engine age."
    )
    assert "`--log-timestamps --log-prefix`" in o.next_step
    assert "--trace examples/opencode.jsonl" in o.next_step  # soak run needs a trace: the command says one


def test_a_failed_confidence_check_is_named_for_the_reader():
    """after-8: 'FAIL `confidence`: a loss without a cause'."""
    assert check_title("confidence") == "cause of the slowdown"
    assert check_title("kv_space") is None  # a name that says what it is stays as it is


def test_what_held_the_confidence_back_is_said_beside_the_verdict(seed_inputs):
    a = dataclasses.replace(
        seed_inputs.analysis,
        samples=pd.DataFrame({"excluded": ["batch_changed"] * 37}),
        checks=(
            Check(
                "confidence_cap",
                "warn",
                "high by its interval, lowered to medium: the data checks warn (decode_after_prefill_or_idle, "
                "raw_throughput (0.12x raw against 0.43x matched)); a high confidence is given only where ...",
            ),
        ),
    )
    probes = pd.DataFrame({"status": ["ok"] * 20 + ["timeout"]})
    source = SimpleNamespace(requests=pd.DataFrame(), probes=probes, log_info=None)
    said = held_back(a, source)  # type: ignore[arg-type]
    assert said[0] == "1 of 21 probes failed (1 timeout)"
    assert said[-2] == "all 37 decode samples kept out (their windows held other work)"
    assert said[-1] == (
        "confidence medium, not high: decode samples mixed with other work, raw speed telling another story"
    )


def test_thin_data_is_said_with_its_numbers(seed_inputs):
    """after-9: medium on an 11-line log with 2 early samples, and nothing said of how thin that is."""
    assert seed_inputs.analysis.confidence == "medium"
    said = held_back(seed_inputs.analysis, seed_inputs.source)
    assert said[0] == "thin data: 5 usable decode samples in a log of 11 lines, 2 of them early"


def test_failed_requests_and_a_full_kv_cache_are_warned_beside_any_verdict(seed_inputs):
    """after-6: a 'no' whose KV cache failed requests 4 times, said only among the checks."""
    t = pd.to_datetime(["2026-12-02 17:05:33.2", "2026-12-02 17:10:00.0", "2026-12-02 17:20:07.8"])
    events = pd.DataFrame({"t": t, "kind": ["kv_no_space", "kv_full", "kv_no_space"]})
    a = dataclasses.replace(
        _no_age(seed_inputs, 1.09, 1.00, 1.21, confidence="medium"), checks=(Check("kv_space", "warn", "..."),)
    )
    run = _run(*DEMO, events=events)
    run.requests = pd.DataFrame({"status": ["ok"] * 100 + ["error"] * 3 + ["refused"]})
    said = warnings(a, run)  # type: ignore[arg-type]
    assert said == (
        "4 of 104 requests failed (3 error, 1 refused)",
        "the KV cache ran out of room: once a batch found no room even at its smallest and its requests failed; "
        "twice a batch was retried smaller (2026-12-02 17:05:33 UTC to 2026-12-02 17:20:07 UTC)",
    )
    o = opening(a, run)  # type: ignore[arg-type]
    assert o.warnings == said
    assert o.next_step.startswith("Nothing to restart or file for engine age (but see the warnings below).")


def test_every_opening_calls_the_engines_soaked_and_fresh_and_times_early_and_late(seed_inputs):
    cases = [
        _no_age(seed_inputs, 1.07, 0.96, 1.19, basis="restart"),
        _no_age(seed_inputs, 0.93, 0.83, 1.04, verdict="context_growth_only", basis="restart"),
        _no_age(seed_inputs, 0.95, 0.92, 0.98, basis="step_series"),
        dataclasses.replace(seed_inputs.analysis, recovered_by_restart=True),
    ]
    for a in cases:
        o = opening(a, _run(*DEMO))  # type: ignore[arg-type]
        assert not OTHER_NAMES.search(o.paragraph), o.paragraph


def test_times_are_to_the_second_in_the_sources_clock(seed_inputs, run_inputs):
    t = np.datetime64("2026-12-02T14:16:05.575798988")
    assert when(seed_inputs.analysis, t) == "2026-12-02 14:16:05"  # a log's own clock, zone unknown
    assert when(run_inputs.analysis, t) == "2026-12-02 14:16:05 UTC"  # a run directory's Unix time
