"""The verdict, rule by rule, on typed evidence (diagnostics.decision.verdict.decide is a pure function)."""

import pytest

from diagnostics.decision.caps import DATA_CHECKS
from diagnostics.decision.verdict import decide
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.gathered import Evidence, HostLoad
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import Basis, Cause, CheckStatus

HOST_DRIFT = Cause.HOST_DRIFT


def cmp(basis, ratio, lo, hi, material=DECODE_MATERIAL, n=8):
    return Comparison(
        basis=basis,
        interval=Interval(ratio, lo, hi),
        num_early=n,
        num_late=n,
        material=material,
        detail=f"{basis} {ratio}",
        healthy_level=60.0,
    )


UNBOUNDED = Interval(0.7, 0.0, float("inf"))


def prefill_cmp(ratio, lo, hi, num_early=10, num_late=10):
    """Prefill time at matched sizes, as a speed (late over healthy), at its material level 1/1.5."""
    return Comparison(
        basis=Basis.PREFILL,
        interval=Interval(ratio, lo, hi),
        num_early=num_early,
        num_late=num_late,
        material=1 / 1.5,
        detail="prefill",
        healthy_level=None,
        unit="speed",
    )


LOSS = cmp("probes", 0.7, 0.6, 0.8)
NO_LOSS = cmp("probes", 1.0, 0.96, 1.04)


def names(decision):
    return {f.name: f for f in decision.findings}


def test_a_loss_needs_the_whole_interval_past_the_material_level():
    assert decide(Evidence(probes=LOSS)).verdict == "engine_age_degradation"
    # the estimate is past 0.9 but the interval reaches above it: not a verdict of age
    straddling = cmp("probes", 0.85, 0.78, 0.93)
    d = decide(Evidence(probes=straddling))
    assert d.verdict == "insufficient_data" and d.confidence is None
    assert names(d)["confidence"].status == CheckStatus.FAIL


def test_too_few_samples_for_an_interval_is_insufficient_data_not_a_verdict():
    few = Comparison(
        basis=Basis.PROBES,
        interval=UNBOUNDED,
        num_early=1,
        num_late=1,
        material=DECODE_MATERIAL,
        detail="probes 0.7",
        healthy_level=60.0,
    )
    d = decide(Evidence(probes=few))
    assert d.verdict == "insufficient_data"
    assert d.reason.startswith("The data cannot tell")


def test_the_paired_control_decides_before_the_main_engine_alone():
    # the main engine's probes fell by 30%, the fresh control beside it fell as much
    d = decide(Evidence(paired=cmp("paired_control", 1.0, 0.95, 1.05), probes=LOSS))
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT and d.basis == "paired_control"
    assert names(d)["fresh_control"].status == CheckStatus.WARN
    # ...and a loss the pairs show is engine age, whatever the main probes alone say
    d = decide(Evidence(paired=cmp("paired_control", 0.6, 0.5, 0.7), probes=NO_LOSS))
    assert d.verdict == "engine_age_degradation" and d.basis == "paired_control"


def test_a_restart_whose_fresh_engine_is_as_slow_makes_it_host_drift():
    d = decide(Evidence(probes=LOSS, restart=cmp("restart", 1.0, 0.95, 1.05)))
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT
    assert "not the engine's age" in names(d)["fresh_control"].detail
    assert d.basis == "restart"  # the same-moment comparison rules the loss out
    # a restart that cures it keeps the verdict
    d = decide(Evidence(probes=LOSS, restart=cmp("restart", 0.7, 0.6, 0.8)))
    assert d.verdict == "engine_age_degradation"
    # a restart vetoes when it rules out recovering half the claimed loss (its interval above
    # sqrt(0.7) = 0.84): a noisy one that cannot does not, whatever its estimate; one that agrees
    # with the claim (0.7 against 0.7, both tight) keeps it
    assert decide(Evidence(probes=LOSS, restart=cmp("restart", 0.71, 0.69, 0.73))).verdict == "engine_age_degradation"
    d = decide(Evidence(probes=LOSS, restart=cmp("restart", 0.97, 0.86, 1.1)))
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT
    assert decide(Evidence(probes=LOSS, restart=cmp("restart", 0.95, 0.4, 2.2))).verdict == "engine_age_degradation"
    assert decide(Evidence(probes=LOSS, restart=cmp("restart", 0.75, 0.3, 1.9))).verdict == "engine_age_degradation"
    # between the two: a restart that does not show the fresh engine materially faster and rules
    # out that it was as much faster as claimed (its interval above 0.7, not all above 0.84)
    # leaves the claim unconfirmed: no age, and no cause either (a healthy one-minute soak's step
    # series read 0.85 while its restart read 1.02, 0.95-1.09)
    d = decide(Evidence(probes=LOSS, restart=cmp("restart", 0.9, 0.78, 1.04)))
    assert d.verdict == "insufficient_data" and d.cause is None
    assert "cannot tell engine age" in names(d)["fresh_control"].detail
    # a restart that confirms a smaller loss than claimed still confirms
    assert decide(Evidence(probes=LOSS, restart=cmp("restart", 0.8, 0.75, 0.86))).verdict == "engine_age_degradation"


