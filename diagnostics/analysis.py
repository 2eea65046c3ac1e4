"""Engine age versus context: `analyze(source) -> Analysis`. The method is in docs/diagnostics.md.

Gathers the evidence — the step series and its comparisons (diagnostics.evidence.decode), probes, the
paired control and the restart control (diagnostics.evidence.controls), prefix reuse
(diagnostics.evidence.reuse), prefill time (diagnostics.evidence.prefill), the load on the host — lets one pure
function decide (diagnostics.decision.verdict), then places the onset (diagnostics.evidence.onset) in the series
that carried the verdict and ranks the suspects (diagnostics.evidence.suspects) against it.
"""

from __future__ import annotations

import logging
import math

import pandas as pd

from diagnostics.decision import caps
from diagnostics.decision import checks as checks_mod
from diagnostics.decision import verdict as verdict_mod
from diagnostics.evidence import context as context_mod
from diagnostics.evidence import controls, decode, intervals, sequential
from diagnostics.evidence import gathered as evidence_mod
from diagnostics.evidence import onset as onset_mod
from diagnostics.evidence import prefill as prefill_mod
from diagnostics.evidence import reuse as reuse_mod
from diagnostics.evidence import suspects as suspects_mod
from diagnostics.evidence import youth as youth_mod
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.prefill import PrefillComparison
from diagnostics.evidence.reuse import ReuseComparison
from diagnostics.evidence.trend import PerHour
from diagnostics.labels import Basis, Cause, CheckStatus, Confidence, Verdict
from diagnostics.result import Analysis, Check, Onset, Slowdown
from diagnostics.source import identity
from diagnostics.source.source import Source
from rundir.manifest import RunManifest
from rundir.schema import StopReason

logger = logging.getLogger(__name__)

# What a user with only a log can add, said with every refusal of one (a log of access lines says its own).
WHAT_WOULD_ANSWER = (
    "What would answer it: a longer stretch of steady work at the conditions the log began with, "
    "a restart of the same engine in the log (the control), or identical probes from a soak "
    "(`soak run --target URL`, with `--control-target` for a fresh second instance)."
)
MIN_TREND_SPAN_S = 1200.0  # samples spanning less than this give no rate per hour (a 3-minute fall is no hourly trend)


