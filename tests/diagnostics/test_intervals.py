"""Intervals: coverage on known noise, honesty with few samples, the same answer every time."""

import math

import numpy as np
import pytest

from diagnostics.evidence.intervals import blocks, bootstrap, log_ratio, stretch_noise


def test_the_ratio_interval_covers_the_truth_about_as_often_as_it_says():
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(400):
        early = 60 * np.exp(rng.normal(0, 0.1, 6))
        late = 48 * np.exp(rng.normal(0, 0.1, 6))
        i = log_ratio(early, late)
        covered += i.lo <= 0.8 <= i.hi
    assert 0.84 <= covered / 400 <= 0.96


def test_a_large_effect_in_five_lines_is_clear_and_two_noisy_probes_are_not():
    clear = log_ratio([62.0, 68.0, 65.0], [11.5, 12.5])
    assert clear.bounded and clear.hi < 0.25
    noisy = log_ratio([55.1, 39.1], [43.5, 41.0])
    assert noisy.lo < 0.5 and noisy.hi > 1.5
    one = log_ratio([60.0], [30.0])
    assert not one.bounded and one.estimate == pytest.approx(0.5)


def test_blocks_turn_a_long_correlated_series_into_at_most_twelve_means():
    b = blocks(np.arange(120.0))
    assert len(b) == 12 and b[0] == pytest.approx(4.5) and b[-1] == pytest.approx(114.5)
    assert len(blocks([1.0, 2.0, np.nan])) == 2


def test_bootstrap_is_deterministic_and_vectorised():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    stat = lambda a, b: np.median(b, axis=1) / np.median(a, axis=1)  # noqa: E731
    first = bootstrap(stat, [x, 2 * x])
    assert first == bootstrap(stat, [x, 2 * x])
    assert first.estimate == pytest.approx(2.0) and first.lo < 2.0 < first.hi
    assert not bootstrap(stat, [x[:1], x]).bounded
    assert math.isinf(bootstrap(stat, [x[:1], x]).hi)


def _host_series(rng, seconds, level_of):
    """One sample a second: the host's level for each 20-second spell times a little sample noise."""
    t = np.arange(float(seconds))
    return t, level_of(t // 20) * np.exp(rng.normal(0, 0.02, len(t)))


def test_a_short_stretch_in_one_host_spell_is_no_surer_than_such_stretches_vary():
    rng = np.random.default_rng(3)
    levels = np.exp(rng.normal(0, 0.08, 20))  # a shared host: each 20-second spell at its own speed
    t, v = _host_series(rng, 400, lambda spell: levels[spell.astype(int)])
    ref, late = v[:380], v[380:]  # the last 20 seconds: one spell, whatever its level
    late = late * 0.88 / np.exp(np.log(late).mean() - np.log(ref).mean())  # a slow spell: 0.88 of the mean
    naive = log_ratio(blocks(ref), blocks(late))
    assert naive.hi < 0.95  # its 12 block means agree: a "loss"
    noise = stretch_noise(t[:380], ref, 19.0)
    assert noise is not None and 0.04 < noise.sd < 0.15 and noise.df == 18
    floored = log_ratio(blocks(ref), blocks(late), floors=(None, noise))
    assert floored.estimate == pytest.approx(naive.estimate)
    assert floored.lo < 0.8 and floored.hi > 1.0


def test_the_floor_changes_nothing_where_the_samples_already_show_more_noise():
    rng = np.random.default_rng(4)
    t, v = _host_series(rng, 400, lambda spell: np.ones_like(spell))
    noise = stretch_noise(t, v, 100.0)
    early, late = 60 * np.exp(rng.normal(0, 0.3, 12)), 50 * np.exp(rng.normal(0, 0.3, 12))
    assert log_ratio(early, late, floors=(noise, noise)) == log_ratio(early, late)


def test_a_reference_shorter_than_three_stretches_says_nothing():
    t = np.arange(50.0)
    assert stretch_noise(t, np.ones(50), 20.0) is None
    assert stretch_noise(t, np.ones(50), 0.0) is None


def test_an_upper_end_past_a_floats_range_is_unbounded_not_an_overflow():
    """Two samples a side, far apart, at a strict running level: the upper end exp(estimate + half)
    lies past what a float holds. It read OverflowError; it is an unbounded interval."""
    from diagnostics.evidence import intervals

    i = intervals.log_ratio([1.0, 100.0], [1.0, 1e6], level=0.99999)
    assert i.hi == math.inf and not i.bounded and math.isclose(i.estimate, 100.0)