def test_host_contention_without_a_paired_control_is_not_called_age():
    d = decide(Evidence(probes=LOSS, host=HostLoad(early=10.0, late=95.0)))
    assert d.verdict == "insufficient_data" and d.cause == HOST_DRIFT
    assert names(d)["host_contention"].status == CheckStatus.WARN
    # with a paired control the contention cancels: the pairs decide
    d = decide(Evidence(paired=cmp("paired_control", 0.6, 0.5, 0.7), host=HostLoad(10.0, 95.0)))
    assert d.verdict == "engine_age_degradation"


def test_the_step_series_needs_an_onset_context_that_cannot_explain_it_and_no_veto_from_bins():
    steps = cmp("step_series", 0.5, 0.4, 0.6)
    assert decide(Evidence(steps=steps, onset_found=True)).verdict == "engine_age_degradation"
    assert decide(Evidence(steps=steps, onset_found=True, context="cannot_explain")).verdict == "engine_age_degradation"
    assert decide(Evidence(steps=steps, onset_found=False)).verdict == "insufficient_data"
    d = decide(Evidence(steps=steps, onset_found=True, context="explains"))
    assert d.verdict == "context_growth_only" and d.confidence == "low"
    d = decide(Evidence(steps=steps, onset_found=True, bins=cmp("bins", 1.0, 0.97, 1.03)))
    assert d.verdict == "no_degradation" and names(d)["matched_conditions"].status == CheckStatus.WARN
    # probes that rule a loss out veto the step series too
    d = decide(Evidence(steps=steps, onset_found=True, probes=NO_LOSS))
    assert d.verdict == "no_degradation"


def test_a_segment_whose_aftermath_is_not_material_is_said_so():
    d = decide(Evidence(steps=cmp("step_series", 0.93, 0.91, 0.95), onset_found=True))
    assert d.verdict == "no_degradation" and names(d)["material_loss"].status == CheckStatus.WARN


def test_prefix_reuse_carries_the_verdict_when_decode_holds():
    reuse = Comparison(
        basis=Basis.PREFIX_REUSE,
        interval=Interval(0.0, 0.0, 0.1),
        num_early=10,
        num_late=10,
        material=0.5,
        detail="reuse",
        healthy_level=0.8,
        unit="share",
    )
    d = decide(Evidence(bins=cmp("bins", 1.0, 0.97, 1.03), reuse=reuse))
    assert d.verdict == "engine_age_degradation" and d.basis == "prefix_reuse"
    assert d.decode.basis == "bins"  # the slowdown figures still say how decode held


def test_a_contested_probe_loss_gives_way_to_a_clear_prefill_loss():
    prefill = prefill_cmp(0.33, 0.3, 0.37)
    d = decide(Evidence(probes=LOSS, bins=cmp("bins", 1.0, 0.97, 1.03), prefill=prefill))
    assert d.basis == "prefill" and names(d)["decode_basis"].status == CheckStatus.WARN


def test_prefill_must_survive_the_hosts_own_drift():
    prefill = prefill_cmp(0.5, 0.45, 0.55)
    paired = cmp("paired_control", 1.0, 0.95, 1.05)
    host_slowed = cmp("control_drift", 0.55, 0.5, 0.6)
    d = decide(Evidence(paired=paired, prefill=prefill, control_drift=host_slowed))
    assert d.verdict == "no_degradation" and names(d)["fresh_control"].status == CheckStatus.WARN
    steady = cmp("control_drift", 1.0, 0.95, 1.05)
    assert decide(Evidence(paired=paired, prefill=prefill, control_drift=steady)).verdict == "engine_age_degradation"