def analyze(source: Source) -> Analysis:
    lives = identity.lives(source.steps, source.events)
    access_only = source.log_info is not None and any(n.startswith("only access lines") for n in source.log_info.notes)
    dec = decode.evaluate(source.steps, identity.engine_of(lives), access_only)
    rows = controls.probe_rows(source.probes)
    cycles = controls.pairs(rows)
    level = probe_level(source.manifest, controls.baseline(controls.probe_series(rows, cycles)[0]))
    probes = controls.probes(rows, level)
    paired = controls.paired(cycles, level)
    drift = controls.control_drift(cycles, level)
    at_restart = controls.host_at_restart(rows, cycles)
    youth = youth_mod.measure(cycles)  # at the one look's level, as the running verdict's (diagnostics.decision.live)
    restart = _narrower(controls.restart(rows, cycles), dec.restart)
    prefix_reuse = reuse_mod.compare(source.requests)
    prefill = prefill_mod.compare(source.steps)
    host = controls.host_load(source.snapshots)
    no_data = dec.why_not if probes is None and paired is None else None
    evidence = evidence_mod.Evidence(
        paired=paired,
        probes=probes,
        bins=dec.bins,
        steps=dec.steps,
        onset_found=dec.onset_idx is not None,
        context=dec.context,
        reuse=prefix_reuse.comparison if prefix_reuse is not None else None,
        prefill=prefill.comparison if prefill is not None else None,
        control_drift=drift,
        step_drift=controls.drift_between(cycles, dec.step_sides, level) if drift is not None else None,
        bin_drift=controls.drift_between(cycles, dec.bin_sides, level) if drift is not None else None,
        restart=restart,
        youth=youth,
        paired_fresh=controls.paired_fresh(cycles, youth, level),
        host=host,
        raw_ratio=_raw_ratio(dec),
        no_data=no_data,
        span_s=_span_s(dec),
        unmatched=dec.unmatched,
        context_effect=context_mod.context_effect(dec.model, dec.use),
    )
    decision = verdict_mod.decide(evidence)

    checks = list(checks_mod.source_checks(source, dec.samples))
    changed = identity.changes(lives)
    if changed:
        checks.append(
            Check(
                "engine_identity",
                CheckStatus.WARN,
                "the engine changed between lives: "
                + "; ".join(c.describe() for c in changed)
                + "; no restart control across different engines",
            )
        )
    elif len(lives) > 1:
        checks.append(
            Check(
                "engine_identity",
                CheckStatus.OK,
                f"one engine in {len(lives)} lives, as far as their start-up lines say: {lives[0].describe()}",
            )
        )
    if dec.why_not is not None:
        checks.append(
            Check(
                "data",
                CheckStatus.FAIL if no_data else CheckStatus.WARN,
                dec.why_not
                if no_data
                else f"the decode steps cannot carry the analysis ({dec.why_not}); probes decide",
            )
        )
    checks += dec.checks
    stopped = _stopped_early(source.manifest, level)
    if stopped is not None:
        checks.append(stopped)
    together = decision.decode if decision.decode is not None and decision.decode.basis == Basis.COMBINED else None
    comparisons = tuple(
        c
        for c in (
            paired,
            restart,
            probes,
            dec.bins,
            dec.steps,
            drift,
            at_restart,
            evidence.reuse,
            evidence.prefill,
            together,
        )
        if c is not None
    )
    verdict_basis = len(checks)  # its text waits for the confidence the data checks allow (below)
    checks.append(Check("verdict_basis", CheckStatus.OK, decision.reason))
    checks.append(
        Check(
            "matched_conditions",
            CheckStatus.OK,
            "; ".join(c.detail for c in comparisons if c.basis in evidence_mod.DECODE_BASES) or "no matched comparison",
        )
    )
    checks += decision.findings
    if youth is not None and not youth.aging:
        checks.append(Check("control_youth", CheckStatus.OK if youth.verified else CheckStatus.WARN, youth.describe()))
    if prefix_reuse is not None:
        checks.append(
            Check(
                "prefix_reuse",
                CheckStatus.WARN if decision.basis == Basis.PREFIX_REUSE else CheckStatus.OK,
                prefix_reuse.detail,
            )
        )
    if prefill is not None:
        checks.append(
            Check(
                "prefill_time", CheckStatus.WARN if decision.basis == Basis.PREFILL else CheckStatus.OK, prefill.detail
            )
        )
    if host is not None and not any(f.name == "host_contention" for f in decision.findings):
        checks.append(
            Check(
                "host_contention",
                CheckStatus.WARN if host.rose else CheckStatus.OK,
                host.describe() + ("; a paired control cancels it" if host.rose and paired is not None else ""),
            )
        )
    raw = evidence.raw_ratio
    if raw is not None:
        checks.append(
            Check(
                "raw_throughput",
                CheckStatus.OK if raw >= evidence_mod.RAW_DROP else CheckStatus.WARN,
                f"per-request decode rate in the last quarter of the samples' span is {raw:.2f}x the "
                f"first quarter's (raw, not at matched conditions)",
            )
        )

    age = decision.verdict == Verdict.AGE
    found_onset = _onset(source, dec, decision, prefix_reuse, prefill, rows, cycles) if age else None
    if decision.basis == Basis.PREFIX_REUSE and age and prefix_reuse is not None:
        suspects = suspects_mod.rank(source, prefix_reuse.calls, found_onset, symptom="prefix reuse falls")
    elif decision.basis == Basis.PREFILL and age and prefill is not None:
        suspects = suspects_mod.rank(source, prefill.rows, found_onset, symptom="prefill slows")
    else:
        suspects = suspects_mod.rank(source, dec.samples[dec.samples["residual"].notna()], found_onset)
    if age and dec.onset_idx is not None and decision.basis in evidence_mod.DECODE_BASES:
        breakdown = _breakdown(source.steps, dec.life_use, dec.onset_idx)
        if breakdown is not None:
            checks.append(breakdown)
    checks += checks_mod.engine_checks(source, dec.samples)
    shape = dec.trend.shape if age and dec.trend is not None and decision.basis in evidence_mod.DECODE_BASES else None
    # The trend per hour is the step series' own: said only when the step series carries the
    # verdict, over a span long enough for an hourly rate to mean something.
    trend_ok = (
        decision.basis in (*evidence_mod.LOG_BASES, Basis.COMBINED)
        and decision.decode is not None
        and set(decision.decode.bases) <= set(evidence_mod.LOG_BASES)
        and (evidence.span_s or 0.0) >= MIN_TREND_SPAN_S
    )
    slowdown, decode_held = _headline(decision, dec.per_hour if trend_ok else None, shape)
    confidence, cap = caps.capped(
        decision.verdict, decision.confidence, slowdown.ratio if slowdown else None, raw, checks
    )
    confidence, thin = caps.thin(confidence, decision.decisive)
    reason = decision.reason
    if decision.verdict == Verdict.INSUFFICIENT and source.kind == "log" and not access_only:
        reason += " " + checks_mod.what_log_lacks(source.log_info) + WHAT_WOULD_ANSWER
    lowered = [c for c in (cap, thin) if c is not None]
    if lowered:
        checks += lowered
        reason = reason.replace(
            f"{decision.confidence} confidence",
            f"{confidence} confidence ({decision.confidence} by its interval, lowered: see "
            f"{' and '.join(c.name for c in lowered)})",
            1,
        )
    checks[verdict_basis] = Check(
        "verdict_basis",
        CheckStatus.OK if confidence in (Confidence.HIGH, Confidence.MEDIUM) else CheckStatus.WARN,
        reason,
    )
    return Analysis(
        verdict=decision.verdict,
        slowdown=slowdown,
        onset=found_onset,
        recovered_by_restart=_recovered(restart, decision),
        suspects=suspects,
        checks=tuple(checks),
        samples=dec.samples,
        model=dec.model,
        changepoints=dec.changepoints,
        comparisons=comparisons,
        source_path=source.path,
        source_kind=source.kind,
        engine=source.engine,
        prefix_reuse=prefix_reuse,
        age_basis=(decision.basis if decision.basis in evidence_mod.SIDE_BASES else "decode"),
        prefill=prefill,
        confidence=confidence,
        basis=decision.basis,
        cause=decision.cause,
        reason=reason,
        probe_pairs=cycles if len(cycles) else None,
        bands=dec.bands,
        decode_held=decode_held,
        clock=source.log_info.clock if source.log_info is not None else "wall",
        dated=source.log_info.dated if source.log_info is not None else True,
        lives=lives,
    )


