"""The verdict as one pure function over typed evidence: `decide(Evidence) -> Decision`.

The rules, in order (docs/diagnostics.md, "The verdict"):

1. **Decode.** A paired control (the soaked engine probed back to back with a fresh twin or
   control instance) that shows a loss is engine age; one that rules a loss out ends the
   question (host drift slowed both and cancels). Otherwise identical probes decide when their
   interval can tell (a probe loss is age; probes that rule a loss out veto the step series);
   otherwise the step series after an onset, when context cannot explain it and matched bins
   do not rule the loss out. Where a control was probed through the run, every comparison of
   the soaked engine alone that times something (probes, step series, bins, prefill) is first
   divided by the control's own drift (`control_drift`, intervals combined): what slowed the
   host slowed the control as much. The drift must be measured itself: one whose interval
   spans more than a factor of DRIFT_SPREAD corrects nothing (a `control_drift` warning says
   so), nor does such a drift beside the step series' or the bins' own sides, and the controls
   of rule 2 guard the verdict as they do without a control.
2. **Controls.** A loss seen on the soaked engine alone must survive the controls the data
   hold. A restart after the onset is one: the aged engine's latest stretch against the fresh
   engine's young samples (the `restart` comparison; minutes apart, on the same host, under
   the same load). Its whole interval above the square root of the claimed ratio (the fresh
   engine did not recover even half the loss) makes the slowdown host or load drift
   (`cause`), not engine age; one that does not show the fresh engine materially faster,
   while ruling out that it was as much faster as the claimed loss, leaves the claim
   unconfirmed and no age is claimed (a restart too noisy to rule that out says nothing).
   With no control probed beside it, other load on the host rising while the engine slowed
   makes it host or load drift too. A loss that the control's drift takes away is said the same way.
3. **Prefill side.** A prefix cache that stops reusing, or prefill that takes longer and longer,
   carries the verdict when decode shows no loss (or only the probes show one while matched
   bins rule it out). Prefill time is host-bound: it is corrected by the control's drift and
   must survive host contention as decode does; the restart comparisons measure decode and do
   not judge it (decode can hold while admissions slow). Prefix reuse is a share, not a time:
   no host drift moves it.
4. **No age.** The decisive decode comparison — the paired control, the restart control, the
   probes, the bins and the step series together where a control makes each net of the host and
   two or more bound an interval (each widened so that all hold at once, intersected:
   diagnostics.evidence.combine; the narrower of that and the best one alone), else the one there is — must rule out a loss of LOW_FLOOR; otherwise the answer is `insufficient_data`. The verdict is
   then `context_growth_only` when raw throughput fell, else `no_degradation` (also when the
   fall was host or load drift: neither context nor age). With no interval anywhere but a
   context-only model that explains the slowdown, it is `context_growth_only`, low. A verdict of
   no age that rests on the log's own samples (step series, bins) needs them to span MIN_SPAN_S
   of engine time: a few windows a minute apart cannot show what hours of serving do
   (`insufficient_data`, failed `data_span` check). Nor may it rest on another comparison while
   the paired control shows the soaked engine slower (its whole interval below 1, its estimate
   a material loss): the comparisons disagree (`insufficient_data`, failed `decode_agreement`).
   Nor while prefill showed a loss that the control's drift, taken out, neither keeps nor rules
   out (a drift measured loosely): the host and the engine cannot be told apart there
   (`insufficient_data`, failed `prefill_drift`). Nor while the paired control, net of the host,
   shows the soaked engine slower (its whole interval below 1) and the decisive interval does not
   rule a material loss out: a slowdown is measured, its size not yet (`insufficient_data`,
   failed `paired_slower`). Nor while the restart control on the pairs (or, where no control ran,
   on the log's own steps) shows the fresh engine materially faster (its whole interval below 1,
   its estimate at or below the material level): the restart brought back a loss the first life's
   comparisons did not see (`insufficient_data`, failed `restart_slower`).

0. **The control's youth**, before all of them (diagnostics.evidence.youth): a control that slowed with its
   own age (a fault driven by requests served reaches a same-build control too) is no measure of
   the host, and the pairs with it, restarted, mix its ages on both sides. Only the cycles right
   after its restarts (`paired_fresh`: the soaked engine beside a control of one age each time)
   decide then: a loss there is engine age; else `insufficient_data`, never no age, with a failed
   `control_youth` finding and a reason that says to restart the control more often.

A loss is a comparison whose whole interval lies at or below its material level (see
diagnostics.evidence.comparison). Confidence: engine age is `high` when the interval also clears the
material level by another 10 %, else `medium`; no age is `high` when the interval rules out a
loss of 5 %, `medium` a loss of 10 %, `low` a loss of 19 % (LOW_FLOOR).
"""

