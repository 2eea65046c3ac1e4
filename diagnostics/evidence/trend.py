"""The shape of a slowdown over engine age: a step or a gradual creep, and how fast it grows.

On the residual series of one engine life (log of observed over healthy step time, against
engine age in hours), two models with one change point each:

- **step**: one level, then another from a change point on (a level shift);
- **trend**: one level, then a straight line from a change point on (a hinge: the slowdown
  grows with engine age from there, possibly from the start).

Both are fitted by least squares on block means (at most MAX_BLOCKS, consecutive samples
averaged, so that a long series of correlated samples does not pretend to more evidence than it
has), each change point at the split that fits best. The shape is `gradual` when the trend fits
better (lower residual sum of squares; both models have three parameters), else `step`.

`per_hour` is the least-squares slope of the residual against engine age over the samples from
the change on (the whole life when no change was found), on block means, with a Student t
interval: fractional change of decode speed per hour, exp(-slope) - 1 (negative is slowing).

A creep has no moment it began that the data can show: its onset is where the fitted trend first
rises above the healthy level by DISTINGUISH times the noise of one sample (`sigma`), the first
moment the creep stands out of the healthy noise.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from scipy.stats import t as student_t

from diagnostics.evidence.intervals import LEVEL

MAX_BLOCKS = 120  # block means the two models are fitted on
SLOPE_BLOCKS = 48  # block means the per-hour slope is fitted on
MIN_BLOCKS = 6
# The largest change of log speed per hour a slope may say: a run of seconds extrapolated to an hour can
# read e^1000 (a soak that decided in 40 s crashed `diag analyze` with an overflow here); beyond this
# a per-hour figure says nothing, and none is given.
MAX_LOG_PER_H = 20.0
DISTINGUISH = 2.0  # a creep stands out once its trend has risen this many sigmas


class PerHour(NamedTuple):
    estimate: float  # fractional change of decode speed per hour of engine age (negative: slowing)
    lo: float
    hi: float
    since_age_s: float  # the slope is fitted from this engine age on


class Trend(NamedTuple):
    shape: str  # step or gradual
    change_age_s: float  # step: where the level shifts; gradual: where the trend starts rising
    rss_step: float
    rss_trend: float
    slope_per_h: float  # the trend's slope (log step time per hour), after its start


def fit(age_s: np.ndarray, residual: np.ndarray) -> Trend | None:
    """Step against hinge on (engine age, residual); None with too few points."""
    x, y = _blocks(age_s, residual, MAX_BLOCKS)
    n = len(x)
    if n < MIN_BLOCKS:
        return None
    # Step: two means split at k (each side at least two blocks).
    c1, c2 = np.cumsum(y), np.cumsum(y * y)
    k = np.arange(2, n - 1)  # [K] first block of the second level
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (n - k)
    j = int(np.argmin(left + right))
    rss_step, step_at = float((left + right)[j]), float((x[k[j] - 1] + x[k[j]]) / 2)
    # Hinge: a + b * max(0, x - h), h at each block (and before the first: a line throughout).
    best = (math.inf, float(x[0]), 0.0)
    for h in np.concatenate([[x[0]], x[1:-2]]):
        z = np.maximum(0.0, x - h)  # [n]
        design = np.column_stack([np.ones(n), z])
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        rss = float(np.sum((y - design @ coef) ** 2))
        if rss < best[0]:
            best = (rss, float(h), float(coef[1]))
    rss_trend, hinge, slope = best
    gradual = rss_trend < rss_step and slope > 0
    return Trend(
        shape="gradual" if gradual else "step",
        change_age_s=hinge if gradual else step_at,
        rss_step=rss_step,
        rss_trend=rss_trend,
        slope_per_h=slope * 3600,
    )


def per_hour(age_s: np.ndarray, residual: np.ndarray, since_age_s: float = -math.inf) -> PerHour | None:
    """The residual's slope per hour of engine age from `since_age_s` on, as a speed change."""
    keep = age_s >= since_age_s
    if np.sum(keep) < 2 * MIN_BLOCKS:
        keep = np.ones(len(age_s), dtype=bool)
        since_age_s = float(age_s.min()) if len(age_s) else 0.0
    x, y = _blocks(age_s[keep] / 3600.0, residual[keep], SLOPE_BLOCKS)
    n = len(x)
    if n < MIN_BLOCKS or np.ptp(x) <= 0:
        return None
    xm = x - x.mean()
    slope = float(np.sum(xm * (y - y.mean())) / np.sum(xm * xm))
    resid = y - y.mean() - slope * xm
    se = math.sqrt(float(np.sum(resid**2)) / (n - 2) / float(np.sum(xm * xm)))
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 2)) * se
    if not math.isfinite(half) or abs(slope) + half > MAX_LOG_PER_H:
        return None
    # A slower step time (a rising residual) is a falling speed: exp(-slope) - 1.
    return PerHour(math.expm1(-slope), math.expm1(-(slope + half)), math.expm1(-(slope - half)), float(since_age_s))


def creep_onset(age_s: np.ndarray, residual: np.ndarray, trend: Trend, base: float, sigma: float) -> int | None:
    """Index of the first sample where the fitted creep has risen DISTINGUISH sigmas above `base`
    (the healthy level); None when it never does within the data."""
    if trend.shape != "gradual" or trend.slope_per_h <= 0 or not np.isfinite(sigma):
        return None
    x, y = _blocks(age_s, residual, MAX_BLOCKS)
    z = np.maximum(0.0, x - trend.change_age_s)
    design = np.column_stack([np.ones(len(x)), z])
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    level = max(float(a), base)
    if b <= 0:
        return None
    rise_age = trend.change_age_s + (level + DISTINGUISH * sigma - a) / b  # the trend reaches it here
    later = np.flatnonzero(age_s >= rise_age)
    return int(later[0]) if len(later) else None


def _blocks(x: np.ndarray, y: np.ndarray, max_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Means of consecutive runs of (x, y), at most `max_blocks` of them."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    if len(x) <= max_blocks:
        return x, y
    edges = np.linspace(0, len(x), max_blocks + 1).round().astype(int)
    return (
        np.array([x[a:b].mean() for a, b in zip(edges[:-1], edges[1:])]),
        np.array([y[a:b].mean() for a, b in zip(edges[:-1], edges[1:])]),
    )
