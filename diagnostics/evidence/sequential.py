"""Running comparisons that keep their error rate however often they are looked at.

A soak prints its verdict so far after every probe cycle, and `soak run --until-decided` stops
at the first look that decides. Each look compares the last third of the paired cycles (the
soaked engine over its fresh control) with the first third by a Welch interval; taken at a fixed
90 % every time, K looks at one healthy engine give K chances for one of them to cross a line by
chance. The fix is Pocock's (S. J. Pocock, "Group sequential methods in the design and analysis
of clinical trials", Biometrika 64, 1977): one constant boundary c on the standardised statistic
for all K planned looks, chosen so that under no change the chance that *any* look exceeds it is
the stated error rate, and each look's interval taken at the level that boundary stands for,
2 Phi(c) - 1, instead of 90 %.

Pocock's constants are for cumulative means with a known variance; diag's statistic is a Welch t
of two growing thirds, whose looks are correlated in another way. The constant is found the same
way for both (`boundary`): the joint law of the standardised looks depends on nothing but the
number of samples at each look (the statistic is pivotal for independent normal samples), so it
is simulated once with a fixed seed, each look's t turned into a normal score through its own t
distribution (`_scores`), and c is the (1 - alpha) quantile of the largest score over the looks.
`pocock` does this for Pocock's own statistic; tests check it against his published constants.

The guarantee: with probability at least 1 - alpha (90 %) every one of the K looks' intervals
holds its own true ratio at once, so the verdict after any cycle, and the final verdict of a
run stopped at the first decided look, keep the stated error rate. It assumes the per-cycle log
ratios are independent and normal around a level that can step; a step inside a side only widens
that side's interval. Looks beyond the K planned widen the boundary to their own count
(`level_for`). `benchmarks/time_to_verdict.py` measures the false-age rate when every cycle is
looked at on recorded healthy runs, whose noise is not normal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

ALPHA = 0.10  # the chance that any look's interval misses (two-sided), as diagnostics.evidence.intervals.LEVEL
NUM_SIMS = 20_000
SIM_BUDGET = 10_000_000  # simulated looks in all; fewer series where there are very many looks...
MIN_SIMS = 4_000  # ...but never fewer than this (the 90 % quantile then moves by about 0.01)
SEED = 0
MIN_SIDE = 2  # samples a side of an early-against-late comparison needs at least
MIN_CYCLES = 2 * MIN_SIDE  # the first look
MIN_DECIDING = 4  # samples a side before a comparison may decide (diagnostics.evidence.controls.MIN_FOR_LOSS)
# Samples since a baseline at the first look of a comparison against it: MIN_DECIDING, the late
# side then being all of them. Fewer could not decide, and two- and three-sample late sides,
# against a baseline of eight, have tails that would widen every later look (level 0.995 at 5
# looks from 2 samples on).
BASELINE_FIRST = MIN_DECIDING
EXACT_DF = 30.0  # below this many degrees of freedom a t is turned into a normal score exactly
_CHUNK = 2_000  # simulated series at a time (memory: chunk x cycles doubles)


def side(n: int) -> int | None:
    """Samples on each side of an early-against-late comparison of n (probes, paired cycles): a
    third, at least MIN_SIDE; None when n cannot give two sides."""
    k = max(MIN_SIDE, math.ceil(n / 3))
    return k if 2 * k <= n else (n // 2 if n // 2 >= MIN_SIDE else None)


def late_side(m: int) -> int | None:
    """Samples on the late side when the early side is a baseline taken before the replay: the
    last third of the m taken since, at least MIN_DECIDING; None before BASELINE_FIRST. (A slow
    engine's cycles are few: llama.cpp with its slots filled took 2-8 minutes a cycle to drain.)"""
    return max(MIN_DECIDING, math.ceil(m / 3)) if m >= BASELINE_FIRST else None


def looks_after_baseline(m: int) -> int:
    """Looks a comparison against a baseline has taken once m samples followed it."""
    return max(0, m - BASELINE_FIRST + 1)


def level_for(looks: int, alpha: float = ALPHA, baseline: int = 0) -> float:
    """The interval level that keeps `looks` looks at the thirds comparison valid together:
    2 Phi(c) - 1 with c the simulated boundary. One look is the plain level 1 - alpha. With a
    `baseline` (samples taken before the replay, the early side of every look) the boundary is
    the baseline comparison's."""
    if looks <= 1:
        return 1.0 - alpha
    if baseline >= MIN_SIDE:
        return float(2 * norm.cdf(baseline_boundary(_rounded(looks), baseline, alpha)) - 1)
    return float(2 * norm.cdf(thirds_boundary(_rounded(looks), alpha)) - 1)


def looks_planned(duration_s: float, probe_every_s: float, extra: int = 2) -> int:
    """Probe cycles a soak of `duration_s` plans at most (a start and an end cycle beside the
    periodic ones), less the first MIN_CYCLES - 1 that cannot compare yet: the looks."""
    if probe_every_s <= 0:
        return 1
    cycles = math.ceil(duration_s / probe_every_s) + extra
    return max(1, cycles - (MIN_CYCLES - 1))


@lru_cache(maxsize=64)
def thirds_boundary(
    looks: int, alpha: float = ALPHA, early_max: int | None = None, num_sims: int = NUM_SIMS, seed: int = SEED
) -> float:
    """c with P(max over looks |Z_n| > c) = alpha for the Welch comparison of the last third with
    the first (at most `early_max` samples: the engine's youth) at n = MIN_CYCLES, MIN_CYCLES + 1,
    ... (one look per cycle, `looks` of them) on independent normal samples."""
    ns = np.arange(MIN_CYCLES, MIN_CYCLES + looks)
    num_sims = min(num_sims, max(MIN_SIMS, SIM_BUDGET // looks))  # a 12-hour soak probed every 8 s: 5,400 looks
    return _quantile_of_max(lambda x: _thirds_scores(x, ns, early_max), int(ns[-1]), alpha, num_sims, seed)


@lru_cache(maxsize=64)
def baseline_boundary(
    looks: int, baseline: int, alpha: float = ALPHA, num_sims: int = NUM_SIMS, seed: int = SEED
) -> float:
    """c as thirds_boundary, for the comparison of the last third of the samples taken since a
    baseline with the `baseline` samples themselves, looked at after m = BASELINE_FIRST,
    BASELINE_FIRST + 1, ... (`looks` of them) samples since."""
    ms = np.arange(BASELINE_FIRST, BASELINE_FIRST + looks)
    num_sims = min(num_sims, max(MIN_SIMS, SIM_BUDGET // looks))
    return _quantile_of_max(lambda x: _baseline_scores(x, baseline, ms), baseline + int(ms[-1]), alpha, num_sims, seed)


@lru_cache(maxsize=64)
def pocock(looks: int, alpha: float = 0.05, num_sims: int = 200_000, seed: int = SEED) -> float:
    """Pocock's constant for `looks` equally spaced looks at a cumulative mean with known variance
    (his Table 1), by the same simulation: the check of the method against the paper."""

    def scores(x: np.ndarray) -> np.ndarray:
        sums = np.cumsum(x, axis=1)
        return sums / np.sqrt(np.arange(1, looks + 1))

    return _quantile_of_max(scores, looks, alpha, num_sims, seed)


def _quantile_of_max(
    scores: Callable[[np.ndarray], np.ndarray], length: int, alpha: float, num_sims: int, seed: int
) -> float:
    rng = np.random.default_rng(seed)
    maxima = []
    for start in range(0, num_sims, _CHUNK):
        x = rng.standard_normal((min(_CHUNK, num_sims - start), length))
        maxima.append(np.abs(scores(x)).max(axis=1))
    return float(np.quantile(np.concatenate(maxima), 1 - alpha))


def _thirds_scores(x: np.ndarray, ns: np.ndarray, early_max: int | None = None) -> np.ndarray:
    """The standardised Welch statistic of the last third over the first third at each n in ns,
    as normal scores (sims x looks)."""
    k = np.array([side(int(n)) for n in ns])
    e = np.minimum(k, max(MIN_SIDE, early_max)) if early_max else k
    return _welch_scores(x, e, ns - k, ns)


def _baseline_scores(x: np.ndarray, baseline: int, ms: np.ndarray) -> np.ndarray:
    """The same for the last third of the samples after the first `baseline` over those first
    `baseline`, at each m in ms samples after them."""
    k = np.array([late_side(int(m)) for m in ms])
    return _welch_scores(x, np.full_like(k, baseline), baseline + ms - k, baseline + ms)


def _welch_scores(x: np.ndarray, e: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Welch's t of x[a:b] over x[:e] per series and look (e, a, b one entry a look), as normal scores."""
    s1 = np.concatenate([np.zeros((len(x), 1)), np.cumsum(x, axis=1)], axis=1)
    s2 = np.concatenate([np.zeros((len(x), 1)), np.cumsum(x * x, axis=1)], axis=1)
    k = b - a
    m1, v1 = _moments(s1, s2, np.zeros_like(e), e)
    m2, v2 = _moments(s1, s2, a, b)
    se2 = v1 / e + v2 / k
    df = se2**2 / ((v1 / e) ** 2 / (e - 1) + (v2 / k) ** 2 / (k - 1))
    return _scores((m2 - m1) / np.sqrt(se2), df)


def _moments(s1: np.ndarray, s2: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample variance of x[a:b] per series and look, from the running sums."""
    n = b - a
    total = s1[:, b] - s1[:, a]
    mean = total / n
    var = (s2[:, b] - s2[:, a] - total * mean) / (n - 1)
    return mean, np.maximum(var, 1e-300)


def _scores(stat: np.ndarray, df: np.ndarray) -> np.ndarray:
    """t statistics with their degrees of freedom as normal scores of the same tail probability:
    exactly below EXACT_DF, by the normalising transform of Abramowitz and Stegun 26.7.8 above it
    (z = t (1 - 1/(4 df)) / sqrt(1 + t^2 / (2 df)); within 0.01 there, and thousands of times faster)."""
    exact = df < EXACT_DF
    out: np.ndarray = stat * (1 - 1 / (4 * df)) / np.sqrt(1 + stat * stat / (2 * df))
    out[exact] = np.sign(stat[exact]) * norm.isf(student_t.sf(np.abs(stat[exact]), df[exact]))
    return out


def _rounded(looks: int) -> int:
    """Looks rounded up to a coarse grid (exact to 16, then steps of about 10 %), so that few
    boundaries are ever simulated; more looks only widen it, so rounding up is on the safe side."""
    if looks <= 16:
        return looks
    step = 2 ** math.floor(math.log2(looks) - 3)
    return int(math.ceil(looks / step) * step)