from __future__ import annotations

from typing import Any, NamedTuple, cast

from diagnostics.decision import claims
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.gathered import (
    DECODE_BASES,
    DRIFT_SPREAD,
    HIGH_FLOOR,
    LOG_BASES,
    LOW_FLOOR,
    MIN_SPAN_S,
    RAW_DROP,
    SANE_RATIO,
    Evidence,
    sane,
)
from diagnostics.labels import Basis, Cause, CheckStatus, Confidence, Verdict
from diagnostics.result import Check


class Decision(NamedTuple):
    verdict: Verdict
    basis: Basis | None  # the comparison that decided
    decisive: Comparison | None
    decode: Comparison | None  # the decode comparison the slowdown figures come from
    cause: Cause | None
    confidence: Confidence | None  # None for insufficient_data
    reason: str  # one sentence: how sure, and on what
    findings: tuple[Check, ...]

    @classmethod
    def age(cls, claim: Comparison, findings: list[Check], decode: Comparison | None) -> Decision:
        """`engine_age_degradation` on `claim`, at the confidence its interval gives; `decode`, the
        decode comparison the slowdown figures come from (None for a claim on prefill or reuse alone)."""
        confidence = claims.age_confidence(claim)
        return cls(
            verdict=Verdict.AGE,
            basis=claim.basis,
            decisive=claim,
            decode=decode,
            cause=Cause.ENGINE_AGE,
            confidence=confidence,
            reason=f"Engine age, {confidence} confidence: {claim.detail}.",
            findings=tuple(findings),
        )

    @classmethod
    def insufficient(
        cls, reason: str, findings: list[Check], decode: Comparison | None = None, cause: Cause | None = None
    ) -> Decision:
        """`insufficient_data`: no confidence; the decode comparison that could not tell, if any."""
        return cls(
            verdict=Verdict.INSUFFICIENT,
            basis=None if decode is None else decode.basis,
            decisive=decode,
            decode=decode,
            cause=cause,
            confidence=None,
            reason=reason,
            findings=tuple(findings),
        )


def decide(ev: Evidence) -> Decision:
    """The rules of the module docstring, in order: the first that decides, decides."""
    if ev.youth is not None and ev.youth.aging:
        return _beside_an_aging_control(ev)  # rule 0
    findings: list[Check] = []
    # Before the rules: comparisons no engine could show, and corrections not measured themselves.
    failed = _matching_failed(ev, findings)
    if failed is not None:
        return failed
    ev = _set_aside_mismatched(ev, findings)
    ev = _measured_drift(ev, findings)
    _warn_loose_side_drift(ev, findings)
    raw, ev = ev, claims.host_corrected(ev)
    case = _Case(
        raw=raw,
        ev=ev,
        findings=findings,
        unresolved=claims.drift_unresolved(raw, ev),
        decode=_decisive_decode(ev, findings),
    )
    claim, cause = _decode_claim(case)  # rule 1
    claim, cause = _survives_controls(case, claim, cause)  # rule 2
    claim = _side_claim(case, claim)  # rule 3
    if claim is not None:
        return Decision.age(claim, findings, claim if claim.basis in DECODE_BASES else case.decode)
    case = case._replace(cause=cause)
    for veto in _NO_AGE_VETOES:  # rule 4
        vetoed = veto(case)
        if vetoed is not None:
            return vetoed
    return _no_age(case)


class _Case(NamedTuple):
    """What the rules after the control's youth read: the evidence as measured (`raw`) and net of
    the host's drift (`ev`), the decisive decode comparison, the cause the controls found, a prefill
    loss the drift neither keeps nor explains, and the findings so far (each rule adds its own)."""

    raw: Evidence
    ev: Evidence
    findings: list[Check]
    unresolved: Comparison | None
    decode: Comparison | None
    cause: Cause | None = None


