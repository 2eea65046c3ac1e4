"""Decode evidence from the step series: the healthy model, the onset, and two comparisons.

1. Decode samples; lines whose window holds a prefill or idle gap are kept out.
2. Healthy model fitted on the first quarter of the first engine life (diagnostics.healthy).
3. Residual of every sample against it; change points on the residual series (PELT).
4. Onset: the first segment slower than healthy by at least the material level.
5. When the healthy window could not fix the context slope, or the degraded samples mostly
   run at contexts beyond the window's, context gets the benefit of the doubt: the most
   generous context-only model is fitted to the degraded samples (`context`).
6. Two comparisons at matched conditions, each with its interval: the step series (speed
   against the healthy model, block means after the onset against before it, or the last
   quarter against the healthy window when there is no onset) and batch-and-context bins
   (same batch size and context band, early against late).
7. A restart in the data is the control: the next engine life's first samples against the
   healthy level and the level just before the restart.

What the evidence means is decided elsewhere (diagnostics.verdict).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import numpy as np
import pandas as pd

from diagnostics import changepoint, healthy, intervals
from diagnostics.changepoint import ChangePoints
from diagnostics.comparison import DECODE_MATERIAL, Comparison
from diagnostics.healthy import HealthyModel
from diagnostics.result import Check

MATERIAL = math.log(1 / DECODE_MATERIAL)  # the same 10 % on the residual's log scale
MIN_SAMPLES = 4
CONTEXT_BAND = 1.2  # context bands are powers of this (each about +-10% wide)
FRESH_FRACTION = 0.25  # of the next engine life's samples: its fresh level


class DecodeEvidence(NamedTuple):
    samples: pd.DataFrame  # every decode sample with residual, matched, healthy, excluded
    use: pd.DataFrame  # the usable, matched samples with a residual
    life_use: pd.DataFrame  # ... of the model's engine life
    model: Optional[HealthyModel]
    changepoints: Optional[ChangePoints]
    onset_idx: Optional[int]  # index (in `samples`) of the onset's first sample
    context: str  # fitted, explains, cannot_explain, cannot_say (diagnostics.verdict)
    steps: Optional[Comparison]
    bins: Optional[Comparison]
    restart: Optional[Comparison]  # the aged engine just before a restart over the fresh one after it
    checks: tuple[Check, ...]
    why_not: Optional[str]  # why the step series cannot carry the analysis (too few samples)


def evaluate(steps_frame: pd.DataFrame) -> DecodeEvidence:
    samples = healthy.decode_samples(steps_frame)
    samples["residual"] = np.nan
    samples["matched"] = False
    samples["healthy"] = False
    valid = samples[samples["excluded"] == ""]
    window = healthy.healthy_window(samples) if len(valid) >= MIN_SAMPLES else None
    if window is None:
        return _without_model(samples, f"{len(valid)} usable decode samples ({len(samples) - len(valid)} more kept "
                                       f"out); need at least {MIN_SAMPLES}, with {healthy.MIN_HEALTHY + 1} in one "
                                       f"engine life")
    for _ in range(2):
        model = healthy.fit_healthy(window)
        samples["residual"] = healthy.residuals(model, samples)
        samples["matched"] = healthy.matched(model, samples) & (samples["engine_life"] >= model.engine_life)
        samples["healthy"] = samples.index.isin(window.index)
        use = samples[(samples["excluded"] == "") & samples["matched"] & samples["residual"].notna()]
        later = use[~use["healthy"]]
        if len(later) < 2:
            return _without_model(samples, f"only {len(later)} usable decode samples after the healthy window "
                                           f"({model.num_points} samples); nothing to compare it with")
        cps, onset_idx, life_use = _find_onset(use, model)
        # An onset inside the early-life window would teach the model the slowdown: refit once
        # on the samples before it...
        early = window.loc[window.index < onset_idx] if onset_idx is not None else window
        # ...but not down to a handful of warm-up samples: a healthy reference keeps at least half the window.
        if len(early) == len(window) or len(early) < max(healthy.MIN_HEALTHY, len(window) // 2):
            break
        window = early
    checks = [_model_check(model)]
    context = "fitted"
    if onset_idx is not None and (not model.context_identified or _beyond_window(model, life_use.loc[onset_idx:])):
        context, check = _context_only_test(life_use.loc[onset_idx:], model, cps.sigma)
        checks.append(check)
    return DecodeEvidence(samples, use, life_use, model, cps, onset_idx, context,
                          _step_comparison(use, life_use, onset_idx), _bin_comparison(use, model, onset_idx),
                          _restart(use, life_use, onset_idx), tuple(checks), None)


def _without_model(samples: pd.DataFrame, why: str) -> DecodeEvidence:
    return DecodeEvidence(samples, samples.iloc[:0], samples.iloc[:0], None, None, None, "fitted", None, None, None,
                          (), why)


def _find_onset(use: pd.DataFrame, model: HealthyModel):
    """Change points per engine life; the onset is the first segment materially slower than healthy."""
    base = float(use.loc[use["healthy"], "residual"].median())
    first_cps = None
    for life, rows in use.groupby("engine_life", sort=True):
        cps = changepoint.detect(rows["residual"].to_numpy())
        if first_cps is None:
            first_cps = cps
        if life != model.engine_life:
            continue  # later lives are the restart control, not where onset is sought
        # An onset leaves at least half the healthy window before it: a change in the first
        # seconds is the engine warming up under its first, light load, not engine age.
        min_start = max(healthy.MIN_HEALTHY, model.num_points // 2)
        seg = cps.first_rise(base + MATERIAL, min_start)
        return cps, (rows.index[seg.start] if seg is not None else None), rows
    return first_cps, None, use.iloc[:0]


def _step_comparison(use: pd.DataFrame, life_use: pd.DataFrame, onset_idx) -> Optional[Comparison]:
    """Speed against the healthy model (exp(-residual)), block means late against early: after
    the onset against before it, or the last quarter of the life against the healthy window."""
    if life_use.empty:
        return None
    if onset_idx is not None:
        early, late = life_use.loc[life_use.index < onset_idx], life_use.loc[life_use.index >= onset_idx]
        where = "after the onset against before it"
    else:
        early = life_use[life_use["healthy"]]
        late = life_use[~life_use["healthy"]].tail(max(2, len(life_use) // 4))
        where = f"the last {len(late)} samples against the {len(early)} of the healthy window"
    if early.empty or late.empty:
        return None
    interval = intervals.log_ratio(intervals.blocks(np.exp(-early["residual"].to_numpy())),
                                   intervals.blocks(np.exp(-late["residual"].to_numpy())))
    n_early, n_late = len(intervals.blocks(early["residual"])), len(intervals.blocks(late["residual"]))
    return Comparison("step_series", interval, n_early, n_late, DECODE_MATERIAL,
                      f"step series at matched conditions (speed against the healthy model, {where}, in "
                      f"{n_early} and {n_late} block means): {interval.describe()}",
                      float(early["gen_tps"].median()))


def _bin_comparison(use: pd.DataFrame, model: HealthyModel, onset_idx) -> Optional[Comparison]:
    """Same batch size and context band, early against late in the model's engine life."""
    life = use[use["engine_life"] == model.engine_life]
    if onset_idx is not None:
        early, late = life.loc[life.index < onset_idx], life.loc[life.index >= onset_idx]
    else:
        half = len(life) // 2
        early, late = life.iloc[:half], life.iloc[half:]
    if life["context"].isna().all():
        return None

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        band = np.floor(np.log(df["context"].clip(lower=1)) / math.log(CONTEXT_BAND))
        return df.assign(key=df["batch"].fillna(0) * 10_000 + band, logt=np.log(df["step_time_s"]))

    e, l = keyed(early.dropna(subset=["context"])), keyed(late.dropna(subset=["context"]))
    ne, nl = e["key"].value_counts(), l["key"].value_counts()
    # A band needs two samples on each side: one against one is no evidence, and the bootstrap
    # would call it certain.
    shared = sorted(k for k in set(ne.index) & set(nl.index) if min(ne[k], nl[k]) >= 2)
    if not shared:
        return None
    weights = np.array([min(ne[k], nl[k]) for k in shared], dtype=float)
    groups = [df.loc[df["key"] == key, "logt"].to_numpy() for key in shared for df in (e, l)]

    def ratio(*g: np.ndarray) -> np.ndarray:  # each g: [R, n] resampled log step times
        diffs = np.stack([np.median(g[2 * i + 1], axis=1) - np.median(g[2 * i], axis=1) for i in range(len(shared))])
        return np.exp(-(weights @ diffs) / weights.sum())

    interval = intervals.bootstrap(ratio, groups)
    support = int(weights.sum())
    early_tps = e.loc[e["key"].isin(shared), "gen_tps"]
    return Comparison("bins", interval, support, support, DECODE_MATERIAL,
                      f"{len(shared)} batch-and-context bands hold samples early and late ({support} pairs): late "
                      f"throughput {interval.describe()} of early", float(early_tps.median()))


