"""Engine age versus context: `analyze(source) -> Analysis`. The method is in docs/diagnostics.md.

1. Decode samples; lines whose window holds a prefill or idle gap are kept out.
2. Healthy model fitted on the first quarter of the first engine life (diagnostics.healthy).
3. Residual of every sample against it; change points on the residual series (PELT).
4. Onset: the first segment slower than healthy by at least MATERIAL; its trigger is the
   notable event between the last healthy sample and the first degraded one.
5. When the healthy window could not fix the context slope, or the degraded samples mostly
   run at contexts beyond the window's (the slope would be extrapolated), context gets the benefit of the
   doubt: the most generous context-only model is fitted to the degraded samples, and only
   a slowdown it cannot explain counts as engine age.
6. Matched-condition comparisons (identical probes; same batch and context band) confirm
   or veto; a restart is the control. Unless the probes show a loss, the step series must show
   a material one over everything after the onset, not only in the onset's segment.
"""

from __future__ import annotations

import logging
import math
from typing import Optional

import numpy as np
import pandas as pd

from diagnostics import changepoint, checks as checks_mod, healthy, prefill as prefill_mod, reuse as reuse_mod
from diagnostics import suspects as suspects_mod
from diagnostics.result import Analysis, Check, Matched, Onset, Slowdown, Trigger
from diagnostics.source import Source

logger = logging.getLogger(__name__)

MATERIAL = math.log(1 / 0.9)  # a 10% loss of throughput at matched conditions
RAW_DROP = 0.9  # raw per-request throughput late / early below this: it "fell"
NO_LOSS = 0.95  # matched ratio at or above this: matched conditions show no loss
MIN_SAMPLES = 4
MIN_SUPPORT = 6  # matched pairs a bin comparison needs before it may veto
CONTEXT_BAND = 1.2  # context bands are powers of this (each about +-10% wide)
TRIGGER_QUANTILE = 0.9  # a prefill stands out above this quantile of the life's earlier ones