def _beside_an_aging_control(ev: Evidence) -> Decision:
    """Rule 0: the control slowed with its own age. Its drift is no longer the host's, the pairs with
    it mix its ages on both sides (it is restarted: an aged control early and a young one late reads
    as the soaked engine's loss), and every comparison of the soaked engine alone is timed on a host
    only the control measured. What still compares like with like is the soaked engine against the
    control at one age: the cycles right after each of its restarts (`paired_fresh`). A loss there is
    engine age; anything else cannot tell, never no age (a fresh instance of the same engine slowed
    with its age: the age is in this build, and the soaked engine served more). (A live soak of the
    output-buffer fault: the soaked engine at 0.73 of its twin until the twin reached the same request
    count, then 1.0; "no degradation" decided on paired 1.30, 0.93-1.82.)"""
    assert ev.youth is not None
    aged = ev.youth.shown
    assert aged is not None  # aging rests on a comparison
    findings = [Check("control_youth", CheckStatus.FAIL, ev.youth.describe())]
    fresh = ev.paired_fresh
    if fresh is not None and fresh.loss:
        return Decision.age(fresh, findings, fresh)
    said = f" ({fresh.interval.describe()})" if fresh is not None else " (too few of them yet)"
    return Decision.insufficient(
        f"The data cannot tell: the control, a fresh instance of the same engine, slowed with its own age "
        f"({aged.interval.describe()}), so only the cycles right after its restarts compare the soaked "
        f"engine with it at one age, and they do not show a loss{said}. Restart the control more often "
        f"(`--control-restart-after`), and take a baseline before the traffic (`--baseline N`).",
        findings,
        fresh,
    )


def _insane(ev: Evidence) -> dict[str, Comparison]:
    """The comparisons whose ratio lies outside SANE_RATIO: samples of different work compared."""
    return {name: c for name in ("paired", "restart", "probes", "bins", "steps") if not sane(c := getattr(ev, name))}


def _probes_decide(ev: Evidence, insane: dict[str, Comparison]) -> bool:
    """Identical probes cannot be matched wrongly; samples of the engine's own work can. (A llama.cpp
    whose slots filled in its first minute: a healthy model fitted on slow steps, and a restart on the
    step series that read 0.018, beside probes that read 0.16.)"""
    probes = ("paired", "probes")
    return not insane.keys() & set(probes) and any(getattr(ev, name) is not None for name in probes)


def _insane_said(insane: dict[str, Comparison]) -> str:
    return "; ".join(f"{c.basis.replace('_', ' ')} reads {c.ratio:.3g}" for c in insane.values())