def _restart(use: pd.DataFrame, life_use: pd.DataFrame, onset_idx) -> Optional[Comparison]:
    """The restart control: the last samples of the life (against the healthy model) over the
    next engine life's first ones, its fresh level; block means of each."""
    if life_use.empty:
        return None
    life = int(life_use["engine_life"].iloc[0])
    nxt = use[use["engine_life"] > life]
    if nxt.empty:
        return None
    nxt = nxt[nxt["engine_life"] == nxt["engine_life"].iloc[0]]
    fresh = nxt.head(max(2, math.ceil(FRESH_FRACTION * len(nxt))))
    aged = life_use.tail(max(2, math.ceil(FRESH_FRACTION * len(life_use))))
    f = intervals.blocks(np.exp(-fresh["residual"].to_numpy()))
    a = intervals.blocks(np.exp(-aged["residual"].to_numpy()))
    interval = intervals.log_ratio(f, a)
    return Comparison("restart", interval, len(f), len(a), DECODE_MATERIAL,
                      f"restart control on the step series: the aged engine's last samples over the fresh engine's "
                      f"first ({len(a)} and {len(f)} block means) {interval.describe()}",
                      float(fresh["gen_tps"].median()))


def _beyond_window(model: HealthyModel, degraded: pd.DataFrame) -> bool:
    """Do most degraded samples run at more context than the healthy window ever held? Then the
    window's context slope is an extrapolation there, fitted over a range that may not show it."""
    if model.context_range is None:
        return True
    ctx = degraded["context"].to_numpy(dtype=float)
    ctx = ctx[np.isfinite(ctx)]
    return len(ctx) > 0 and float(np.median(ctx)) > CONTEXT_BAND * model.context_range[1]