def test_a_prefill_loss_a_loose_drift_can_neither_keep_nor_explain_is_insufficient_data():
    """eviction-scan on a quiet host (2026-12-04): prefill 0.57 (0.50-0.64) beside a control
    drift of 0.83 (0.59-1.17); corrected, 0.43-1.08. Decode held (paired 1.03, 0.86-1.24), and
    the verdict was "no engine age" with the prefill loss put on the host."""
    prefill = prefill_cmp(0.57, 0.50, 0.64)
    paired = cmp("paired_control", 1.03, 0.86, 1.24)
    loose = cmp("control_drift", 0.83, 0.59, 1.17, n=3)
    d = decide(Evidence(paired=paired, prefill=prefill, control_drift=loose))
    assert d.verdict == "insufficient_data" and d.confidence is None
    assert names(d)["prefill_drift"].status == CheckStatus.FAIL and "fresh_control" not in names(d)
    assert "too loosely" in d.reason
    # a drift that rules the loss out once taken out still explains it (the host slowed)...
    d = decide(Evidence(paired=paired, prefill=prefill, control_drift=cmp("control_drift", 0.6, 0.55, 0.66)))
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT and "prefill_drift" not in names(d)
    # ...and one that keeps it leaves engine age
    d = decide(Evidence(paired=paired, prefill=prefill, control_drift=cmp("control_drift", 1.0, 0.9, 1.1)))
    assert d.verdict == "engine_age_degradation" and d.basis == "prefill"


def test_a_paired_control_wholly_below_one_is_not_called_no_age():
    """A live soak with a 12 % loss switched on read paired 0.90 (0.87-0.94) for three cycles: not
    yet a loss (the estimate not past 0.9), and "no engine age, low" hid a slowdown measured."""
    slower = cmp("paired_control", 0.903, 0.87, 0.94)
    d = decide(Evidence(paired=slower))
    assert d.verdict == "insufficient_data" and names(d)["paired_slower"].status == CheckStatus.FAIL
    assert "slower" in d.reason and d.decisive.basis == "paired_control"
    # slower but with a material loss ruled out: no age, medium
    d = decide(Evidence(paired=cmp("paired_control", 0.95, 0.92, 0.98)))
    assert d.verdict == "no_degradation" and d.confidence == "medium"
    # an interval that reaches 1 says nothing of a slowdown: no age, low, as before
    d = decide(Evidence(paired=cmp("paired_control", 0.94, 0.86, 1.02)))
    assert d.verdict == "no_degradation" and d.confidence == "low"


@pytest.mark.parametrize("lo, confidence", [(0.97, "high"), (0.92, "medium"), (0.85, "low")])
def test_no_age_says_how_large_a_loss_it_rules_out(lo, confidence):
    d = decide(Evidence(probes=cmp("probes", 1.0, lo, 1.05)))
    assert d.verdict == "no_degradation" and d.confidence == confidence
    assert f"rule out a loss of more than {1 - lo:.0%}" in d.reason


def test_age_confidence_is_high_when_the_interval_clears_the_material_level_by_another_ten_percent():
    assert decide(Evidence(probes=cmp("probes", 0.5, 0.45, 0.55))).confidence == "high"
    assert decide(Evidence(probes=cmp("probes", 0.85, 0.82, 0.88))).confidence == "medium"


def test_raw_throughput_that_fell_with_no_loss_at_matched_conditions_is_context_growth():
    d = decide(Evidence(bins=cmp("bins", 1.0, 0.97, 1.03), raw_ratio=0.5))
    assert d.verdict == "context_growth_only" and d.cause == "context_growth"
    # ...but a fall a fresh engine shared is not context either
    d = decide(Evidence(probes=LOSS, restart=cmp("restart", 1.0, 0.95, 1.05), raw_ratio=0.5))
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT


def test_no_data_at_all_is_insufficient_with_the_reason():
    d = decide(Evidence(no_data="2 usable decode samples"))
    assert d.verdict == "insufficient_data" and "2 usable decode samples" in d.reason


