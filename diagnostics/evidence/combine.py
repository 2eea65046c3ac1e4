"""What the decode comparisons know together: one interval that holds wherever all of them do.

Each decode comparison (the paired control, the restart control, the identical probes, the
matched bins, the step series; each corrected for the host where there is a control) bounds
the same quantity: how fast the aged engine runs against the young one, at matched conditions,
net of the host. They rest on different samples and different designs, and they are not
independent (the paired control and the probes share the probes). Bonferroni needs no
independence: with k comparisons each widened to a two-sided level of 1 - (1 - LEVEL) / k, the
chance that any of them misses is at most 1 - LEVEL, so all hold at once at LEVEL and so does
their intersection — the largest lower end and the smallest upper end.

Widening assumes each interval's ends lie at normal quantiles of its log ratio (Welch t
intervals and percentile bootstraps nearly do): each end moves away from the estimate by the
ratio of the quantiles. An interval already at the level or wider is kept as it is (a running
verdict's paired control at 99.4 %, say).

Intervals that do not overlap once widened disagree: the comparisons measured different things
(unlike conditions, a control that was not a control) and nothing is combined.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from scipy.stats import norm

from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.intervals import LEVEL, Interval, level_text
from diagnostics.labels import BASIS_WORDS, Basis


class Combined(NamedTuple):
    comparison: Comparison | None  # the intersection; None when they disagree
    widened: tuple[tuple[Basis, Interval], ...]  # each comparison at the common level


def widen(interval: Interval, level: float) -> Interval:
    """The interval at a two-sided `level` at least as high as its own."""
    if interval.level >= level or not interval.bounded:
        return interval
    z_from, z_to = norm.ppf(0.5 + interval.level / 2), norm.ppf(0.5 + level / 2)
    f, est = z_to / z_from, interval.estimate
    lo = est * (interval.lo / est) ** f if interval.lo > 0 else 0.0
    hi = est * (interval.hi / est) ** f
    return Interval(est, lo, hi, level)


def combine(comparisons: Sequence[Comparison], level: float = LEVEL) -> Combined:
    """The comparisons' intersection at `level` (Bonferroni over them); needs two or more bounded ones."""
    bounded = [c for c in comparisons if c.interval.bounded and c.interval.estimate > 0]
    if len(bounded) < 2:
        return Combined(None, ())
    each = 1 - (1 - level) / len(bounded)
    widened = [(c, widen(c.interval, each)) for c in bounded]
    lo = max(w.lo for _, w in widened)
    hi = min(w.hi for _, w in widened)
    pairs = tuple((c.basis, w) for c, w in widened)
    if lo > hi:
        return Combined(None, pairs)
    # The estimate: the comparisons' log estimates weighted by the inverse square of their widened
    # intervals' log widths (all at one level, so a width stands for a standard error), inside the
    # intersection. The narrowest one's alone could sit at the intersection's end, away from all
    # the rest: a healthy demo read paired 0.90, restart 1.03 and probes 1.07, and together "0.91
    # (0.91-1.02)", the paired estimate clipped to the restart's lower end.
    widths = [max(math.log(w.hi / max(w.lo, 1e-300)), 1e-12) for _, w in widened]
    weights = [1 / width**2 for width in widths]
    pooled = math.exp(sum(wt * math.log(w.estimate) for wt, (_, w) in zip(weights, widened)) / sum(weights))
    estimate = min(max(pooled, lo), hi)
    narrowest_c = widened[widths.index(min(widths))][0]
    parts = ", ".join(f"{BASIS_WORDS[c.basis].name} {w.describe()}" for c, w in widened)
    detail = (
        f"the decode comparisons together ({', '.join(BASIS_WORDS[c.basis].name for c in bounded)}): "
        f"{len(widened)} intervals, each widened to "
        f"{level_text(each)} so that all hold at once at {level_text(level)} ({parts}); where all "
        f"hold: {estimate:.2f} ({level_text(level)} interval {lo:.2f}-{hi:.2f})"
    )
    comparison = Comparison(
        basis=Basis.COMBINED,
        interval=Interval(float(estimate), float(lo), float(hi), level),
        num_early=min(c.num_early for c in bounded),
        num_late=min(c.num_late for c in bounded),
        material=DECODE_MATERIAL,
        detail=detail,
        healthy_level=narrowest_c.healthy_level,
        unit=narrowest_c.unit,
        min_for_loss=max(c.min_for_loss for c in bounded),
        parts=tuple(c.basis for c in bounded),
    )
    return Combined(comparison, pairs)
