"""Prefix reuse at matched conditions: a prefix cache that stops reusing as the engine ages.

A slowdown can live where the decode analysis does not look: an engine whose prefix cache
reuses less and less (state slots leaking, an eviction that throws away what it should keep)
decodes as fast as ever, but recomputes prompts it used to serve from cache, so every call
takes longer to start and the engine serves fewer calls. An agent's next turn re-sends its
conversation, so a continuation turn (kind "turn", turn >= 1) is a call the cache should
serve mostly from what it holds; the share of its prompt the engine reported as cached
(`usage.prompt_tokens_details.cached_tokens`) is compared early and late in the first engine
life:

- healthy: the first EARLY_FRACTION of the continuation turns, by send time, or the calls
  before the best single split of the per-call share (least absolute deviation from each
  side's median) when that comes earlier, leaves at least MIN_HEALTHY_CALLS before it and the
  share falls there (a leak can take hold within the first third of a short run);
- late: the last LATE_FRACTION;
- a loss: late calls reused at most MATERIAL_SHARE of the healthy median share, with at least
  MIN_LATE late calls and most of them (MIN_SHARE) below half the healthy median.

Each call's residual (healthy median share minus its share: > 0 is less reuse) is the series
suspects are ranked against, and the onset is the first change point to a level of lost reuse.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence import changepoint, intervals
from diagnostics.evidence.comparison import Comparison
from diagnostics.labels import Basis
from diagnostics.source.frames import first_life_ends

EARLY_FRACTION = 1 / 3
LATE_FRACTION = 1 / 3
MATERIAL_SHARE = 0.5  # late reuse at most this times the healthy reuse
MIN_LATE = 6
MIN_SHARE = 0.75
MIN_HEALTHY_CALLS = 4  # calls before a split that may stand for the healthy ones
MAX_SPLITS = 200
MIN_HEALTHY_SHARE = 0.2  # below this the healthy calls barely reused anything: nothing to lose


class ReuseComparison(NamedTuple):
    ratio: float  # late over healthy median cached share of continuation turns
    healthy_share: float
    late_share: float
    num_healthy: int
    num_late: int
    loss: bool
    onset_t: np.datetime64 | None  # send time of the first call of the lost-reuse segment
    onset_age_s: float | None
    recomputed_tokens: float | None  # median extra prompt tokens a late call recomputed
    ttft_healthy_s: float | None  # median time to first token of the healthy and late calls
    ttft_late_s: float | None
    detail: str
    calls: pd.DataFrame  # t, engine_age_s, engine_life, residual, excluded
    comparison: Comparison | None = None  # late over healthy median share, with its interval


def compare(requests: pd.DataFrame) -> ReuseComparison | None:
    """None when the run holds too few continuation turns with a cached-token count."""
    need = {"kind", "turn", "cached_tokens", "prompt_tokens", "t_send", "engine_life"}
    if requests is None or requests.empty or not need <= set(requests.columns):
        return None
    df = requests[
        (requests["kind"] == "turn")
        & (requests["turn"] >= 1)
        & (requests["status"].fillna("ok") == "ok")
        & (requests["prompt_tokens"] > 0)
    ]
    df = df.dropna(subset=["cached_tokens", "t_send"])
    if df.empty:
        return None
    ends = first_life_ends(df, "t_send", EARLY_FRACTION, LATE_FRACTION, MIN_LATE)
    if ends is None:
        return None
    df, num_early, num_late = ends
    n = len(df)
    share = (df["cached_tokens"] / df["prompt_tokens"]).clip(0, 1).to_numpy(dtype=float)
    # A cache can stop reusing within the first third of a short run: then the healthy reference
    # is the calls before the best single split of the per-call share.
    split = _split(share)
    if split is not None and split < num_early:
        num_early = split
    healthy = float(np.median(share[:num_early]))
    late = share[n - num_late :]
    late_share = float(np.median(late))
    if healthy < MIN_HEALTHY_SHARE:
        return None
    ratio = late_share / healthy
    below = float(np.mean(late < healthy / 2))
    loss = ratio <= MATERIAL_SHARE and below >= MIN_SHARE
    residual = healthy - share
    calls = pd.DataFrame(
        {
            "t": df["t_send"].to_numpy(),
            "engine_age_s": df["engine_age_s"].to_numpy(dtype=float),
            "engine_life": df["engine_life"].to_numpy(),
            "residual": residual,
            "excluded": "",
        }
    )
    onset_t = onset_age = None
    if loss:
        seg = changepoint.detect(residual).first_rise(healthy / 2)
        if seg is not None:
            onset_t, onset_age = calls["t"].iloc[seg.start], float(calls["engine_age_s"].iloc[seg.start])
    prompt = df["prompt_tokens"].to_numpy(dtype=float)
    recomputed = float(np.median((healthy - late) * prompt[n - num_late :])) if loss else None
    ttft_early = ttft_late = None
    if "t_first_token" in df:
        ttft = (df["t_first_token"] - df["t_send"]).dt.total_seconds().to_numpy()
        if np.isfinite(ttft[:num_early]).any() and np.isfinite(ttft[n - num_late :]).any():
            ttft_early, ttft_late = float(np.nanmedian(ttft[:num_early])), float(np.nanmedian(ttft[n - num_late :]))
    detail = (
        f"prefix reuse of continuation turns: the last {num_late} reused a median {late_share:.0%} of their "
        f"prompt from cache against {healthy:.0%} for the first {num_early} ({ratio:.2f}x; "
        f"{below:.0%} of the late ones below half the early median; a loss at or below "
        f"{MATERIAL_SHARE:.1f}x with {MIN_SHARE:.0%} of them below)"
    )
    if ttft_early is not None:
        detail += f"; their median time to first token went from {ttft_early:.2f} s to {ttft_late:.2f} s"
    interval = intervals.bootstrap(_median_ratio, [share[:num_early], late])
    # A loss needs the interval at or below the material share, and most late calls below half.
    comparison = Comparison(
        basis=Basis.PREFIX_REUSE,
        interval=interval,
        num_early=num_early,
        num_late=num_late,
        material=MATERIAL_SHARE if below >= MIN_SHARE else 0.0,
        detail=f"prefix reuse of continuation turns, late over early median share {interval.describe()}",
        healthy_level=healthy,
        unit="share",
    )
    return ReuseComparison(
        ratio=ratio,
        healthy_share=healthy,
        late_share=late_share,
        num_healthy=num_early,
        num_late=num_late,
        loss=loss,
        onset_t=onset_t,
        onset_age_s=onset_age,
        recomputed_tokens=recomputed,
        ttft_healthy_s=ttft_early,
        ttft_late_s=ttft_late,
        detail=detail,
        calls=calls,
        comparison=comparison,
    )


def _split(share: np.ndarray) -> int | None:
    """Where the per-call share falls most clearly: the split (at most MAX_SPLITS tried) that
    minimises the absolute deviations from each side's median, when the share falls there."""
    n = len(share)
    if n - MIN_LATE < MIN_HEALTHY_CALLS:
        return None
    candidates = np.unique(np.linspace(MIN_HEALTHY_CALLS, n - MIN_LATE, min(MAX_SPLITS, n)).astype(int))

    def cost(k: int) -> float:
        a, b = share[:k], share[k:]
        return float(np.abs(a - np.median(a)).sum() + np.abs(b - np.median(b)).sum())

    best = min(candidates, key=cost)
    return int(best) if np.median(share[:best]) > np.median(share[best:]) else None


def _median_ratio(healthy: np.ndarray, late: np.ndarray) -> np.ndarray:
    """Late over healthy median share, per resample (a resample whose healthy median is 0 gives inf,
    which the bootstrap drops)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio: np.ndarray = np.median(late, axis=1) / np.median(healthy, axis=1)
    return ratio
