"""Intervals that stay valid when every probe cycle is looked at (diagnostics.evidence.sequential)."""

import numpy as np
import pytest

from diagnostics.evidence import intervals, sequential


@pytest.mark.parametrize("looks,published", [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (10, 2.555)])
def test_the_simulated_boundary_is_pococks_for_his_own_statistic(looks, published):
    # Pocock (1977), Table 1: two-sided 5 %, equally spaced looks at a cumulative mean
    assert sequential.pocock(looks) == pytest.approx(published, abs=0.012)


def test_more_looks_need_a_wider_interval_and_one_look_is_the_plain_level():
    assert sequential.level_for(1) == pytest.approx(1 - sequential.ALPHA)
    levels = [sequential.level_for(k) for k in (5, 20, 80)]
    assert levels == sorted(levels) and levels[0] > 0.93 and levels[-1] < 0.999
    assert sequential.looks_planned(180, 8) == 23 + 2 - 3  # ceil(180/8) periodic + start + end, less 3
    assert sequential.looks_planned(60, 0) == 1


def _misses_any_look(series: np.ndarray, level: float) -> bool:
    """Whether any look's thirds interval (the paired comparison's) leaves out the true ratio 1."""
    for n in range(sequential.MIN_CYCLES, len(series) + 1):
        k = sequential.side(n)
        i = intervals.log_ratio(series[:k], series[n - k : n], level)
        if i.bounded and not i.lo <= 1.0 <= i.hi:
            return True
    return False


def test_watched_at_every_cycle_a_stationary_series_is_wrong_as_often_as_one_look():
    rng = np.random.default_rng(12345)  # not the calibration's seed
    looks = 30 - sequential.MIN_CYCLES + 1
    series = np.exp(rng.normal(0.0, 0.05, (600, 30)))
    sequential_misses = np.mean([_misses_any_look(s, sequential.level_for(looks)) for s in series])
    fixed_misses = np.mean([_misses_any_look(s, 1 - sequential.ALPHA) for s in series])
    assert sequential_misses <= sequential.ALPHA + 0.03  # 600 series: the binomial spread is about 0.012
    assert fixed_misses > 2.5 * sequential.ALPHA  # a fixed 90 % at every look is wrong far more often


def test_an_early_side_capped_at_the_engines_youth_needs_no_wider_boundary():
    # the running verdict uses the uncapped boundary: on the safe side for any cap
    for looks in (40, 400):
        assert sequential.thirds_boundary(looks, early_max=12) <= sequential.thirds_boundary(looks) + 0.005


def _misses_any_baseline_look(series: np.ndarray, baseline: int, level: float) -> bool:
    """Whether any look's interval against a baseline (its first `baseline` samples) leaves out 1."""
    for m in range(sequential.BASELINE_FIRST, len(series) - baseline + 1):
        k = sequential.late_side(m)
        i = intervals.log_ratio(series[:baseline], series[baseline + m - k : baseline + m], level)
        if i.bounded and not i.lo <= 1.0 <= i.hi:
            return True
    return False


def test_looks_against_a_baseline_keep_their_level_together():
    rng = np.random.default_rng(54321)
    baseline, after = 8, 40
    looks = sequential.looks_after_baseline(after)
    series = np.exp(rng.normal(0.0, 0.05, (600, baseline + after)))
    level = sequential.level_for(looks, baseline=baseline)
    misses = np.mean([_misses_any_baseline_look(s, baseline, level) for s in series])
    fixed = np.mean([_misses_any_baseline_look(s, baseline, 1 - sequential.ALPHA) for s in series])
    assert misses <= sequential.ALPHA + 0.03
    assert fixed > 2 * sequential.ALPHA
    # no look before the late side has MIN_DECIDING samples: the first is at BASELINE_FIRST
    assert sequential.late_side(sequential.BASELINE_FIRST - 1) is None
    assert sequential.late_side(sequential.BASELINE_FIRST) == sequential.MIN_DECIDING