def probe_level(manifest: RunManifest | None, baseline: int = 0) -> float:
    """The level of the probe comparisons' intervals. A soak that ran its planned length is one
    planned look: the plain level. One that stopped early — at a decided running verdict, or
    interrupted by a user who watched it — stopped where the data led, so its comparisons keep
    the level that holds over every look it planned (diagnostics.evidence.sequential)."""
    if manifest is None or not _stopped_early_reason(manifest):
        return intervals.LEVEL
    soak = manifest.configs.get("soak") or {}
    try:
        looks = sequential.looks_planned(float(soak["duration_s"]), float(soak.get("probe_every_s", 300.0)))
    except (KeyError, TypeError, ValueError):
        return intervals.LEVEL
    return sequential.level_for(looks, baseline=baseline)


def _stopped_early_reason(manifest: RunManifest | None) -> str | None:
    """Why a soak stopped before its planned end (decided, interrupted, crashed); None for one that
    ran its length, or a source that is no soak."""
    return None if manifest is None or manifest.stop_reason in (None, StopReason.DURATION) else manifest.stop_reason


def _stopped_early(manifest: RunManifest | None, level: float) -> Check | None:
    """A soak that stopped before its planned end: why, and the level its probe comparisons keep."""
    if manifest is None or not _stopped_early_reason(manifest):
        return None
    d = manifest.decided
    cycle, verdict = (d.cycle, d.verdict) if d is not None else (None, None)
    why = (
        f"once its running verdict was decided at cycle {cycle} ({verdict})"
        if manifest.stop_reason == StopReason.DECIDED
        else f"{manifest.stop_reason}"
    )
    return Check(
        "stopped_early",
        CheckStatus.OK,
        f"the soak stopped before its planned end, {why}; its probe comparisons "
        f"are taken at {level:.2%}, the level that keeps every look it planned "
        f'valid together (docs/diagnostics.md, "Running verdicts")',
    )


