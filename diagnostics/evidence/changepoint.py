"""Change points in a residual series: PELT (Killick et al. 2012) via `ruptures`.

Cost: L2 (a change in mean). Penalty: 2 * sigma^2 * ln(n) per change, the SIC/BIC penalty
for a mean shift with known variance, with sigma estimated robustly from the series itself
(MAD of first differences / sqrt 2, which level shifts barely move). Long series are first
reduced to at most MAX_POINTS block medians (which keeps PELT fast and shrinks sigma by the
same blocking); each change found between blocks is then placed exactly by the split that
minimises the L2 cost over the two blocks around it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import ruptures

from diagnostics.evidence.healthy import robust_sigma

MAX_POINTS = 400
SIGMA_FLOOR = 0.01  # log units: a perfectly quiet synthetic series still needs a finite penalty


# ruptures ships no type information, so BaseCost is Any to mypy; Pelt takes a custom cost only as
# an instance of it.
class _CostL2(ruptures.base.BaseCost):  # type: ignore[misc]
    """ruptures' L2 cost (sum of squared deviations from the segment mean) from cumulative sums,
    O(1) per segment instead of O(length): the same numbers, PELT an order of magnitude faster."""

    model = "l2_cumsum"
    min_size = 1

    def fit(self, signal: np.ndarray) -> _CostL2:
        self.signal = np.asarray(signal, dtype=float).reshape(-1, 1)
        x = self.signal[:, 0]
        self._s1 = np.concatenate([[0.0], np.cumsum(x)])
        self._s2 = np.concatenate([[0.0], np.cumsum(x * x)])
        return self

    def error(self, start: int, end: int) -> float:
        n = end - start
        s1 = self._s1[end] - self._s1[start]
        return float(self._s2[end] - self._s2[start] - s1 * s1 / n)


class Segment(NamedTuple):
    start: int  # index into the series, inclusive
    end: int  # exclusive
    level: float  # median residual of the segment


class ChangePoints(NamedTuple):
    segments: tuple[Segment, ...]
    sigma: float  # noise of one sample
    penalty: float
    block: int  # samples per block PELT ran on

    @property
    def breaks(self) -> list[int]:
        return [s.start for s in self.segments[1:]]

    def first_rise(self, level: float, min_start: int = 0) -> Segment | None:
        """The first segment, starting at `min_start` or later, whose level is at least `level`
        and above the segment before it: where a residual series turns materially worse."""
        for prev, seg in zip(self.segments, self.segments[1:]):
            if seg.start >= min_start and seg.level >= level and seg.level > prev.level:
                return seg
        return None

    def first_lasting_rise(self, level: float, back: float, min_start: int = 0) -> Segment | None:
        """The first segment `first_rise` would give after which no segment falls back below
        `back`: where a series turns materially worse and stays worse. A noisy host wanders into
        short slow spells and out of them; a slowdown that lasts does not come back."""
        for k, (prev, seg) in enumerate(zip(self.segments, self.segments[1:]), start=1):
            if seg.start >= min_start and seg.level >= level and seg.level > prev.level:
                if all(later.level >= back for later in self.segments[k + 1 :]):
                    return seg
        return None


def detect(r: np.ndarray) -> ChangePoints:
    """Segments of constant mean in `r` (no NaN)."""
    n = len(r)
    if n == 0:
        return ChangePoints((), float("nan"), float("nan"), 1)
    block = max(1, math.ceil(n / MAX_POINTS))
    num_blocks = n // block
    if block > 1:
        series = np.median(r[: num_blocks * block].reshape(num_blocks, block), axis=1)
        if n % block:
            series = np.append(series, np.median(r[num_blocks * block :]))
    else:
        series = r
    sigma_one = robust_sigma(r)
    sigma = robust_sigma(series)
    sigma = max(sigma if np.isfinite(sigma) else SIGMA_FLOOR, SIGMA_FLOOR)
    penalty = 2.0 * sigma**2 * math.log(max(len(series), 2))
    bkps = []
    if len(series) >= 3:
        min_size = 2 if len(series) >= 4 else 1
        algo = ruptures.Pelt(custom_cost=_CostL2(), min_size=min_size, jump=1).fit(series.reshape(-1, 1))
        bkps = [b for b in algo.predict(pen=penalty) if b < len(series)]
    cuts = [_refine(r, b * block, block) for b in bkps] if block > 1 else bkps
    edges = [0, *sorted(set(cuts)), n]
    segments = tuple(Segment(a, b, float(np.median(r[a:b]))) for a, b in zip(edges[:-1], edges[1:]) if b > a)
    return ChangePoints(segments, max(sigma_one, SIGMA_FLOOR) if np.isfinite(sigma_one) else sigma, penalty, block)


def _refine(r: np.ndarray, cut: int, block: int) -> int:
    """The split within [cut - block, cut + block) that minimises the two-mean L2 cost."""
    lo, hi = max(0, cut - block), min(len(r), cut + block)
    x = r[lo:hi]
    if len(x) < 2:
        return cut
    c1, c2 = np.cumsum(x), np.cumsum(x**2)
    k = np.arange(1, len(x))
    left = c2[k - 1] - c1[k - 1] ** 2 / k
    right = (c2[-1] - c2[k - 1]) - (c1[-1] - c1[k - 1]) ** 2 / (len(x) - k)
    return lo + int(k[np.argmin(left + right)])
