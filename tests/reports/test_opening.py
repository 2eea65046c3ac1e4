"""The first words of every page (diagnostics.opening, issue 53): the answer, one figure with its
interval said once and in one direction, then what to do next, in about 60 words; a loss the
data leave possible is never said as no engine age; what held the confidence back beside it."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from diagnostics.comparison import Comparison
from diagnostics.intervals import Interval
from diagnostics.opening import held_back, opening, when
from diagnostics.result import Check


def _comparison(basis: str, estimate: float, lo: float, hi: float) -> Comparison:
    return Comparison(
        basis=basis, interval=Interval(estimate, lo, hi), num_early=8, num_late=8, material=0.9, detail=""
    )


def _no_age(seed, estimate, lo, hi, verdict="no_degradation", basis="paired_control", confidence="low"):
    return dataclasses.replace(
        seed.analysis,
        verdict=verdict,
        confidence=confidence,
        basis=basis,
        cause=None,
        onset=None,
        recovered_by_restart=None,
        comparisons=(_comparison(basis, estimate, lo, hi),),
        checks=(),
    )


def _words(text: str) -> int:
    return len(text.split())


def test_a_loss_the_interval_leaves_possible_is_said_as_up_to_never_as_no_engine_age(seed_inputs):
    """The 2-hour healthy soak of the issue: 0.90 (0.83-0.97), the whole interval below 1; it read
    'No engine age ... rule out a loss of more than 17 %'."""
    o = opening(_no_age(seed_inputs, 0.90, 0.83, 0.97, verdict="context_growth_only"))
    assert o.headline == "Slower as the context grew, not shown to slow with age (low confidence)"
    assert "0.90 of a fresh engine's speed (90% interval 0.83-0.97): up to 17% slower than a fresh engine" in o.finding
    assert "not shown to reach the 10% tokdrift calls engine age" in o.finding
    assert o.next_step.startswith("Run longer")
    assert "no engine age" not in (o.headline + o.paragraph).lower()


@pytest.mark.parametrize(
    ("interval", "headline"),
    [
        ((0.95, 0.92, 0.98), "Slightly slower, below what tokdrift calls engine age (medium confidence)"),
        ((1.02, 0.95, 1.09), "No slowdown measured (medium confidence)"),
        ((1.09, 1.00, 1.21), "No slowdown with engine age (medium confidence)"),
    ],
)
def test_a_small_loss_below_the_material_level_is_said_as_small(seed_inputs, interval, headline):
    o = opening(_no_age(seed_inputs, *interval, confidence="medium"))
    assert o.headline == headline
    assert "no engine age" not in o.paragraph.lower()
    assert _words(o.paragraph) <= 60


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
    o = opening(a)
    assert o.headline == "Cannot tell yet whether the engine slowed with age"
    assert o.paragraph.count("0.83") == 1 and "0.83 of a fresh engine's speed (90% interval 0.68-1.00)" in o.paragraph
    assert "The fresh engine's own speed changed +25% meanwhile" in o.paragraph
    assert o.next_step.startswith("Run longer on a quieter host")
    assert not re.search(r"\d\.\d+x\b", o.paragraph)  # no ratio flipped into a multiple
    assert _words(o.paragraph) <= 60


def test_a_log_that_cannot_tell_names_the_option_that_would_let_it(seed_inputs):
    a = dataclasses.replace(
        seed_inputs.analysis,
        verdict="insufficient_data",
        confidence=None,
        basis="step_series",
        onset=None,
        comparisons=(_comparison("step_series", 0.75, 0.63, 0.89),),
        checks=(Check("confidence", "fail", "a loss without a cause: ..."),),
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
    assert o.finding.startswith("Decode fell to 0.75 of its healthy speed at the same batch and context")
    assert "cannot tell whether longer context or engine age slowed it" in o.finding
    assert "`--log-timestamps --log-prefix`" in o.next_step


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
    requests = pd.DataFrame({"status": ["ok"] * 100 + ["error"] * 3 + ["refused"]})
    source = SimpleNamespace(requests=requests, probes=pd.DataFrame())
    said = held_back(a, source)  # type: ignore[arg-type]
    assert said[0] == "4 of 104 requests failed (3 error, 1 refused)"
    assert said[1] == "all 37 decode samples kept out (their windows held other work)"
    assert said[2] == (
        "confidence medium, not high: decode samples mixed with other work, raw speed telling another story"
    )


def test_times_are_to_the_second_in_the_sources_clock(seed_inputs, run_inputs):
    t = np.datetime64("2026-12-02T14:16:05.575798988")
    assert when(seed_inputs.analysis, t) == "2026-12-02 14:16:05"  # a log's own clock, zone unknown
    assert when(run_inputs.analysis, t) == "2026-12-02 14:16:05 UTC"  # a run directory's Unix time
