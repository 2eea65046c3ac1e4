"""Intervals: coverage on known noise, honesty with few samples, the same answer every time."""

import math

import numpy as np
import pytest

from diagnostics.intervals import blocks, bootstrap, log_ratio


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
