"""Decode evidence from the step series: the healthy model, the onset, and two comparisons.

1. Decode samples; lines whose window holds a prefill or idle gap are kept out.
2. Healthy model fitted on the first quarter of the first engine life (diagnostics.evidence.healthy).
3. Residual of every sample against it; change points on the residual series (PELT).
4. Onset: the first segment slower than healthy by at least the material level after which
   the series does not come back to within half that level of healthy, with at least a tenth
   of the life's span (or of its samples) after it.
5. When the healthy window could not fix the context slope, or the degraded samples mostly
   run at contexts beyond the window's, context gets the benefit of the doubt: the most
   generous context-only model is fitted to the degraded samples (`context`). Where that test
   cannot say (one context in the window, one in the degraded samples) and the latest samples
   compared ran at the context the window held (a probe sent again and again), context is
   matched and cannot explain the slowdown.
6. The slowdown's shape (diagnostics.evidence.trend): a step or a gradual creep, and its rate per hour
   of engine age; a creep's onset is where its trend first stands out of the healthy noise.
7. Two comparisons at matched conditions, each with its interval: the step series (speed
   against the healthy model, block means of the latest stretch — the last quarter of the
   life by engine age, or from the onset when that is later — against the samples before the
   onset, or against the healthy window for a creep or when there is no onset; both sides
   kept to the context the healthy window held when each has samples there, so that a
   context slope fitted over a narrow window is not extrapolated into one side only) and
   batch-and-context bins (same batch size and context band, early against late: diagnostics.evidence.bins).
8. A restart in the data is the control: the latest stretch of the aged life against the
   next life's young samples (younger than the onset), which ran minutes later on the same
   host under the same load.

The step series' comparison in 7 and the restart in 8 are computed in diagnostics.evidence.stepseries.
What the evidence means is decided elsewhere (diagnostics.decision.verdict).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence import bins as bins_mod
from diagnostics.evidence import changepoint, healthy, stepseries
from diagnostics.evidence import context as context_mod
from diagnostics.evidence import trend as trend_mod
from diagnostics.evidence.changepoint import ChangePoints
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.controls import Sides
from diagnostics.evidence.healthy import HealthyModel
from diagnostics.evidence.stepseries import MIN_LATE
from diagnostics.labels import CheckStatus
from diagnostics.result import Check

MATERIAL = math.log(1 / DECODE_MATERIAL)  # the same 10 % on the residual's log scale
MIN_SAMPLES = 4
LATEST_FRACTION = 0.25  # the latest stretch: this last part of the life's span (engine age)
PREFILL_SHARE = 0.5  # a mixed window whose fitted prefill time is more than this share of it stays out
MIN_ONSET_FRACTION = 0.1  # an onset leaves at least this part of the life's span (or samples) after it


class DecodeEvidence(NamedTuple):
    samples: pd.DataFrame  # every decode sample with residual, matched, healthy, excluded
    use: pd.DataFrame  # the usable, matched samples with a residual
    life_use: pd.DataFrame  # ... of the model's engine life
    model: HealthyModel | None
    changepoints: ChangePoints | None
    onset_idx: int | None  # index (in `samples`) of the onset's first sample
    context: str  # fitted, explains, cannot_explain, cannot_say (diagnostics.decision.verdict)
    trend: trend_mod.Trend | None  # step or gradual, with an onset
    creep_idx: int | None  # a gradual slowdown: where its trend stands out of the healthy noise
    per_hour: trend_mod.PerHour | None  # the residual's trend per hour of engine age
    steps: Comparison | None
    bins: Comparison | None
    bands: pd.DataFrame | None  # the bands `bins` compared (diagnostics.evidence.bins), for the report
    restart: Comparison | None  # the aged engine just before a restart over the fresh one after it
    checks: tuple[Check, ...]
    why_not: str | None  # why the step series cannot carry the analysis (too few samples)
    unmatched: str | None = None  # why the latest samples have no matched conditions, when they have none
    # The moments each side of `steps` and of `bins` spans (early, late): where a control was
    # probed beside the run, the host's drift is read over these very stretches (controls.drift_between).
    step_sides: Sides | None = None
    bin_sides: Sides | None = None


NO_TIMINGS = "the data hold no decode throughput at all (no decode lines, stats lines or per-request timings)"
ACCESS_ONLY = (
    "the log holds request latencies only (access lines), no token counts: a decode rate cannot be "
    "read from it. Ollama since 0.30 runs llama-server, whose per-request timing lines diag reads; or a "
    "soak against the server (`soak run --target URL`) records token counts and timings itself"
)


def evaluate(
    steps_frame: pd.DataFrame, engines: dict[int, int] | None = None, access_only: bool = False
) -> DecodeEvidence:
    """`engines`: each life's engine (diagnostics.source.identity.engine_of); lives of another engine than
    the healthy model's are not compared with it (a restart into another build is no control)."""
    samples = healthy.decode_samples(steps_frame)
    samples["residual"] = np.nan
    samples["matched"] = False
    samples["healthy"] = False
    required = ("prompt",) if _admit_mixed_windows(samples) else ()
    valid = samples[samples["excluded"] == ""]
    window = healthy.healthy_window(samples) if len(valid) >= MIN_SAMPLES else None
    if window is None:
        return _without_model(samples, ACCESS_ONLY if access_only and samples.empty else _why_no_window(samples, valid))
    for _ in range(2):
        model = healthy.fit_healthy(window, required)
        samples["residual"] = healthy.residuals(model, samples)
        samples["matched"] = healthy.matched(model, samples) & (samples["engine_life"] >= model.engine_life)
        if engines:
            same = samples["engine_life"].map(engines) == engines.get(model.engine_life)
            samples["matched"] &= same.to_numpy()
        samples["healthy"] = samples.index.isin(window.index)
        use = samples[(samples["excluded"] == "") & samples["matched"] & samples["residual"].notna()]
        later = use[~use["healthy"]]
        if len(later) < 2:
            return _without_model(
                samples,
                f"only {len(later)} usable decode samples after the healthy window "
                f"({model.num_points} samples); nothing to compare it with",
            )
        cps, onset_idx, life_use = _find_onset(use, model)
        # An onset inside the early-life window would teach the model the slowdown: refit once
        # on the samples before it...
        early = window.loc[window.index < onset_idx] if onset_idx is not None else window
        # ...but not down to a handful of warm-up samples: a healthy reference keeps at least half the window.
        if len(early) == len(window) or len(early) < max(healthy.MIN_HEALTHY, len(window) // 2):
            break
        window = early
    assert cps is not None  # `use` held samples (above), so its first life gave change points
    checks = [_model_check(model)]
    context = "fitted"
    degraded = life_use.loc[onset_idx:] if onset_idx is not None else None
    # A context term left out because it did not predict (left_out) is a finding about the window's
    # range: context costs nothing measurable there. Beyond that range it still gets the generous test.
    untested = not model.context_identified and "context" not in model.left_out
    if degraded is not None and (untested or context_mod.beyond_window(model, degraded)):
        context, check = context_mod.context_only_test(degraded, model, cps.sigma)
        checks.append(check)
    age = life_use["busy_s"].to_numpy(dtype=float)  # the trend is per hour of work, not of idling
    resid = life_use["residual"].to_numpy(dtype=float)
    trend = trend_mod.fit(age, resid) if onset_idx is not None else None
    creep_idx = None
    if trend is not None and trend.shape == "gradual":
        base = float(life_use.loc[life_use["healthy"], "residual"].median())
        pos = trend_mod.creep_onset(age, resid, trend, base, cps.sigma)
        creep_idx = life_use.index[pos] if pos is not None else None
    per_hour = trend_mod.per_hour(age, resid, trend.change_age_s if trend is not None else -math.inf)
    gradual = trend is not None and trend.shape == "gradual"
    late_from = creep_idx if gradual and creep_idx is not None else onset_idx
    early, late, where = _claim_sides(life_use, late_from, gradual)
    # A batch term the window could identify that did not predict it, in a log whose windows stall
    # behind prefills (a long-context load sweep): one level for every batch size, through windows
    # of other work. Only the bins, matched band by band, may carry a loss there.
    stalled = samples["excluded"].isin(("prefill_pending", "prefill_dominated")).any()
    sweep = "batch" in model.left_out and stalled
    step_early, step_late = stepseries.in_range(model, early, late)
    steps_cmp = None if sweep else stepseries.step_comparison(step_early, step_late, where, early)
    at_window = context_mod.within_window(model, step_late) if context == "cannot_say" and steps_cmp else None
    if at_window is not None:
        context, checks[-1] = "cannot_explain", at_window
    unmatched = _unmatched(model, late) if steps_cmp is None else None
    bins, bands, bin_sides = bins_mod.compare(use, model, onset_idx)
    return DecodeEvidence(
        samples=samples,
        use=use,
        life_use=life_use,
        model=model,
        changepoints=cps,
        onset_idx=onset_idx,
        context=context,
        trend=trend,
        creep_idx=creep_idx,
        per_hour=per_hour,
        steps=steps_cmp,
        bins=bins,
        bands=bands,
        restart=stepseries.restart(model, use, life_use, late, onset_idx, early),
        checks=tuple(checks),
        why_not=None,
        unmatched=unmatched,
        step_sides=bins_mod.moments(step_early, step_late) if steps_cmp is not None else None,
        bin_sides=bin_sides,
    )


def _admit_mixed_windows(samples: pd.DataFrame) -> bool:
    """Where most windows admitted a turn (agent traffic: 431 prompt tok/s beside 42 generated, in
    every window), keeping them out leaves nothing. Such windows are taken in when the healthy
    model can fit what their prompt tokens cost (its `prompt` term, chosen by cross-validation on
    the early window); a window whose time then went mostly to prefill (PREFILL_SHARE) stays out
    (`prefill_dominated`), and the healthy model keeps the term. Where the term does not earn its
    place, they stay out as before. True when they were taken in."""
    mixed = (samples["excluded"] == "window_with_prefill").to_numpy()
    if mixed.sum() <= 0.5 * np.isin(samples["excluded"], ("", "window_with_prefill")).sum():
        return False
    trial = samples["excluded"].where(~mixed, "")
    window = healthy.healthy_window(samples.assign(excluded=trial))
    if window is None or len(window) < healthy.CV_MIN:
        return False
    model = healthy.fit_healthy(window)
    if "prompt" not in model.terms:
        # Prompt tokens that do not predict a window's time do not make it a decode window: at a
        # batch of one, a window that admitted a turn also holds the client's think time.
        return False
    k = model.coef[model.terms.index("prompt")]
    batch = samples["num_running_reqs"].fillna(1.0).to_numpy(dtype=float)
    context = samples["context"].to_numpy(dtype=float) if model.context_identified else np.zeros(len(samples))
    prompt = samples["prompt"].fillna(0.0).to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = k * prompt / model.predict(batch, np.nan_to_num(context), prompt)
    samples["excluded"] = np.where(
        mixed, np.where(share > PREFILL_SHARE, "prefill_dominated", ""), samples["excluded"].to_numpy()
    )
    return True


def _why_no_window(samples: pd.DataFrame, valid: pd.DataFrame) -> str:
    """What is missing for a healthy window, in words: too few usable samples at all (and why the
    others were kept out), or too few in any one engine life, or none early in a life."""
    kept = samples.loc[samples["excluded"] != "", "excluded"].value_counts()
    why = ", ".join(f"{n} {healthy.KEPT_OUT.get(k, k)}" for k, n in kept.items())
    kept_text = f" ({len(samples) - len(valid)} kept out: {why})" if len(kept) else ""
    if len(samples) == 0:
        return NO_TIMINGS
    if len(valid) < MIN_SAMPLES:
        return (
            f"only {len(valid)} usable decode samples of {len(samples)}{kept_text}; at least {MIN_SAMPLES} are needed"
        )
    per_life = valid.groupby("engine_life").size()
    if per_life.max() < healthy.MIN_HEALTHY + 1:
        return (
            f"{len(valid)} usable decode samples{kept_text}, but spread over {len(per_life)} engine lives with at "
            f"most {per_life.max()} in one; a healthy reference needs {healthy.MIN_HEALTHY + 1} in one life"
        )
    return (
        f"{len(valid)} usable decode samples{kept_text}, but no engine life has {healthy.MIN_HEALTHY} of them "
        f"in the first half of its busy time: no early life to call healthy"
    )


def _unmatched(model: HealthyModel, late: pd.DataFrame) -> str | None:
    """In words, when the latest samples ran at batch sizes the healthy window never saw."""
    if "batch" not in model.terms or not model.batch_values or late.empty:
        return None
    lo, hi = model.batch_values[0], model.batch_values[-1]
    b = late["num_running_reqs"].dropna()
    if b.empty or b.between(lo / healthy.BATCH_BAND, hi * healthy.BATCH_BAND).sum() >= MIN_LATE:
        return None
    return (
        f"the latest samples ran {b.min():.0f}-{b.max():.0f} requests at a time, the healthy window "
        f"{lo:.0f}-{hi:.0f}: the load never came back to the early conditions, so nothing late can be "
        f"compared with them (a steady load, or identical probes from `soak run --target`, would answer)"
    )


def _without_model(samples: pd.DataFrame, why: str) -> DecodeEvidence:
    none = samples.iloc[:0]
    return DecodeEvidence(
        samples=samples,
        use=none,
        life_use=none,
        model=None,
        changepoints=None,
        onset_idx=None,
        context="fitted",
        trend=None,
        creep_idx=None,
        per_hour=None,
        steps=None,
        bins=None,
        bands=None,
        restart=None,
        checks=(),
        why_not=why,
    )


def _find_onset(use: pd.DataFrame, model: HealthyModel) -> tuple[ChangePoints | None, int | None, pd.DataFrame]:
    """Change points per engine life; the onset is the first segment materially slower than healthy."""
    base = float(use.loc[use["healthy"], "residual"].median())
    first_cps: ChangePoints | None = None
    for life, rows in use.groupby("engine_life", sort=True):
        cps = changepoint.detect(rows["residual"].to_numpy())
        if first_cps is None:
            first_cps = cps
        if life != model.engine_life:
            continue  # later lives are the restart control, not where onset is sought
        # An onset leaves at least half the healthy window before it: a change in the first
        # seconds is the engine warming up under its first, light load, not engine age.
        min_start = max(healthy.MIN_HEALTHY, model.num_points // 2)
        # Slower and staying slower: no later segment back within half the material level of healthy;
        # and for long enough to show it (a slow spell in the last minutes of a log is too recent).
        seg = cps.first_lasting_rise(base + MATERIAL, base + MATERIAL / 2, min_start)
        if seg is not None:
            age = rows["busy_s"].to_numpy(dtype=float)
            short = age[-1] - age[seg.start] < MIN_ONSET_FRACTION * (age[-1] - age[0]) and len(
                rows
            ) - seg.start < MIN_ONSET_FRACTION * len(rows)
            if short:
                seg = None
        return cps, (rows.index[seg.start] if seg is not None else None), rows
    return first_cps, None, use.iloc[:0]


def _claim_sides(
    life_use: pd.DataFrame, onset_idx: int | None, gradual: bool
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The two sides of the step series' claim: the latest stretch — the last LATEST_FRACTION of
    the life by engine age, or from the onset on when that is later — and its reference: the
    samples before the onset (a step), or the healthy window (a creep, whose samples before its
    onset already drift; or no onset at all)."""
    if life_use.empty:
        return life_use, life_use, "the early window it was fitted on"
    age = life_use["busy_s"].to_numpy(dtype=float)
    latest = age >= age.min() + (1 - LATEST_FRACTION) * (age.max() - age.min())
    if onset_idx is not None:
        after = life_use.index >= onset_idx
        late = life_use[after & latest]
        if len(late) < MIN_LATE:
            late = life_use[after].tail(MIN_LATE)
        if gradual:
            return life_use[life_use["healthy"] & ~after], late, "the early window it was fitted on"
        return life_use[~after], late, "the samples before the onset"
    late = life_use[latest & ~life_use["healthy"].to_numpy()]
    if len(late) < MIN_LATE:
        late = life_use[~life_use["healthy"]].tail(MIN_LATE)
    return life_use[life_use["healthy"]], late, "the early window it was fitted on"


def _model_check(model: HealthyModel) -> Check:
    ctx = (
        ""
        if model.context_identified
        else (
            "; the window does not fix the context slope (context missing or constant), so the verdict also "
            "requires the generous context-only test"
        )
    )
    if model.left_out:
        ctx = (
            f"; the {' and '.join(model.left_out)} term{'s' if len(model.left_out) > 1 else ''} did not predict "
            f"held-out samples better than a model without {'them' if len(model.left_out) > 1 else 'it'} "
            f"(cross-validated), so {'they are' if len(model.left_out) > 1 else 'it is'} left out"
        ) + ctx
    status = CheckStatus.OK if model.num_points >= 8 and model.context_identified else CheckStatus.WARN
    r2 = f", R^2 {model.r2:.2f}" if model.r2 is not None else ""
    return Check(
        "healthy_model",
        status,
        f"step time = {model.describe()} from the first {model.num_points} usable decode samples of engine "
        f"life {model.engine_life}{r2}{ctx}",
    )
