"""The decode comparisons together: Bonferroni-widened, intersected (diagnostics.evidence.combine)."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from diagnostics.decision.verdict import decide
from diagnostics.evidence.combine import combine, widen
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.gathered import Evidence
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import CheckStatus


def cmp(basis, ratio, lo, hi, level=0.90):
    return Comparison(
        basis=basis,
        interval=Interval(ratio, lo, hi, level),
        num_early=8,
        num_late=8,
        material=DECODE_MATERIAL,
        detail=f"{basis} {ratio}",
        healthy_level=60.0,
    )


def test_widening_moves_each_end_by_the_ratio_of_the_normal_quantiles():
    w = widen(Interval(1.0, math.exp(-0.1), math.exp(0.2)), 0.95)
    f = norm.ppf(0.975) / norm.ppf(0.95)
    assert (math.log(w.lo), math.log(w.hi), w.level) == (pytest.approx(-0.1 * f), pytest.approx(0.2 * f), 0.95)
    wide = Interval(1.0, 0.5, 2.0, 0.994)  # a running verdict's paired control: already wider
    assert widen(wide, 0.95) == wide


def test_the_two_hour_soak_rules_out_what_its_bins_and_restart_knew():
    """A 2-hour healthy soak (issue 26): the paired control alone ruled out 14 %; with its bins and
    its restart control, each widened to 96.7 %, together they rule out about 2 %."""
    paired, bins, restart = (
        cmp("paired_control", 0.99, 0.86, 1.13),
        cmp("bins", 1.003, 0.985, 1.028),
        cmp("restart", 1.01, 0.97, 1.06),
    )
    together = combine([paired, bins, restart]).comparison
    assert together.basis == "combined" and together.bases == ("paired_control", "bins", "restart")
    assert together.interval.lo == pytest.approx(widen(bins.interval, 1 - 0.1 / 3).lo)
    assert 0.97 < together.interval.lo < 0.985 and together.interval.hi < 1.04
    steady = cmp("control_drift", 1.0, 0.99, 1.01)  # the control probed through the run
    d = decide(Evidence(paired=paired, bins=bins, restart=restart, control_drift=steady))
    # the narrowest of each alone (corrected for the host) and all together: here the bins alone
    assert d.verdict == "no_degradation" and d.confidence == "high" and d.decisive.interval.lo > 0.97
    # two that bound it from either side: together narrower than either
    low, high = cmp("bins", 0.98, 0.94, 1.02), cmp("restart", 1.02, 0.98, 1.06)
    d = decide(Evidence(bins=low, restart=high, control_drift=steady))
    assert d.basis == "combined" and d.decisive.interval.lo > 0.96 and d.decisive.interval.hi < 1.04
    assert "the decode comparisons together (restart control, bins)" in d.reason


def test_without_a_control_nothing_is_combined():
    """The log's own samples measure the host's change with the engine's; a restart does not."""
    d = decide(
        Evidence(
            bins=cmp("bins", 1.0, 0.98, 1.02),
            steps=cmp("step_series", 1.0, 0.97, 1.03),
            restart=cmp("restart", 1.0, 0.9, 1.1),
            onset_found=False,
            span_s=3600.0,
        )
    )
    assert d.verdict == "no_degradation" and d.basis != "combined"


def test_each_alone_or_all_together_whichever_is_narrower():
    """Bonferroni's cost: where the others add nothing, the best one alone is narrower."""
    steady = cmp("control_drift", 1.0, 0.99, 1.01)
    paired, loose = cmp("paired_control", 1.0, 0.95, 1.05), cmp("bins", 1.0, 0.84, 1.19)
    d = decide(Evidence(paired=paired, bins=loose, control_drift=steady))
    assert d.basis == "paired_control"


def test_a_wide_comparison_stays_out_and_one_alone_decides_alone():
    narrow, wide = cmp("bins", 1.0, 0.9, 1.12), cmp("paired_control", 0.8, 0.4, 1.6)
    assert combine([narrow]).comparison is None
    d = decide(Evidence(paired=wide, bins=narrow, span_s=3600.0, control_drift=cmp("control_drift", 1.0, 0.99, 1.01)))
    assert d.basis == "bins" and d.decisive.interval.level == 0.9  # not widened for a partner that adds nothing


def test_comparisons_that_do_not_overlap_are_not_combined_and_say_so():
    a, b = cmp("bins", 1.0, 0.98, 1.02), cmp("restart", 0.85, 0.83, 0.87)
    together = combine([a, b])
    assert together.comparison is None and [basis for basis, _ in together.widened] == ["bins", "restart"]
    d = decide(Evidence(bins=a, restart=b, span_s=3600.0, control_drift=cmp("control_drift", 1.0, 0.99, 1.01)))
    found = {f.name: f for f in d.findings}
    assert found["decode_agreement"].status == CheckStatus.WARN and "do not overlap" in found["decode_agreement"].detail


def test_together_they_cover_at_the_stated_level_on_dependent_comparisons():
    """Three comparisons of one true ratio, two of them sharing most of their noise (as the paired
    control and the probes share the probes): the intersection misses at most 10 % of the time."""
    rng = np.random.default_rng(3)
    z = norm.ppf(0.95)
    misses = 0
    trials = 2000
    for _ in range(trials):
        shared = rng.normal(0, 0.05)
        errs = [shared + rng.normal(0, 0.01), shared + rng.normal(0, 0.01), rng.normal(0, 0.03)]
        ses = [math.hypot(0.05, 0.01), math.hypot(0.05, 0.01), 0.03]
        cs = [
            cmp(b, math.exp(e), math.exp(e - z * s), math.exp(e + z * s))
            for b, e, s in zip(("paired_control", "probes", "bins"), errs, ses)
        ]
        together = combine(cs).comparison
        if together is None or not together.interval.lo <= 1.0 <= together.interval.hi:
            misses += 1
    assert misses / trials <= 0.10


def test_the_estimate_together_weighs_every_comparison_not_the_narrowest_alone():
    """A healthy demo: paired 0.90, restart 1.03, probes 1.07. The narrowest's estimate clipped to
    the intersection read "together 0.91 (0.91-1.02)", at its end, away from the other two."""
    paired, restart, probes = (
        cmp("paired_control", 0.90, 0.82, 0.99),
        cmp("restart", 1.03, 0.94, 1.13),
        cmp("probes", 1.07, 0.93, 1.23),
    )
    together = combine([paired, restart, probes]).comparison
    i = together.interval
    assert i.lo < i.estimate < i.hi and 0.95 < i.estimate < 1.0
    # one much narrower comparison carries the estimate; it stays inside the intersection
    tight = cmp("bins", 1.01, 1.0, 1.02)
    i = combine([paired, restart, tight]).comparison.interval
    assert 1.0 <= i.estimate <= 1.02 and i.lo <= i.estimate <= i.hi
