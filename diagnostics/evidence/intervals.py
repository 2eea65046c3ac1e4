"""Intervals that know their own noise: every comparison diag makes carries one.

Two kinds, both deterministic (the same data give the same interval every time):

- **Ratio of rates** (`log_ratio`): late over early as two samples of log values (decode
  rates, step times, paired main/control ratios): the ratio of their geometric means with a
  Welch t interval on the logs. It weighs the effect against the noise each side shows, so
  five log lines with a five-fold drop are a clear answer and two probes a second apart are
  not; one sample on a side gives no interval at all.
- **Bootstrap** (`bootstrap`): percentile interval of a statistic over resamples drawn with a
  fixed seed, for statistics no two-sample formula fits (a weighted sum over matched bins, a
  ratio of totals, a median share). Resampling is within each group the caller passes.

Samples of a time series are not independent; `blocks` averages consecutive ones into at most
MAX_BLOCKS block means per side first, so that a run of correlated samples counts as one.
A short stretch (the last seconds of a life) holds one state of a shared host, however many
samples it has: its block means agree with each other and say nothing of how much the host
moves from one such stretch to the next. `stretch_noise` reads that from a longer reference
series (how much the means of stretches of the same length vary there), and `log_ratio` takes
it as the least noise the short side's mean can have (a floor). Intervals are two-sided at LEVEL.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy.stats import t as student_t

Values = Sequence[float] | np.ndarray  # samples of one side, in time order where that matters
LEVEL = 0.90  # two-sided coverage of every interval diag reports
MAX_EXP = math.log(sys.float_info.max)  # math.exp overflows past this
MAX_BLOCKS = 12  # block means per side of a time-series comparison
MIN_WINDOWS = 3  # stretches of the claim's length a reference must hold to say how much their means vary
MAX_SERIAL = 0.5  # the most lag-1 correlation a series of probe cycles is credited with
NUM_RESAMPLES = 2000
SEED = 0


class Interval(NamedTuple):
    """A ratio (late over healthy) and its interval; hi inf (and lo 0) when the samples cannot bound it."""

    estimate: float
    lo: float
    hi: float
    level: float = LEVEL

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.hi)

    def describe(self, digits: int = 2) -> str:
        """`0.93 (90% interval 0.88-0.97)`, or a note that too few samples bound it."""
        if not self.bounded:
            return f"{self.estimate:.{digits}f} (too few samples for a {level_text(self.level)} interval)"
        return f"{self.estimate:.{digits}f} ({self.span(digits)})"

    def span(self, digits: int = 2) -> str:
        """`90% interval 0.88-0.97` (bounded intervals)."""
        return f"{level_text(self.level)} interval {_bound(self.lo, digits)}-{_bound(self.hi, digits)}"


def level_text(level: float) -> str:
    """`90%`; a running verdict's wider levels with the digits that tell them apart: `99.74%`."""
    return f"{level:.0%}" if level < 0.995 else f"{100 * level:.2f}".rstrip("0").rstrip(".") + "%"


class StretchNoise(NamedTuple):
    """How much the mean of a stretch of one length varies along a reference series (log scale)."""

    sd: float  # standard deviation of a stretch's mean log value
    df: int  # its degrees of freedom: non-overlapping stretches the reference holds, less one


def _bound(x: float, digits: int) -> str:
    """An interval's end: fixed digits, or three significant ones where it is far out (0.00-3.4e+35)."""
    return f"{x:.{digits}f}" if x < 1000 else f"{x:.3g}"


def divide(a: Interval, b: Interval) -> Interval:
    """a / b with their uncertainties combined in quadrature on the log scale (each side of each
    interval on its own, as if independent): a ratio corrected by another measured ratio."""
    if not (a.bounded and b.bounded) or a.estimate <= 0 or b.estimate <= 0 or a.lo <= 0 or b.lo <= 0:
        return Interval(a.estimate / b.estimate if b.estimate > 0 else math.nan, 0.0, math.inf, a.level)
    up = math.hypot(math.log(a.hi / a.estimate), math.log(b.estimate / b.lo))
    down = math.hypot(math.log(a.estimate / a.lo), math.log(b.hi / b.estimate))
    estimate = a.estimate / b.estimate
    return Interval(estimate, estimate * math.exp(-down), estimate * math.exp(up), a.level)