def _narrower(a: Comparison | None, b: Comparison | None) -> Comparison | None:
    """Of two restart controls (the probes', the step series'), the one whose interval is
    narrower on the log scale (a step series holds many more samples than three probe cycles),
    of those that read what an engine compared with itself can (verdict.sane)."""
    a, b = (a if evidence_mod.sane(a) else None), (b if evidence_mod.sane(b) else None)
    if a is None or b is None:
        return a or b
    if not b.interval.bounded:
        return a
    if not a.interval.bounded:
        return b

    def width(c: Comparison) -> float:
        return math.log(c.interval.hi / c.interval.lo)

    return b if width(b) < width(a) else a


def _raw_ratio(dec: decode.DecodeEvidence) -> float | None:
    """Per-request decode rate of the last quarter of the usable samples' span over the first's
    (by busy time, as the healthy window: a slowed engine prints fewer lines an hour)."""
    use = dec.use
    if len(use) < 4:
        return None
    t = (use["busy_s"] - use["busy_s"].min()).to_numpy(dtype=float)
    span = t.max()
    first, last = use[t <= span / 4], use[t >= 3 * span / 4]
    if len(first) < 2 or len(last) < 2:
        k = max(2, len(use) // 4)
        first, last = use.head(k), use.tail(k)
    return float((1.0 / last["step_time_s"]).median() / (1.0 / first["step_time_s"]).median())


def _span_s(dec: decode.DecodeEvidence) -> float | None:
    """Engine busy time the usable decode samples of the model's life cover."""
    busy = dec.life_use["busy_s"] if len(dec.life_use) else dec.samples.loc[dec.samples["excluded"] == "", "busy_s"]
    return float(busy.max() - busy.min()) if len(busy) >= 2 else None


def _headline(
    decision: verdict_mod.Decision, per_hour: PerHour | None, shape: str | None
) -> tuple[Slowdown | None, Slowdown | None]:
    """The `slowdown` block, and decode's own figures beside a prefill-side claim.

    The block describes what the verdict rests on, late over healthy (below 1 is slower): the
    decode comparison that decided; for an age claim on prefix reuse or prefill time, that
    claim's ratio (its kind in `basis`, no decode rates), with decode's figures apart in
    `decode_held`. A verdict that cannot tell has no headline figure: a comparison it does not
    stand on is not printed as a loss."""
    if decision.verdict == Verdict.INSUFFICIENT:
        return None, None
    claim = decision.decisive
    if claim is not None and claim.basis in evidence_mod.SIDE_BASES:
        i = claim.interval
        side = Slowdown(
            ratio=claim.ratio,
            healthy_tps=None,
            degraded_tps=None,
            basis=claim.basis,
            lo=i.lo if i.bounded else None,
            hi=i.hi if i.bounded else None,
            level=i.level,
        )
        return side, _slowdown(decision.decode, None, None)
    return _slowdown(decision.decode, per_hour, shape), None


def _slowdown(c: Comparison | None, per_hour: PerHour | None, shape: str | None) -> Slowdown | None:
    if c is None or c.healthy_level is None:
        return None
    i = c.interval
    return Slowdown(
        ratio=c.ratio,
        healthy_tps=c.healthy_level,
        degraded_tps=c.late_level,
        basis=c.basis,
        lo=i.lo if i.bounded else None,
        hi=i.hi if i.bounded else None,
        per_hour=per_hour,
        shape=shape,
        level=i.level,
    )


def _recovered(restart: Comparison | None, decision: verdict_mod.Decision) -> bool | None:
    """Whether a restart brought a slowdown back: for engine age, True when the aged engine ran
    materially slower than the fresh one after the restart; False when a restart ruled a slowdown
    out as age (a fresh engine as slow). None without a restart, without a slowdown to bring back,
    or when the data cannot tell."""
    if restart is None:
        return None
    if decision.verdict == Verdict.AGE:
        return True if restart.loss else None
    if decision.cause == Cause.HOST_DRIFT and any(f.name == "fresh_control" for f in decision.findings):
        return False if not restart.loss else None
    return None


def _onset(
    source: Source,
    dec: decode.DecodeEvidence,
    decision: verdict_mod.Decision,
    prefix_reuse: ReuseComparison | None,
    prefill: PrefillComparison | None,
    rows: pd.DataFrame,
    cycles: pd.DataFrame,
) -> Onset | None:
    """The onset in the series that carried the verdict. A paired verdict's onset is the first
    cycle of the paired series' first materially slower segment; the step series places it more
    finely only when its own onset falls between that cycle and the one before (elsewhere the
    step series may be showing the host, which the pairs cancel)."""
    if decision.basis == Basis.PREFIX_REUSE:
        assert prefix_reuse is not None  # the verdict rests on it
        return onset_mod.series_onset(source, prefix_reuse.onset_t, prefix_reuse.onset_age_s, prefix_reuse.calls)
    if decision.basis == Basis.PREFILL:
        assert prefill is not None  # the verdict rests on it
        return onset_mod.series_onset(source, prefill.onset_t, prefill.onset_age_s, prefill.rows)
    if dec.trend is not None and dec.trend.shape == "gradual" and dec.creep_idx is not None:
        step: Onset | None = onset_mod.creep_onset(dec.life_use, dec.creep_idx, dec.trend.change_age_s)
    else:
        step = onset_mod.step_onset(source, dec.life_use, dec.onset_idx) if dec.onset_idx is not None else None
    if decision.basis != Basis.PAIRED_CONTROL and step is not None:
        return step
    series, value = (
        (cycles, "ratio") if decision.basis == Basis.PAIRED_CONTROL else (controls.main_probes(rows), "decode_tps")
    )
    if len(series):
        series = series[series["engine_life"] == series["engine_life"].min()]
    pos = controls.probe_onset(series, value)
    if pos is None:
        return None
    row = series.iloc[pos]
    if step is not None and pos > 0 and series["t"].iloc[pos - 1] < pd.Timestamp(step.t) <= row["t"]:
        return step
    return onset_mod.onset_at(source, row["t"], float(row["engine_age_s"]), int(row["engine_life"]))


def _breakdown(steps: pd.DataFrame, life_use: pd.DataFrame, onset_idx: int) -> Check | None:
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
    main = max(grew, key=lambda p: grew[p])
    detail = ", ".join(f"{p} {before[p].median() * 1e3:.2f} -> {after[p].median() * 1e3:.2f} ms" for p in parts)
    return Check(
        "step_time_breakdown",
        CheckStatus.OK,
        f"median decode step parts before and after the onset: {detail}; most of the added time is in {main}",
    )