def test_a_ratio_beyond_the_sane_range_is_a_failed_matching_not_a_verdict():
    # A real vLLM excerpt of six windows, the first two carrying prefill: bins read late 15.7x
    # faster than "healthy". No engine speeds up fifteenfold; the windows compared were not alike.
    d = decide(Evidence(bins=cmp("bins", 15.7, 12.0, 20.0), steps=cmp("step_series", 1.02, 0.97, 1.07)))
    assert d.verdict == "insufficient_data" and d.confidence is None and d.decode is None
    sanity = names(d)["ratio_sanity"]
    assert sanity.status == CheckStatus.FAIL and "bins reads 15.7" in sanity.detail and "0.02-5" in sanity.detail
    # ...nor a fiftyfold loss, however tight its interval
    d = decide(Evidence(steps=cmp("step_series", 0.01, 0.008, 0.012), onset_found=True))
    assert d.verdict == "insufficient_data" and names(d)["ratio_sanity"].status == CheckStatus.FAIL
    # within the range the rules go on as before
    assert decide(Evidence(probes=cmp("probes", 0.03, 0.025, 0.035))).verdict == "engine_age_degradation"
    assert decide(Evidence(probes=cmp("probes", 4.5, 4.0, 5.0))).verdict == "no_degradation"


def test_no_age_from_a_minute_of_log_is_insufficient_data():
    # Four clean 10 s windows agree closely: a tight interval, but a minute of serving says nothing
    # about what hours of it do.
    steps = cmp("step_series", 0.99, 0.98, 1.0)
    d = decide(Evidence(steps=steps, span_s=30.0))
    assert d.verdict == "insufficient_data" and names(d)["data_span"].status == CheckStatus.FAIL
    assert "30 s of engine time" in names(d)["data_span"].detail
    assert decide(Evidence(steps=steps, span_s=3600.0)).verdict == "no_degradation"
    # Probes and controls are measured on purpose, not read off a log: the span rule is not theirs.
    assert decide(Evidence(probes=cmp("probes", 0.99, 0.97, 1.01), span_s=30.0)).verdict == "no_degradation"
    # ...and an age claim still stands or falls by its loss and its controls.
    assert (
        decide(Evidence(steps=cmp("step_series", 0.2, 0.1, 0.3), onset_found=True, span_s=30.0)).verdict
        == "engine_age_degradation"
    )


def test_with_a_control_every_single_engine_timing_is_corrected_by_the_controls_own_drift():
    wide_pairs = cmp("paired_control", 0.8, 0.4, 1.6, n=2)
    steady_host = cmp("control_drift", 1.0, 0.75, 1.35, n=3)
    slow_host = cmp("control_drift", 0.6, 0.5, 0.72)
    steps = cmp("step_series", 0.4, 0.36, 0.44)
    # the pairs cannot tell, but the engine's own steps fell far more than the host could have
    d = decide(Evidence(paired=wide_pairs, steps=steps, onset_found=True, control_drift=steady_host))
    assert d.verdict == "engine_age_degradation" and d.basis == "step_series"
    assert "corrected for the host" in d.decisive.detail and d.decisive.interval.hi < 0.6
    # the same fall of the steps, with the host as slow: not age
    d = decide(
        Evidence(
            paired=wide_pairs, steps=cmp("step_series", 0.6, 0.55, 0.65), onset_found=True, control_drift=slow_host
        )
    )
    assert d.verdict == "no_degradation" and d.cause == HOST_DRIFT
    assert names(d)["fresh_control"].status == CheckStatus.WARN
    # host contention is not ruled on where a control cancels it
    d = decide(
        Evidence(paired=wide_pairs, steps=steps, onset_found=True, control_drift=steady_host, host=HostLoad(5.0, 90.0))
    )
    assert d.verdict == "engine_age_degradation"


def test_a_control_drift_of_too_few_probes_corrects_nothing():
    """Two control probes a side read 1.19 (0.18-7.77) in a gc-pressure run: divided by that, a
    clear step-series loss became 0.45 (0.07-2.99) and the verdict insufficient_data."""
    unmeasured = cmp("control_drift", 1.19, 0.18, 7.77, n=2)
    steps = cmp("step_series", 0.53, 0.40, 0.72)
    d = decide(
        Evidence(
            paired=cmp("paired_control", 0.59, 0.38, 0.92, n=2), steps=steps, onset_found=True, control_drift=unmeasured
        )
    )
    assert d.verdict == "engine_age_degradation" and d.decisive.interval.hi == 0.72
    assert (
        names(d)["control_drift"].status == CheckStatus.WARN
        and "not measured to within a factor of 2" in names(d)["control_drift"].detail
    )
    # ...so host contention is ruled on as if there were no control
    d = decide(Evidence(steps=steps, onset_found=True, control_drift=unmeasured, host=HostLoad(5.0, 90.0)))
    assert d.verdict == "insufficient_data" and d.cause == HOST_DRIFT