def log_ratio(
    early: Values,
    late: Values,
    level: float = LEVEL,
    serial: bool = False,
    floors: tuple[StretchNoise | None, StretchNoise | None] = (None, None),
) -> Interval:
    """exp(mean log late - mean log early) with its Welch t interval: late over early on a
    ratio scale (values must be > 0; others are dropped). `serial`: each side is consecutive
    samples of one series (probe cycles, in time order), whose lag-1 correlation
    (`serial_correlation`) widens the variance of each mean by (1 + r) / (1 - r). `floors`: for
    each side (early, late), the least noise its mean has (`stretch_noise`); where a floor is
    above what the side's own samples show, it stands in for them, with its own degrees of
    freedom."""
    x, y = _logs(early), _logs(late)
    m, n = len(x), len(y)
    if m == 0 or n == 0:
        return Interval(math.nan, 0.0, math.inf, level)
    estimate = float(y.mean() - x.mean())
    if m < 2 or n < 2:
        return Interval(math.exp(estimate), 0.0, math.inf, level)
    inflate = 1.0
    if serial:
        r = serial_correlation(x, y)
        inflate = (1 + r) / (1 - r)
    (vx, dx), (vy, dy) = (
        _floored(inflate * float(v.var(ddof=1)) / len(v), len(v) - 1, f) for v, f in ((x, floors[0]), (y, floors[1]))
    )
    se = math.sqrt(vx + vy)
    if se == 0:
        return Interval(math.exp(estimate), math.exp(estimate), math.exp(estimate), level)
    df = (vx + vy) ** 2 / (vx**2 / dx + vy**2 / dy)
    half = float(student_t.ppf(0.5 + level / 2, df)) * se
    # Two samples a side at a running level can put the upper end past a float's range: unbounded.
    upper = math.exp(estimate + half) if estimate + half < MAX_EXP else math.inf
    return Interval(math.exp(estimate), math.exp(estimate - half), upper, level)


def _floored(var: float, df: int, floor: StretchNoise | None) -> tuple[float, int]:
    """A side's variance of its mean and its degrees of freedom, or the floor's where that is larger."""
    if floor is None or floor.sd**2 <= var:
        return var, df
    return floor.sd**2, floor.df


def stretch_noise(t: Values, values: Values, duration: float) -> StretchNoise | None:
    """How much the mean log value of a stretch `duration` long varies along a reference series
    (`t` in seconds, `values` > 0): the standard deviation of the means of every such stretch
    that starts at a sample and ends within the series, its degrees of freedom the number of
    non-overlapping stretches less one. None when the series holds fewer than MIN_WINDOWS of
    them: the reference is then no longer than a few stretches, and its own block means already
    span the host's slow minutes."""
    at, v = np.asarray(t, dtype=float), np.asarray(values, dtype=float)
    keep = np.isfinite(at) & np.isfinite(v) & (v > 0)
    order = np.argsort(at[keep], kind="stable")
    at, logs = at[keep][order], np.log(v[keep][order])
    if len(at) < 2 or not duration > 0:
        return None
    count = int((at[-1] - at[0]) // duration)
    if count < MIN_WINDOWS:
        return None
    starts = np.flatnonzero(at + duration <= at[-1])
    if len(starts) < 2:
        return None
    ends = np.searchsorted(at, at[starts] + duration, side="right")
    total = np.r_[0.0, np.cumsum(logs)]
    means = (total[ends] - total[starts]) / (ends - starts)
    return StretchNoise(float(means.std(ddof=1)), count - 1)


def serial_correlation(*sides: np.ndarray) -> float:
    """The lag-1 correlation of consecutive samples, each side (in time order) about its own mean
    and pooled, with the bias of a short demeaned side (about -1/n) added back; clipped to
    0..MAX_SERIAL. Cycles of a probe series share the host's slow minutes: positively correlated,
    their means vary more than independent samples' would."""
    num = den = bias = 0.0
    pairs = 0
    for x in sides:
        x = np.asarray(x, dtype=float)
        if len(x) < 3:
            continue
        d = x - x.mean()
        num += float(d[1:] @ d[:-1])
        den += float(d @ d)
        bias += (len(x) - 1) / len(x)
        pairs += len(x) - 1
    if pairs < 4 or den <= 0:
        return 0.0
    return float(min(max(num / den + bias / pairs, 0.0), MAX_SERIAL))


def _logs(values: Values) -> np.ndarray:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    logs: np.ndarray = np.log(v)
    return logs


def blocks(values: Values, max_blocks: int = MAX_BLOCKS) -> np.ndarray:
    """Means of consecutive runs of `values`, at most `max_blocks` of them (all of them when fewer)."""
    v: np.ndarray = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if len(v) <= max_blocks:
        return v
    edges = np.linspace(0, len(v), max_blocks + 1).round().astype(int)
    return np.array([v[a:b].mean() for a, b in zip(edges[:-1], edges[1:]) if b > a])


def bootstrap(
    statistic: Callable[..., np.ndarray],
    groups: Sequence[np.ndarray],
    level: float = LEVEL,
    num_resamples: int = NUM_RESAMPLES,
) -> Interval:
    """Percentile interval of `statistic`, each group resampled with replacement on its own.

    `statistic` gets every group with a leading resample axis — shape (R, n) or (R, n, k) for a
    group of n rows — and returns R values; it is called once with R = 1 on the groups as they
    are for the estimate, then with R = num_resamples.
    """
    groups = [np.asarray(g, dtype=float) for g in groups]
    estimate = float(statistic(*(g[None] for g in groups))[0])
    if any(len(g) < 2 for g in groups):
        return Interval(estimate, 0.0, math.inf, level)
    rng = np.random.default_rng(SEED)
    draws = np.asarray(statistic(*(g[rng.integers(0, len(g), (num_resamples, len(g)))] for g in groups)), dtype=float)
    draws = draws[np.isfinite(draws)]
    if len(draws) < num_resamples // 2:
        return Interval(estimate, 0.0, math.inf, level)
    a = (1 - level) / 2
    return Interval(estimate, float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a)), level)