def analyze(source: Source) -> Analysis:
    samples = healthy.decode_samples(source.steps)
    samples["residual"] = np.nan
    samples["matched"] = False
    samples["healthy"] = False
    checks = list(checks_mod.source_checks(source, samples))
    valid = samples[samples["excluded"] == ""]
    window = healthy.healthy_window(samples) if len(valid) >= MIN_SAMPLES else None

    def insufficient(why: str) -> Analysis:
        probes = _probe_comparison(source.probes)
        if probes is not None:
            return _probes_only(source, probes, samples, checks, why)
        checks.append(Check("data", "fail", why))
        return Analysis("insufficient_data", None, None, None, (), tuple(checks), samples, None, None, (),
                        source.path, source.kind, source.engine)

    if window is None:
        return insufficient(f"{len(valid)} usable decode samples ({len(samples) - len(valid)} more kept out); "
                            f"need at least {MIN_SAMPLES}, with {healthy.MIN_HEALTHY + 1} in one engine life")
    for _ in range(2):
        model = healthy.fit_healthy(window)
        samples["residual"] = healthy.residuals(model, samples)
        samples["matched"] = healthy.matched(model, samples) & (samples["engine_life"] >= model.engine_life)
        samples["healthy"] = samples.index.isin(window.index)
        use = samples[(samples["excluded"] == "") & samples["matched"] & samples["residual"].notna()]
        later = use[~use["healthy"]]
        if len(later) < 2:
            return insufficient(f"only {len(later)} usable decode samples after the healthy window "
                                f"({model.num_points} samples); nothing to compare it with")
        cps, onset_idx, life_use = _find_onset(use, model)
        # An onset inside the early-life window would teach the model the slowdown: refit once
        # on the samples before it.
        early = window.loc[window.index < onset_idx] if onset_idx is not None else window
        # ...but not down to a handful of warm-up samples: a healthy reference keeps at least half the window.
        if len(early) == len(window) or len(early) < max(healthy.MIN_HEALTHY, len(window) // 2):
            break
        window = early
    checks.append(_model_check(model))
    age = onset_idx is not None
    undecided = None
    if age and (not model.context_identified or _beyond_window(model, life_use.loc[onset_idx:])):
        verdict_ctx, check = _context_only_test(life_use.loc[onset_idx:], model, cps.sigma)
        checks.append(check)
        if verdict_ctx is None:
            undecided = check.detail
        age = verdict_ctx is False

    matched = []
    bins = _bin_comparison(use, model, onset_idx)
    matched.append(bins)
    probes = _probe_comparison(source.probes)
    if probes is not None:
        matched.append(probes)
    age, veto = _confirm(age, bins, probes)
    if veto:
        checks.append(Check("matched_conditions", "warn", veto))
    else:
        checks.append(Check("matched_conditions", "ok", "; ".join(m.detail for m in matched)))
    probes_loss = probes is not None and probes.ratio is not None and probes.ratio < probes.loss_below
    if age and onset_idx is not None and not probes_loss:
        # The onset segment cleared MATERIAL; everything after the onset must too, or the loss
        # is a passing excursion of the step series, not a material slowdown.
        after = life_use.loc[life_use.index >= onset_idx, "residual"].median()
        before = life_use.loc[life_use.index < onset_idx, "residual"].median()
        if np.isfinite(after - before) and after - before < MATERIAL:
            age = False
            checks.append(Check("material_loss", "warn",
                                f"a segment of the step series ran slower from the onset on, but all samples after "
                                f"it ran at {math.exp(before - after):.2f}x those before it: not a material loss "
                                f"(below {math.exp(-MATERIAL):.2f}x), and identical probes do not show one either"))

    if undecided and not age and probes is None:
        return insufficient(undecided)

    # A decode loss only the probes show, while well-supported matched bins show none, is the
    # weakest basis: a clear loss on the prefill side takes precedence over it.
    contested = (age and bins.ratio is not None and bins.num_early >= MIN_SUPPORT and bins.ratio >= NO_LOSS)
    # A prefix cache that stops reusing is a slowdown decode cannot show (diagnostics.reuse).
    prefix_reuse = reuse_mod.compare(source.requests)
    reuse_age = prefix_reuse is not None and prefix_reuse.loss and (not age or contested)
    if prefix_reuse is not None:
        checks.append(Check("prefix_reuse", "warn" if prefix_reuse.loss else "ok", prefix_reuse.detail))
    # ...nor an engine that takes longer and longer to admit a prompt (diagnostics.prefill).
    prefill_cmp = prefill_mod.compare(source.steps)
    prefill_age = prefill_cmp is not None and prefill_cmp.loss and (not age or contested) and not reuse_age
    if prefill_cmp is not None:
        checks.append(Check("prefill_time", "warn" if prefill_cmp.loss else "ok", prefill_cmp.detail))
    if age and (reuse_age or prefill_age):
        age = False
        checks.append(Check("decode_basis", "warn",
                            f"only identical probes show a decode loss ({probes.ratio:.2f}x) and {bins.num_early} "
                            f"matched bins show none ({bins.ratio:.2f}x): the slowdown is placed on "
                            f"{'prefix reuse' if reuse_age else 'prefill time'}, which shows it clearly"))

    first = 1.0 / use["step_time_s"].head(max(2, len(use) // 4))
    last = 1.0 / use["step_time_s"].tail(max(2, len(use) // 4))
    raw_ratio = float(last.median() / first.median())
    if age or reuse_age or prefill_age:
        verdict = "engine_age_degradation"
    elif raw_ratio < RAW_DROP:
        verdict = "context_growth_only"
    else:
        verdict = "no_degradation"
    checks.append(Check("raw_throughput", "ok" if raw_ratio >= RAW_DROP else "warn",
                        f"per-request decode rate in the last quarter of samples is {raw_ratio:.2f}x "
                        f"the first quarter's ({last.median():.1f} vs {first.median():.1f} tok/s)"))

    # When only the probes show the loss, the step series places no onset: onset stays null.
    onset = _onset(source, life_use, onset_idx) if age and onset_idx is not None else None
    slowdown = _slowdown(use, model, onset_idx, life_use, age, probes)
    recovered = _restart(use, life_use, onset_idx) if onset_idx is not None and age else None
    if age and recovered is None and probes is not None and probes.after_restart is not None:
        recovered = probes.after_restart >= math.exp(-MATERIAL)
    if reuse_age:
        onset = _side_onset(source, prefix_reuse.onset_t, prefix_reuse.onset_age_s, prefix_reuse.calls)
        suspects = suspects_mod.rank(source, prefix_reuse.calls, onset, symptom="prefix reuse falls")
    elif prefill_age:
        onset = _side_onset(source, prefill_cmp.onset_t, prefill_cmp.onset_age_s, prefill_cmp.rows)
        suspects = suspects_mod.rank(source, prefill_cmp.rows, onset, symptom="prefill slows")
    else:
        suspects = suspects_mod.rank(source, samples[samples["residual"].notna()], onset)
    if age and onset_idx is not None:
        breakdown = _breakdown(source.steps, life_use, onset_idx)
        if breakdown is not None:
            checks.append(breakdown)
    checks_out = tuple(checks) + tuple(checks_mod.engine_checks(source, samples))
    return Analysis(verdict, slowdown, onset, recovered, suspects, checks_out, samples, model, cps,
                    tuple(matched), source.path, source.kind, source.engine, prefix_reuse,
                    "prefix_reuse" if reuse_age else "prefill" if prefill_age else "decode", prefill_cmp)


def _side_onset(source: Source, onset_t, onset_age_s: Optional[float], series: pd.DataFrame) -> Optional[Onset]:
    """The onset a prefix-reuse or prefill comparison found in its own series, if any."""
    if onset_t is None:
        return None
    return _onset_at(source, onset_t, float(onset_age_s), int(series["engine_life"].iloc[0]))


def _onset_at(source: Source, t, engine_age_s: float, life: int) -> Onset:
    """An onset found in a per-call or per-prefill series: its trigger is a fault switched on
    before it, if any (no step window to search for a standout prefill)."""
    trigger = _trigger(source, source.steps.iloc[:0], life, pd.Timestamp.min, t)
    return Onset(pd.Timestamp(t).to_datetime64(), engine_age_s, life, trigger)


def _find_onset(use: pd.DataFrame, model: healthy.HealthyModel):
    """Change points per engine life; the onset is the first segment materially slower than healthy."""
    base = float(use.loc[use["healthy"], "residual"].median())
    first_cps = None
    for life, rows in use.groupby("engine_life", sort=True):
        r = rows["residual"].to_numpy()
        cps = changepoint.detect(r)
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


def _breakdown(steps: pd.DataFrame, life_use: pd.DataFrame, onset_idx) -> Optional[Check]:
    """Where the added step time went: each part of the decode step (the engine's own split into
    scheduling, forward and sampling), median before the onset and after it."""
    parts = [p for p in suspects_mod.STEP_TIME_PARTS if p in steps and steps[p].notna().any()]
    if not parts:
        return None
    rows = steps.iloc[life_use["step_index"].to_numpy()][parts].set_axis(life_use.index)
    before, after = rows.loc[life_use.index < onset_idx], rows.loc[life_use.index >= onset_idx]
    if before.empty or after.empty:
        return None
    grew = {p: float(after[p].median() - before[p].median()) for p in parts}
    main = max(grew, key=grew.get)
    detail = ", ".join(f"{p} {before[p].median() * 1e3:.2f} -> {after[p].median() * 1e3:.2f} ms" for p in parts)
    return Check("step_time_breakdown", "ok",
                 f"median decode step parts before and after the onset: {detail}; most of the added time is in {main}")


def _beyond_window(model: healthy.HealthyModel, degraded: pd.DataFrame) -> bool:
    """Do most degraded samples run at more context than the healthy window ever held? Then the
    window's context slope is an extrapolation there, fitted over a range that may not show it."""
    if model.context_range is None:
        return True
    ctx = degraded["context"].to_numpy(dtype=float)
    ctx = ctx[np.isfinite(ctx)]
    return len(ctx) > 0 and float(np.median(ctx)) > CONTEXT_BAND * model.context_range[1]


def _context_only_test(degraded: pd.DataFrame, model: healthy.HealthyModel, sigma: float):
    """Could context alone explain the degraded samples? None when the data cannot say.

    The generous model: healthy step time as if the healthy window had held no context at all,
    plus c * context with c >= 0 chosen to fit the degraded samples best (relative error).
    """
    ctx = degraded["context"].to_numpy(dtype=float)
    s = degraded["step_time_s"].to_numpy(dtype=float)
    ok = np.isfinite(ctx) & (ctx > 0)
    if ok.sum() < 2 or (ctx[ok].max() - ctx[ok].min()) / ctx[ok].max() < healthy.MIN_SPREAD:
        return None, Check("context_only_model", "warn",
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
    explained = rms <= limit
    return explained, Check("context_only_model", "ok" if explained else "warn",
                            ("context explains the slowdown: " if explained else "context cannot explain it: ") + detail)


def _bin_comparison(use: pd.DataFrame, model: healthy.HealthyModel, onset_idx) -> Matched:
    """Same batch size and context band, early versus late in the model's engine life."""
    life = use[use["engine_life"] == model.engine_life]
    if onset_idx is not None:
        early, late = life.loc[: onset_idx - 1], life.loc[onset_idx:]
        early = early[early.index < onset_idx]
    else:
        half = len(life) // 2
        early, late = life.iloc[:half], life.iloc[half:]
    if life["context"].isna().all():
        return Matched("bins", None, 0, 0, "no context figures to form matched bins")

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        band = np.floor(np.log(df["context"].clip(lower=1)) / math.log(CONTEXT_BAND))
        return df.assign(key=df["batch"].fillna(0) * 10_000 + band, logt=np.log(df["step_time_s"]))

    e, l = keyed(early.dropna(subset=["context"])), keyed(late.dropna(subset=["context"]))
    ge, gl = e.groupby("key")["logt"], l.groupby("key")["logt"]
    shared = sorted(set(ge.groups) & set(gl.groups))
    if not shared:
        return Matched("bins", None, len(e), len(l), "no batch-and-context band holds samples both early and late")
    diffs, weights = [], []
    for key in shared:
        a, b = ge.get_group(key), gl.get_group(key)
        diffs.append(b.median() - a.median())
        weights.append(min(len(a), len(b)))
    ratio = math.exp(-float(np.average(diffs, weights=weights)))
    support = int(sum(weights))
    return Matched("bins", ratio, support, support,
                   f"{len(shared)} batch-and-context bands hold samples early and late ({support} pairs): "
                   f"late throughput is {ratio:.2f}x early")


def _probe_rows(probes: pd.DataFrame) -> pd.DataFrame:
    """The successful probes of the most frequent probe request, in time order."""
    if probes is None or probes.empty or "decode_tps" not in probes:
        return probes.iloc[:0] if probes is not None else pd.DataFrame()
    ok = probes[(probes.get("status", pd.Series("ok", index=probes.index)).fillna("ok") == "ok")
                & (probes["decode_tps"] > 0)]
    if "probe_id" in ok and ok["probe_id"].notna().any():
        ok = ok[ok["probe_id"] == ok["probe_id"].mode().iloc[0]]
    return ok.sort_values("t", kind="stable")


def _probe_comparison(probes: pd.DataFrame) -> Optional[Matched]:
    """Identical probes: the last quarter of an engine life against its first probes."""
    ok = _probe_rows(probes)
    if ok.empty:
        return None
    lives = sorted(ok["engine_life"].unique())
    first = ok[ok["engine_life"] == lives[0]]
    if len(first) < 4:
        return None
    k = max(2, len(first) // 4)
    early, late = first["decode_tps"].head(k), first["decode_tps"].tail(k)
    ratio = float(late.median() / early.median())
    loss_below = math.exp(-max(MATERIAL, 2 * _probe_noise(first["decode_tps"]) * math.sqrt(2 / k)))
    detail = (f"identical probes: last {k} ran at {ratio:.2f}x the first {k} ({late.median():.1f} vs "
              f"{early.median():.1f} tok/s; below {loss_below:.2f}x is a loss beyond probe noise)")
    back = None
    if len(lives) > 1:
        after = ok[ok["engine_life"] == lives[1]]["decode_tps"].head(k)
        back = float(after.median() / early.median())
        detail += f"; the first probes after a restart ran at {back:.2f}x"
    return Matched("probes", ratio, k, k, detail, back, loss_below)


def _probe_noise(tps: pd.Series) -> float:
    """Robust spread of one probe's log decode rate: from successive differences (MAD), so a
    single step change in the level (the slowdown itself) barely moves it."""
    d = np.diff(np.log(tps.to_numpy(dtype=float)))
    if len(d) < 2:
        return 0.0
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _probes_only(source: Source, probes: Matched, samples: pd.DataFrame, checks: list, why: str) -> Analysis:
    """No usable decode series, but identical probes: they alone decide, and place the onset."""
    checks.append(Check("data", "warn", f"the decode steps cannot carry the analysis ({why}); identical probes decide"))
    checks.append(Check("matched_conditions", "ok", probes.detail))
    ok = _probe_rows(source.probes)
    first = ok[ok["engine_life"] == ok["engine_life"].min()]
    k = probes.num_early
    healthy_tps = float(first["decode_tps"].head(k).median())
    r = np.log(healthy_tps / first["decode_tps"].to_numpy(dtype=float))  # > 0: slower than the first probes
    cps = changepoint.detect(r)
    age = probes.ratio < probes.loss_below
    onset = None
    seg = cps.first_rise(MATERIAL) if age else None
    if seg is not None:
        bad, good = first.iloc[seg.start], first.iloc[seg.start - 1]
        trigger = _trigger(source, source.steps.iloc[:0], int(bad["engine_life"]), good["t"], bad["t"])
        onset = Onset(bad["t"].to_datetime64(), float(bad["engine_age_s"]), int(bad["engine_life"]), trigger)
    recovered = (probes.after_restart >= math.exp(-MATERIAL)) if age and probes.after_restart is not None else None
    slowdown = Slowdown(probes.ratio, healthy_tps, float(first["decode_tps"].tail(k).median()))
    verdict = "engine_age_degradation" if age else "no_degradation"
    checks_out = tuple(checks) + tuple(checks_mod.engine_checks(source, samples))
    return Analysis(verdict, slowdown, onset, recovered, (), checks_out, samples, None, cps, (probes,),
                    source.path, source.kind, source.engine)


def _confirm(age: bool, bins: Matched, probes: Optional[Matched]) -> tuple[bool, Optional[str]]:
    """Probes decide when there are enough; well-supported bins may veto the model."""
    if probes is not None and probes.ratio is not None:
        if probes.ratio < probes.loss_below:
            return True, None
        if probes.ratio >= NO_LOSS:
            return False, (f"{probes.detail}: no loss on identical probes" if age else None)
    if age and bins.ratio is not None and bins.num_early >= MIN_SUPPORT and bins.ratio >= NO_LOSS:
        return False, f"the healthy model saw a slowdown but matched bins do not: {bins.detail}"
    return age, None


def _onset(source: Source, life_use: pd.DataFrame, onset_idx) -> Onset:
    """The first step row after the last healthy sample: a decode line's window starts there."""
    pos = life_use.index.get_loc(onset_idx)
    life = int(life_use.loc[onset_idx, "engine_life"])
    steps = source.steps
    first_bad = life_use.loc[onset_idx]
    if pos > 0:
        last_good = life_use.iloc[pos - 1]
        lo = int(last_good["step_index"]) + 1
        t0 = last_good["t"]
    else:
        lo = int(first_bad["step_index"])
        t0 = first_bad["t"]
    hi = int(first_bad["step_index"])
    # An idle line is not where a slowdown starts: the first prefill or decode row after it is.
    busy = [i for i in range(lo, hi + 1) if steps.iloc[i]["phase"] != "idle"] or [hi]
    row = steps.iloc[busy[0]]
    trigger = _trigger(source, steps.iloc[lo:hi + 1], life, t0, first_bad["t"])
    return Onset(row["t"].to_datetime64(), float(row["engine_age_s"]), life, trigger)


def _trigger(source: Source, window: pd.DataFrame, life: int, t0, t1) -> Optional[Trigger]:
    """What happened between the last healthy sample (t0) and the first degraded one (t1).

    A recorded fault switch first; then a prefill that stands out (the largest in the window,
    above the TRIGGER_QUANTILE of the life's earlier prefills, or any when there were fewer
    than five); then a dropped request or a preemption. None when nothing stands out.
    """
    ev = source.events
    ev = ev[(ev["t"] >= t0) & (ev["t"] <= t1)]
    faults = ev[ev["kind"] == "fault_on"]
    if not faults.empty:
        return _event_trigger(faults.iloc[-1])
    prefills = window[(window["phase"] == "prefill") & window["new_tokens"].notna()]
    if not prefills.empty:
        total = prefills["new_tokens"] + prefills["cached_tokens"].fillna(0)
        best = prefills.loc[total.idxmax()]
        steps = source.steps
        before = steps[(steps["engine_life"] == life) & (steps["phase"] == "prefill") & (steps["t"] < best["t"])]
        earlier = (before["new_tokens"] + before["cached_tokens"].fillna(0)).dropna()
        if len(earlier) < 5 or total.max() > earlier.quantile(TRIGGER_QUANTILE):
            cached = best["cached_tokens"]
            kind = "prefill_append" if pd.notna(cached) and cached > 0 else "prefill"
            return Trigger(kind, best["t"].to_datetime64(), int(best["new_tokens"]),
                           None if pd.isna(cached) else int(cached),
                           f"{int(best['new_tokens'])} new tokens onto {0 if pd.isna(cached) else int(cached)} cached")
    other = ev[ev["kind"].isin(("dropped_request", "preemption"))]
    return _event_trigger(other.iloc[-1]) if not other.empty else None


def _event_trigger(e: pd.Series) -> Trigger:
    new = None if pd.isna(e["new_tokens"]) else int(e["new_tokens"])
    cached = None if pd.isna(e["cached_tokens"]) else int(e["cached_tokens"])
    return Trigger(str(e["kind"]), e["t"].to_datetime64(), new, cached, "" if pd.isna(e["detail"]) else str(e["detail"]))


def _slowdown(use, model, onset_idx, life_use, age: bool, probes: Optional[Matched]) -> Slowdown:
    if onset_idx is not None and age:
        before = life_use.loc[life_use.index < onset_idx]
        after = life_use.loc[life_use.index >= onset_idx]
        shift = float(after["residual"].median() - before["residual"].median())
        return Slowdown(math.exp(-shift), float(before["gen_tps"].median()), float(after["gen_tps"].median()))
    base = use[use["healthy"]]
    late = use[~use["healthy"]].tail(max(2, len(use) // 4))
    ratio = math.exp(-float(late["residual"].median() - base["residual"].median()))
    if probes is not None and probes.ratio is not None:
        ratio = probes.ratio
    return Slowdown(ratio, float(base["gen_tps"].median()), float(late["gen_tps"].median()))


def _restart(use: pd.DataFrame, life_use: pd.DataFrame, onset_idx) -> Optional[bool]:
    """Did the next engine life run at the healthy level again?"""
    life = int(life_use.loc[onset_idx, "engine_life"])
    nxt = use[use["engine_life"] > life]
    if nxt.empty:
        return None
    nxt = nxt[nxt["engine_life"] == nxt["engine_life"].iloc[0]]
    head = nxt["residual"].head(max(2, len(nxt) // 4))
    base = float(use.loc[use["healthy"], "residual"].median())
    return bool(head.median() - base < MATERIAL)


def _model_check(model: healthy.HealthyModel) -> Check:
    ctx = "" if model.context_identified else (
        "; the window does not fix the context slope (context missing or constant), so the verdict also "
        "requires the generous context-only test")
    status = "ok" if model.num_points >= 8 and model.context_identified else "warn"
    r2 = f", R^2 {model.r2:.2f}" if model.r2 is not None else ""
    return Check("healthy_model", status,
                 f"step time = {model.describe()} from the first {model.num_points} usable decode samples of engine "
                 f"life {model.engine_life}{r2}{ctx}")