def test_a_drift_beside_the_step_series_sides_of_too_few_probes_corrects_nothing():
    """gc-pressure in the matrix of 2026-12-04: the slowed engine's long probe cycles left one
    control probe beside each side of the step series (drift 1.01, unbounded); divided by it, a
    step series at 0.15 (0.13-0.17) lost its interval, and the verdict read insufficient_data with
    "the host slowed, not the engine" while the control ran at 62-69 tok/s throughout."""
    ev = Evidence(
        paired=cmp("paired_control", 0.19, 0.02, 1.71, n=2),
        steps=cmp("step_series", 0.15, 0.13, 0.17),
        onset_found=True,
        control_drift=cmp("control_drift", 0.91, 0.74, 1.12, n=2),
        step_drift=cmp("control_drift", 1.01, 0.0, float("inf"), n=1),
        restart=cmp("restart", 0.14, 0.12, 0.16),
    )
    d = decide(ev)
    assert d.verdict == "engine_age_degradation" and d.basis == "step_series"
    assert "corrected" not in d.decisive.detail and d.decisive.interval.hi == 0.17
    assert (
        names(d)["control_drift"].status == CheckStatus.WARN
        and "beside the step series" in names(d)["control_drift"].detail
    )
    assert "control_drift" in DATA_CHECKS  # its warning caps a high confidence (analysis, caps.capped)
    # uncorrected, the step series faces host contention as if there were no control
    d = decide(ev._replace(restart=None, host=HostLoad(5.0, 90.0)))
    assert d.verdict != "engine_age_degradation" and names(d)["host_contention"].status == CheckStatus.WARN
    # a drift beside the sides that is measured still corrects: the host as slow takes the loss away
    slow = cmp("control_drift", 0.15, 0.13, 0.17)
    d = decide(ev._replace(step_drift=slow, restart=None))
    assert d.verdict != "engine_age_degradation" and "control_drift" not in names(d)


def test_a_loss_still_material_net_of_the_hosts_drift_is_not_put_on_the_host():
    """Divided by a loosely measured drift, a step-series loss keeps its estimate (0.8) and loses
    its interval: the data cannot tell, and the text must not say the host slowed."""
    steps = cmp("step_series", 0.6, 0.55, 0.65)
    d = decide(Evidence(steps=steps, onset_found=True, control_drift=cmp("control_drift", 0.75, 0.55, 1.0)))
    assert d.verdict == "insufficient_data" and d.cause != HOST_DRIFT
    assert "cannot tell the host from the engine yet" in names(d)["fresh_control"].detail
    # where the drift explains the estimate too, it is the host's
    d = decide(Evidence(steps=steps, onset_found=True, control_drift=cmp("control_drift", 0.6, 0.5, 0.72)))
    assert d.cause == HOST_DRIFT and "the host slowed, not the engine" in names(d)["fresh_control"].detail


def test_a_decode_restart_does_not_judge_a_prefill_loss():
    """eviction-scan: admissions took 2.3x (prefill 0.43) while decode held within 15 %; the
    restart comparisons measure decode, so a fresh engine as fast at decoding says nothing of it."""
    prefill = prefill_cmp(0.43, 0.37, 0.57, num_early=19, num_late=15)
    decode_restart = cmp("restart", 0.86, 0.77, 0.97)
    d = decide(Evidence(bins=cmp("bins", 0.96, 0.9, 1.02), prefill=prefill, restart=decode_restart))
    assert d.verdict == "engine_age_degradation" and d.basis == "prefill"


def test_probe_comparisons_need_four_a_side_before_they_may_show_a_loss():
    three = LOSS._replace(num_early=3, num_late=3, min_for_loss=4)
    d = decide(Evidence(probes=three))
    assert d.verdict == "insufficient_data"
    assert names(d)["too_few_for_loss"].detail.endswith("on 3 a side; a loss needs 4")
    assert decide(Evidence(probes=three._replace(num_early=4, num_late=4))).verdict == "engine_age_degradation"