def _context_only_test(degraded: pd.DataFrame, model: HealthyModel, sigma: float) -> tuple[str, Check]:
    """Could context alone explain the degraded samples? `explains`, `cannot_explain`, or
    `cannot_say` when the data cannot test it.

    The generous model: healthy step time as if the healthy window had held no context at all,
    plus c * context with c >= 0 chosen to fit the degraded samples best (relative error).
    """
    ctx = degraded["context"].to_numpy(dtype=float)
    s = degraded["step_time_s"].to_numpy(dtype=float)
    ok = np.isfinite(ctx) & (ctx > 0)
    if ok.sum() < 2 or (ctx[ok].max() - ctx[ok].min()) / ctx[ok].max() < healthy.MIN_SPREAD:
        return "cannot_say", Check("context_only_model", "warn",
                                   "the healthy window holds no context figures and the degraded samples do not vary "
                                   "in context enough to test whether context alone explains the slowdown")
    ctx, s = ctx[ok], s[ok]
    base = model.predict(degraded["batch"].fillna(1.0).to_numpy(dtype=float)[ok], np.zeros(len(s)))
    u = ctx / s
    c = max(0.0, float(np.sum(u * (1 - base / s)) / np.sum(u * u)))
    r = np.log(s / (base + c * ctx))
    rms = float(np.sqrt(np.mean(r**2)))
    limit = max(2 * (sigma if np.isfinite(sigma) else 0.0), math.log(1.2))
    worst = int(np.argmax(np.abs(r)))
    detail = (f"most generous context-only model (healthy step time + {c:.3g} s per context token, fitted to the "
              f"{len(s)} degraded samples): misses them by {rms:.2f} in log RMS (limit {limit:.2f}); worst: "
              f"{ctx[worst]:.0f} context tokens ran {math.exp(r[worst]):.2f}x its prediction")
    if rms <= limit:
        return "explains", Check("context_only_model", "ok", "context explains the slowdown: " + detail)
    return "cannot_explain", Check("context_only_model", "warn", "context cannot explain it: " + detail)


def _model_check(model: HealthyModel) -> Check:
    ctx = "" if model.context_identified else (
        "; the window does not fix the context slope (context missing or constant), so the verdict also "
        "requires the generous context-only test")
    status = "ok" if model.num_points >= 8 and model.context_identified else "warn"
    r2 = f", R^2 {model.r2:.2f}" if model.r2 is not None else ""
    return Check("healthy_model", status,
                 f"step time = {model.describe()} from the first {model.num_points} usable decode samples of engine "
                 f"life {model.engine_life}{r2}{ctx}")