def _matching_failed(ev: Evidence, findings: list[Check]) -> Decision | None:
    """A ratio no engine could show, with no identical probes to decide in its place: the matching failed."""
    insane = _insane(ev)
    if not insane or _probes_decide(ev, insane):
        return None
    lo, hi = SANE_RATIO
    said = _insane_said(insane)
    findings.append(
        Check(
            "ratio_sanity",
            CheckStatus.FAIL,
            f"late over healthy at matched conditions must lie within {lo:g}-{hi:g}, but {said}: "
            f"the matching failed (samples of different work compared), not a measure of the "
            f"engine",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: the matching failed ({said}, outside {lo:g}-{hi:g}).", findings
    )


def _set_aside_mismatched(ev: Evidence, findings: list[Check]) -> Evidence:
    """A ratio no engine could show beside identical probes: that comparison is set aside, the probes decide."""
    insane = _insane(ev)
    if not insane:
        return ev
    lo, hi = SANE_RATIO
    findings.append(
        Check(
            "ratio_sanity",
            CheckStatus.WARN,
            f"late over healthy at matched conditions must lie within {lo:g}-{hi:g}, but {_insane_said(insane)}: "
            f"those samples were not alike (the matching failed); set aside, the identical "
            f"probes decide",
        )
    )
    return ev._replace(**cast(dict[str, Any], dict.fromkeys(insane)))


def _measured_drift(ev: Evidence, findings: list[Check]) -> Evidence:
    """Rule 1's correction must be measured itself: two probes a side of a control on a busy host can
    read anything (0.18-7.77 once), and dividing by that erases any loss."""
    d = ev.control_drift
    if d is None or claims.measured(d):
        return ev
    findings.append(
        Check(
            "control_drift",
            CheckStatus.WARN,
            f"{d.detail}: the host's drift is not measured to within a factor of "
            f"{DRIFT_SPREAD:g}; nothing is corrected by it, and the restart rule and the host "
            f"contention check guard the verdict instead",
        )
    )
    return ev._replace(control_drift=None)


def _warn_loose_side_drift(ev: Evidence, findings: list[Check]) -> None:
    """As for the run's drift: a correction beside the step series' or the bins' own sides must be
    measured itself. A slow engine's long probe cycles can leave one control probe beside a short
    side (gc-pressure: the step series' last minute at 0.15, 0.13-0.17, with the control probed once
    in it)."""
    loose = [
        (c, side)
        for c, side in ((ev.steps, ev.step_drift), (ev.bins, ev.bin_drift))
        if c is not None and side is not None and ev.control_drift is not None and not claims.host_taken_out(c, ev)
    ]
    if not loose:
        return
    said = "; ".join(
        f"beside the {claims.basis_words(c)}' two sides, {side.num_late} control probes over "
        f"{side.num_early}: {side.interval.describe()}"
        for c, side in loose
    )
    findings.append(
        Check(
            "control_drift",
            CheckStatus.WARN,
            f"the host's drift {said}: not measured to within a factor of {DRIFT_SPREAD:g}, so "
            f"not corrected by it; the restart rule and the host contention check guard it instead",
        )
    )


def _decisive_decode(ev: Evidence, findings: list[Check]) -> Comparison | None:
    """The decode comparison that decides a verdict of no age, after a warning for each probe
    comparison that clears the material level on too few samples for a loss."""
    for c in (ev.paired, ev.probes):
        if c is not None and c.clears and not c.loss:
            findings.append(
                Check(
                    "too_few_for_loss",
                    CheckStatus.WARN,
                    f"{c.detail}: an interval that clears the material level, but on "
                    f"{min(c.num_early, c.num_late)} a side; a loss needs {c.min_for_loss}",
                )
            )
    return claims.decisive_decode(ev, findings)


def _decode_claim(case: _Case) -> tuple[Comparison | None, Cause | None]:
    """Rule 1: a loss on decode (the paired control, else the probes, else the step series)."""
    return claims.decode_claim(case.ev, case.findings)


def _survives_controls(
    case: _Case, claim: Comparison | None, cause: Cause | None
) -> tuple[Comparison | None, Cause | None]:
    """Rule 2: a loss on the soaked engine alone must survive the restart and the host's contention;
    with no claim left, the control's drift may say the slowdown was the host's."""
    ev = case.ev
    if claim is not None and claim.basis != Basis.PAIRED_CONTROL:
        claim, cause = claims.survives_controls(claim, ev, case.findings, "decode")
    if claim is not None and claim.basis in LOG_BASES:
        claim = claims.beyond_the_host(claim, ev, case.findings)
    if claim is None and cause is None and (ev.control_drift is not None or ev.paired is not None):
        cause = claims.drift_explains(case.raw, ev, case.findings, case.unresolved)
    return claim, cause


def _side_claim(case: _Case, claim: Comparison | None) -> Comparison | None:
    """Rule 3: prefix reuse or prefill carries the verdict where decode shows no loss."""
    side = claims.side_claim(case.ev, claim, case.findings)
    return claim if side is None else side


def _prefill_drift(case: _Case) -> Decision | None:
    """Rule 4: no verdict of no age while prefill showed a loss that the control's drift, taken out,
    neither keeps nor rules out: the host and the engine cannot be told apart there."""
    raw, ev, unresolved, findings = case.raw, case.ev, case.unresolved, case.findings
    if unresolved is None:
        return None
    assert raw.prefill is not None and ev.control_drift is not None  # what `unresolved` says
    findings.append(
        Check(
            "prefill_drift",
            CheckStatus.FAIL,
            f"prefill slowed ({raw.prefill.detail}), and the host's drift measured by the fresh "
            f"control ({ev.control_drift.detail}) is too loose to tell whether the host or the "
            f"engine slowed it: corrected, {unresolved.interval.describe()} neither shows the "
            f"loss nor rules it out",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: prefill slowed ({raw.prefill.interval.describe()}), and the "
        f"host's own drift ({ev.control_drift.interval.describe()}) is measured too loosely to "
        f"say whether the host or the engine slowed it. A longer soak (more control probes) can tell.",
        findings,
        case.decode,
        case.cause,
    )


def _no_data(case: _Case) -> Decision | None:
    """Rule 4: the source said why it holds nothing to compare, and nothing was compared."""
    if case.ev.no_data is None or case.decode is not None:
        return None
    return Decision.insufficient(f"The data cannot tell: {case.ev.no_data}.", case.findings)


def _short_span(case: _Case) -> Decision | None:
    """Rule 4: no age from the log's own samples needs them to span MIN_SPAN_S of engine time."""
    ev, decode, findings = case.ev, case.decode, case.findings
    if not (
        (decode is None or set(decode.bases) <= set(LOG_BASES)) and ev.span_s is not None and ev.span_s < MIN_SPAN_S
    ):
        return None
    findings.append(
        Check(
            "data_span",
            CheckStatus.FAIL,
            f"the usable decode samples cover {ev.span_s:.0f} s of engine time; a verdict of no "
            f"engine age from them needs at least {MIN_SPAN_S / 60:.0f} minutes: a few windows "
            f"a minute apart cannot show what hours of serving do",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: the usable decode samples cover {ev.span_s:.0f} s of "
        f"engine time, too short to rule engine age out.",
        findings,
        decode,
        case.cause,
    )


def _context_alone(case: _Case) -> Decision | None:
    """Rule 4: no interval anywhere, but a context-only model that explains the slowdown."""
    if case.decode is not None or case.ev.context != "explains":
        return None
    return Decision(
        verdict=Verdict.CONTEXT_ONLY,
        basis=Basis.STEP_SERIES,
        decisive=None,
        decode=None,
        cause=Cause.CONTEXT_GROWTH,
        confidence=Confidence.LOW,
        reason="Context growth, low confidence: the most generous context-only model explains the "
        "slowdown (context_only_model), and no matched comparison has enough samples for an "
        "interval.",
        findings=tuple(case.findings),
    )


def _no_interval(case: _Case) -> Decision | None:
    """Rule 4: no decode comparison with an interval."""
    if case.decode is not None:
        return None
    why = case.ev.unmatched or "no matched comparison has enough samples for an interval"
    case.findings.append(Check("data", CheckStatus.FAIL, why))
    return Decision.insufficient(f"The data cannot tell: {why}.", case.findings, cause=case.cause)


def _loss_without_cause(case: _Case) -> Decision | None:
    """Rule 4: the interval shows a loss, but no rule let it be engine age's (context unknown, no
    control, a comparison that disagrees): say that, not that the interval is too wide."""
    ev, decode, findings = case.ev, case.decode, case.findings
    assert decode is not None  # _no_interval
    if not (decode.interval.lo <= LOW_FLOOR and decode.clears):
        return None
    warned = [f.name for f in findings if f.status == CheckStatus.WARN]
    if ev.context not in ("fitted", "cannot_explain"):
        warned.append("context could explain it: the samples hold too few context figures to test that")
    findings.append(
        Check(
            "confidence",
            CheckStatus.FAIL,
            f"a loss without a cause: {decode.detail}; engine age is not shown "
            f"({'; '.join(warned) or 'no rule claims it'})",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: on {claims.basis_words(decode)}, "
        f"{decode.interval.describe()} shows a slowdown, but not that engine age caused "
        f"it ({'; '.join(warned) or 'no rule claims it'}).",
        findings,
        decode,
        case.cause,
    )


def _decode_disagrees(case: _Case) -> Decision | None:
    """Rule 4: the paired control takes the host out by design; where it shows the soaked engine
    slower (its whole interval below 1, the estimate a material loss) no comparison of the engine
    alone may rule a loss out in its place. (A live soak with the output-buffer fault, its cost 0.87
    against the twin, on a host loaded with two other soaks: bins read 1.03, 0.93-1.14, and the
    verdict was "no engine age, medium".)"""
    p, decode, findings = case.ev.paired, case.decode, case.findings
    assert decode is not None  # _no_interval
    if not (
        p is not None
        and p.interval.bounded
        and p.interval.hi < 1.0
        and p.ratio <= p.material
        and Basis.PAIRED_CONTROL not in decode.bases
    ):
        return None
    findings.append(
        Check(
            "decode_agreement",
            CheckStatus.FAIL,
            f"the paired control shows the soaked engine slower ({p.detail}) where the comparison "
            f"on {claims.basis_words(decode)} rules a loss out ({decode.interval.describe()}): "
            f"they did not measure the same thing, and the paired control is the one net of the host",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: the paired control shows a slowdown ({p.interval.describe()}) "
        f"that the comparison on {claims.basis_words(decode)} rules out ({decode.interval.describe()}); not a loss "
        f"large enough for engine age yet, and not none. A longer soak can tell.",
        findings,
        p,
        case.cause,
    )


def _paired_slower(case: _Case) -> Decision | None:
    """Rule 4: the paired control, net of the host, shows the soaked engine slower; the loss is not
    yet material or not. "No engine age" would hide a slowdown measured. (A live soak with a 12 %
    loss switched on read "no_degradation, low" on paired 0.90, 0.87-0.94, for three cycles before
    it was decided engine age.)"""
    p, decode, findings = case.ev.paired, case.decode, case.findings
    assert decode is not None  # _no_interval
    if not (
        p is not None
        and Basis.PAIRED_CONTROL in decode.bases
        and p.interval.bounded
        and p.interval.hi < 1.0
        and decode.interval.lo <= decode.material
    ):
        return None
    findings.append(
        Check(
            "paired_slower",
            CheckStatus.FAIL,
            f"the paired control shows the soaked engine slower ({p.detail}); "
            f"{decode.interval.describe()} neither shows a material loss nor rules one out",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell yet: the paired control shows the soaked engine slower "
        f"({p.interval.describe()}), but not whether by more than {1 - decode.material:.0%}. "
        f"A longer soak can tell.",
        findings,
        decode,
        case.cause,
    )


def _restart_slower(case: _Case) -> Decision | None:
    """Rule 4: the restart control on the pairs (net of the host, as the paired control is) shows the
    fresh engine materially faster than the aged one, where the comparisons within the engine's first
    life saw no change: the loss set in before their healthy side, or they missed it. "No engine age"
    would be wrong. (The fault matrix's expert-thrash on the engine with its C kernels: the expert
    cache drained within the healthy window, bins 1.00 (0.97-1.00), restart 0.76 (0.74-0.77), and the
    verdict was "no engine age, medium".) The bar is a verdict of no age's, not a loss's: the whole
    interval below 1 with a material estimate (an output-buffer fault set in at the second cycle,
    before any healthy side, pairs 0.94 through the run and the aged engine at 0.87 of its twin: a
    restart that shows that much must not be outvoted). Where no control ran, the restart on the log's
    own steps (which joins no combination: the fresh engine may have served lighter traffic) still
    vetoes a verdict of no age, never makes one of age: a vLLM step record of the step-cost fault,
    switched on from the engine's first minute, read bins 1.00 (0.96-1.04) and "no degradation,
    medium" while its restart read 0.38 (0.29-0.51) and a control beside it 0.68."""
    r, p, decode, findings = case.ev.restart, case.ev.paired, case.decode, case.findings
    assert decode is not None  # _no_interval
    if not (
        r is not None
        and (r.joins or p is None)
        and r.interval.bounded
        and r.interval.hi < 1.0
        and r.ratio <= r.material
    ):
        return None
    findings.append(
        Check(
            "restart_slower",
            CheckStatus.FAIL,
            f"the {r.detail} shows the engine materially faster just after the restart, where the comparison on "
            f"{claims.basis_words(decode)} within the first life did not show that loss "
            f"({decode.interval.describe()}): the slowdown may have set in before the healthy side of "
            f"the comparisons within the first life",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: just before the restart the engine ran slower than just after it "
        f"({r.interval.describe()}), a loss that the comparison on {claims.basis_words(decode)} within the engine's first life does not show "
        f"({decode.interval.describe()}). A soak that takes a baseline before its traffic "
        f"(`--baseline N`) compares with an engine younger than the loss.",
        findings,
        r,
        case.cause,
    )


def _too_wide(case: _Case) -> Decision | None:
    """Rule 4: the decisive interval must rule out a loss of LOW_FLOOR."""
    decode, findings = case.decode, case.findings
    assert decode is not None  # _no_interval
    if decode.interval.lo > LOW_FLOOR:
        return None
    findings.append(
        Check(
            "confidence",
            CheckStatus.FAIL,
            f"too few or too noisy samples: {decode.detail}; the interval holds both no loss "
            f"and a loss of more than {1 - LOW_FLOOR:.0%}",
        )
    )
    return Decision.insufficient(
        f"The data cannot tell: on {claims.basis_words(decode)}, "
        f"{decode.interval.describe()} cannot rule out a loss of {1 - LOW_FLOOR:.0%}.",
        findings,
        decode,
        case.cause,
    )


# Rule 4's vetoes, in order: each may end the question with `insufficient_data` (or, with no interval
# anywhere, with context growth); a verdict of no age stands only where none does.
_NO_AGE_VETOES = (
    _prefill_drift,
    _no_data,
    _short_span,
    _context_alone,
    _no_interval,
    _loss_without_cause,
    _decode_disagrees,
    _paired_slower,
    _restart_slower,
    _too_wide,
)


def _no_age(case: _Case) -> Decision:
    """Rule 4's verdict: no engine age, or context growth where raw throughput fell (or context
    slowed decode materially); a slowdown a fresh engine shared is the host's or the load's:
    throughput fell, but neither by context nor by age."""
    ev, decode = case.ev, case.decode
    assert decode is not None  # _no_interval
    fell = ev.raw_ratio is not None and ev.raw_ratio < RAW_DROP
    # Context slowed decode materially in this log even where the raw rate came back (each new
    # session starts short again): the user asked why it slowed, and context is the answer.
    effect = ev.context_effect if ev.context_effect is not None and ev.context_effect[0] < RAW_DROP else None
    by_context = effect is not None
    verdict = (
        Verdict.CONTEXT_ONLY if (fell or by_context) and case.cause != Cause.HOST_DRIFT else Verdict.NO_DEGRADATION
    )
    confidence = (
        Confidence.HIGH
        if decode.interval.lo > HIGH_FLOOR
        else Confidence.MEDIUM
        if decode.interval.lo > decode.material
        else Confidence.LOW
    )
    cause = case.cause or (Cause.CONTEXT_GROWTH if verdict == Verdict.CONTEXT_ONLY else None)
    on = claims.basis_words(decode)
    faster = (
        "the aged engine ran at least as fast as the fresh one after the restart"
        if decode.basis == Basis.RESTART
        else "the late engine ran at least as fast as the early one"
    )
    said = (
        f"on {on} {faster} ({decode.interval.describe()})"
        if decode.interval.lo >= 1.0
        else f"on {on} the data rule out a loss of more than {_share(1 - decode.interval.lo)} ({decode.interval.describe()})"
    )
    context = (
        f" Context explains what slowed: {effect[1]}."
        if effect is not None and verdict != Verdict.NO_DEGRADATION
        else ""
    )
    return Decision(
        verdict=verdict,
        basis=decode.basis,
        decisive=decode,
        decode=decode,
        cause=cause,
        confidence=confidence,
        # A loss the interval leaves open, below the material level or not, is said as such (a
        # possible 17 % loss is not the absence of one): "no engine age" only where even the
        # interval's low end stays above the material level.
        reason=f"{'No engine age' if decode.interval.lo > decode.material else 'Not shown to be engine age'}, "
        f"{confidence} confidence: {said}.{context}",
        findings=tuple(case.findings),
    )


def _share(loss: float) -> str:
    """A loss ruled out, as a percentage that does not round a real bound to 0 %."""
    return f"{loss:.0%}" if loss >= 0.01 else f"{loss:.1%}"