def test_step_comparisons_that_failed_their_matching_are_set_aside_where_identical_probes_read_sanely():
    # llama.cpp's slots filled in the first minute: the healthy model was fitted on slow steps and the
    # restart on the step series read 0.018; identical probes, which cannot be matched wrongly, read 0.3
    ev = Evidence(
        paired=cmp("paired_control", 0.3, 0.25, 0.36, n=12),
        restart=cmp("restart", 0.018, 0.01, 0.035),
        bins=cmp("bins", 1.2, 0.7, 1.9),
    )
    d = decide(ev)
    assert d.verdict == "engine_age_degradation" and d.basis == "paired_control"
    sanity = names(d)["ratio_sanity"]
    assert sanity.status == CheckStatus.WARN and "restart reads 0.018" in sanity.detail and "set aside" in sanity.detail
    # a probe comparison beyond the range is no matching failure to set aside: the data cannot tell
    d = decide(ev._replace(paired=cmp("paired_control", 0.01, 0.008, 0.012, n=12)))
    assert d.verdict == "insufficient_data" and names(d)["ratio_sanity"].status == CheckStatus.FAIL


def test_no_age_may_not_rest_on_bins_while_the_paired_control_shows_the_engine_slower():
    """A live soak with the output-buffer fault (0.87 against the twin) on a loaded host: the paired
    control 0.872, 0.786-0.968, not a loss by its rule (the interval reaches past 0.95); bins 1.03,
    0.93-1.14. It was "no engine age, medium" on the bins."""
    paired = cmp("paired_control", 0.872, 0.786, 0.968)._replace(detect=0.95)
    bins = cmp("bins", 1.03, 0.931, 1.143)
    d = decide(Evidence(paired=paired, bins=bins))
    assert d.verdict == "insufficient_data" and d.basis == "paired_control"
    assert names(d)["decode_agreement"].status == CheckStatus.FAIL
    # a paired control that reaches 1 does not contradict, and the bins decide as before
    d = decide(Evidence(paired=cmp("paired_control", 0.95, 0.80, 1.10)._replace(detect=0.95), bins=bins))
    assert d.verdict == "no_degradation" and d.basis == "bins" and d.confidence == "medium"


def test_a_restart_that_brings_back_a_material_loss_is_not_called_no_age():
    """The fault matrix's expert-thrash on the engine with its C kernels (2026-12-05): the expert
    cache drained within the healthy window, so the first life's bins read 1.00 (0.97-1.00) and its
    pairs 0.90 (0.68-1.19), while the restart control on the pairs read 0.76 (0.74-0.77): "no
    engine age, medium" was wrong."""
    paired = cmp("paired_control", 0.90, 0.68, 1.19, n=3)
    bins = cmp("bins", 1.00, 0.97, 1.00)
    restart = cmp("restart", 0.76, 0.74, 0.77, n=3)
    d = decide(Evidence(paired=paired, bins=bins, restart=restart))
    assert d.verdict == "insufficient_data" and names(d)["restart_slower"].status == CheckStatus.FAIL
    assert d.decisive.basis == "restart" and "--baseline" in d.reason
    # a restart that only straddles the material level says nothing against the bins
    d = decide(Evidence(paired=paired, bins=bins, restart=cmp("restart", 0.92, 0.86, 0.98, n=3)))
    assert d.verdict != "insufficient_data" and "restart_slower" not in names(d)
    # nor does the restart on the step series (traffic against probes: unlike with unlike)
    steps_restart = restart._replace(joins=False)
    assert "restart_slower" not in names(decide(Evidence(paired=paired, bins=bins, restart=steps_restart)))


def test_a_restart_that_shows_the_fresh_engine_faster_outvotes_no_age_at_the_bar_of_no_age():
    # An output-buffer fault from the second cycle, before any healthy side: pairs 0.94 through the
    # run (a loss of more than 19 % ruled out: "no engine age, low"), while the restart control
    # showed the aged engine at 0.87 of the fresh one, its interval below 1 but not below 0.9.
    paired = cmp("paired_control", 0.94, 0.86, 1.03)._replace(detect=0.95)
    restart = cmp("restart", 0.87, 0.80, 0.95, n=3)
    d = decide(Evidence(paired=paired, restart=restart))
    assert d.verdict == "insufficient_data" and names(d)["restart_slower"].status == CheckStatus.FAIL
    # one that reaches 1 does not
    d = decide(Evidence(paired=paired, restart=cmp("restart", 0.90, 0.80, 1.02, n=3)))
    assert d.verdict != "insufficient_data" and "restart_slower" not in names(d)
