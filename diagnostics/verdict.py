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
   so), and the controls of rule 2 guard the verdict as they do without a control.
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
   diagnostics.combine; the narrower of that and the best one alone), else the one there is — must rule out a loss of LOW_FLOOR; otherwise the answer is `insufficient_data`. The verdict is
   then `context_growth_only` when raw throughput fell, else `no_degradation` (also when the
   fall was host or load drift: neither context nor age). With no interval anywhere but a
   context-only model that explains the slowdown, it is `context_growth_only`, low. A verdict of
   no age that rests on the log's own samples (step series, bins) needs them to span MIN_SPAN_S
   of engine time: a few windows a minute apart cannot show what hours of serving do
   (`insufficient_data`, failed `data_span` check).

A loss is a comparison whose whole interval lies at or below its material level (see
diagnostics.comparison). Confidence: engine age is `high` when the interval also clears the
material level by another 10 %, else `medium`; no age is `high` when the interval rules out a
loss of 5 %, `medium` a loss of 10 %, `low` a loss of 19 % (LOW_FLOOR).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, cast

from diagnostics.combine import NAMES, combine
from diagnostics.comparison import Comparison
from diagnostics.labels import Cause, Confidence, Verdict

CONTEXT_STATES = ("fitted", "explains", "cannot_explain", "cannot_say")
RAW_DROP = 0.9  # raw per-request throughput late / early below this: it "fell"
HIGH_FLOOR = 0.95  # no age with its interval above this: high confidence
LOW_FLOOR = 0.81  # ...above this: low confidence; at or below it the data cannot tell
INFORMATIVE_SPAN = 1 / LOW_FLOOR**2  # an interval wider than this (hi / lo) cannot rule out LOW_FLOOR wherever it lies
UNCONTROLLED = 0.85  # a loss read with no control in the data must clear this whole (_beyond_the_host)
MARGIN = 0.9  # engine age whose interval clears the material level by this factor again: high
SIDE_TEXT = {"prefix_reuse": "prefix reuse", "prefill": "prefill time"}
SIDE_BASES = tuple(SIDE_TEXT)  # claims of another kind than decode speed
DECODE_BASES = ("paired_control", "restart", "probes", "bins", "step_series", "combined")
SANE_RATIO = (0.02, 5.0)  # late over healthy beyond these: the matching failed, not the engine
MIN_SPAN_S = 300.0  # engine time a verdict of no age from the log's samples needs them to cover
LOG_BASES = ("bins", "step_series")  # comparisons made from the log's own decode samples
DRIFT_SPREAD = 2.0  # a control drift whose interval spans more than this factor corrects nothing


class HostLoad(NamedTuple):
    """CPU other than the engine's (the soak driver's and other tenants'), early and late in the
    first engine life, in percent of one core."""

    early: float
    late: float
    rise_limit: float = 30.0  # percent of one core

    @property
    def rose(self) -> bool:
        return self.late - self.early >= self.rise_limit

    def describe(self) -> str:
        return (
            f"CPU used beside the engine (soak driver and other processes) went from {self.early:.0f}% to "
            f"{self.late:.0f}% of a core"
        )


class Evidence(NamedTuple):
    paired: Comparison | None = None  # main over control probes, late cycles against early ones
    probes: Comparison | None = None  # the main engine's identical probes alone
    bins: Comparison | None = None
    steps: Comparison | None = None  # the step series around the onset (or late against healthy)
    onset_found: bool = False  # the step series has an onset
    context: str = "fitted"  # CONTEXT_STATES: could context alone explain the slowdown after the onset?
    reuse: Comparison | None = None
    prefill: Comparison | None = None
    control_drift: Comparison | None = None  # the control's own late over early probes: host speed
    # ... over the stretches the step series and the bins compare (controls.drift_between): what
    # corrects each of them, where the run has them.
    step_drift: Comparison | None = None
    bin_drift: Comparison | None = None
    restart: Comparison | None = None  # the aged engine just before a restart over the fresh one just after
    host: HostLoad | None = None
    raw_ratio: float | None = None  # last quarter's raw decode rate over the first quarter's
    no_data: str | None = None  # why neither steps nor probes can carry an analysis
    span_s: float | None = None  # engine time the usable decode samples cover
    unmatched: str | None = None  # why the step series found no matched conditions, when that is why
    # What context costs in this log, in words and as speed at the longest contexts served over the
    # shortest (diagnostics.context.context_effect): below RAW_DROP, context slowed decode materially.
    context_effect: tuple[float, str] | None = None


class Finding(NamedTuple):
    """A check the rules add, with its status and text."""

    name: str
    status: str
    detail: str


class Decision(NamedTuple):
    verdict: Verdict
    basis: str | None  # the comparison that decided: paired_control, probes, bins, step_series, prefix_reuse, prefill
    decisive: Comparison | None
    decode: Comparison | None  # the decode comparison the slowdown figures come from
    cause: Cause | None
    confidence: Confidence | None  # None for insufficient_data
    reason: str  # one sentence: how sure, and on what
    findings: tuple[Finding, ...]

    @classmethod
    def insufficient(
        cls, reason: str, findings: list[Finding], decode: Comparison | None = None, cause: Cause | None = None
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


def sane(c: Comparison | None) -> bool:
    """Whether a comparison (None: none) reads within SANE_RATIO, where an engine compared with
    itself can read."""
    return c is None or not math.isfinite(c.ratio) or SANE_RATIO[0] <= c.ratio <= SANE_RATIO[1]


def decide(ev: Evidence) -> Decision:
    findings: list[Finding] = []
    insane = {name: c for name in ("paired", "restart", "probes", "bins", "steps") if not sane(c := getattr(ev, name))}
    lo, hi = SANE_RATIO
    said = "; ".join(f"{c.basis.replace('_', ' ')} reads {c.ratio:.3g}" for c in insane.values())
    probes = ("paired", "probes")
    if insane and not insane.keys() & set(probes) and any(getattr(ev, name) is not None for name in probes):
        # Identical probes cannot be matched wrongly; samples of the engine's own work can. (A
        # llama.cpp whose slots filled in its first minute: a healthy model fitted on slow steps,
        # and a restart on the step series that read 0.018, beside probes that read 0.16.)
        findings.append(
            Finding(
                "ratio_sanity",
                "warn",
                f"late over healthy at matched conditions must lie within {lo:g}-{hi:g}, but {said}: "
                f"those samples were not alike (the matching failed); set aside, the identical "
                f"probes decide",
            )
        )
        ev = ev._replace(**cast(dict[str, Any], dict.fromkeys(insane)))
        insane = {}
    if insane:
        findings.append(
            Finding(
                "ratio_sanity",
                "fail",
                f"late over healthy at matched conditions must lie within {lo:g}-{hi:g}, but {said}: "
                f"the matching failed (samples of different work compared), not a measure of the "
                f"engine",
            )
        )
        return Decision.insufficient(
            f"The data cannot tell: the matching failed ({said}, outside {lo:g}-{hi:g}).", findings
        )
    d = ev.control_drift
    if d is not None and not (d.interval.bounded and d.interval.hi <= DRIFT_SPREAD * d.interval.lo):
        # A correction must be measured itself: two probes a side of a control on a busy host can
        # read anything (0.18-7.77 once), and dividing by that erases any loss.
        findings.append(
            Finding(
                "control_drift",
                "warn",
                f"{d.detail}: the host's drift is not measured to within a factor of "
                f"{DRIFT_SPREAD:g}; nothing is corrected by it, and the restart rule and the host "
                f"contention check guard the verdict instead",
            )
        )
        ev = ev._replace(control_drift=None)
    raw = ev
    ev = _host_corrected(ev)
    for c in (ev.paired, ev.probes):
        if c is not None and c.clears and not c.loss:
            findings.append(
                Finding(
                    "too_few_for_loss",
                    "warn",
                    f"{c.detail}: an interval that clears the material level, but on "
                    f"{min(c.num_early, c.num_late)} a side; a loss needs {c.min_for_loss}",
                )
            )
    decode = _decisive_decode(ev, findings)
    claim, cause = _decode_claim(ev, findings)
    if claim is not None and claim.basis != "paired_control":
        claim, cause = _survives_controls(claim, ev, findings, "decode")
    if claim is not None and claim.basis in LOG_BASES:
        claim = _beyond_the_host(claim, ev, findings)
    if claim is None and cause is None and (ev.control_drift is not None or ev.paired is not None):
        cause = _drift_explains(raw, ev, findings)
    side = _side_claim(ev, claim, findings)
    if side is not None:
        claim = side
        cause = Cause.ENGINE_AGE
    if claim is not None:
        if claim.basis in DECODE_BASES:
            decode = claim
        confidence = _age_confidence(claim)
        return Decision(
            verdict=Verdict.AGE,
            basis=claim.basis,
            decisive=claim,
            decode=decode,
            cause=Cause.ENGINE_AGE,
            confidence=confidence,
            reason=f"Engine age, {confidence} confidence: {claim.detail}.",
            findings=tuple(findings),
        )
    if ev.no_data is not None and decode is None:
        return Decision.insufficient(f"The data cannot tell: {ev.no_data}.", findings)
    fell = ev.raw_ratio is not None and ev.raw_ratio < RAW_DROP
    # Context slowed decode materially in this log even where the raw rate came back (each new
    # session starts short again): the user asked why it slowed, and context is the answer.
    effect = ev.context_effect if ev.context_effect is not None and ev.context_effect[0] < RAW_DROP else None
    by_context = effect is not None
    if (decode is None or set(decode.bases) <= set(LOG_BASES)) and ev.span_s is not None and ev.span_s < MIN_SPAN_S:
        findings.append(
            Finding(
                "data_span",
                "fail",
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
            cause,
        )
    if decode is None and ev.context == "explains":
        return Decision(
            verdict=Verdict.CONTEXT_ONLY,
            basis="step_series",
            decisive=None,
            decode=None,
            cause=Cause.CONTEXT_GROWTH,
            confidence=Confidence.LOW,
            reason="Context growth, low confidence: the most generous context-only model explains the "
            "slowdown (context_only_model), and no matched comparison has enough samples for an "
            "interval.",
            findings=tuple(findings),
        )
    if decode is None:
        why = ev.unmatched or "no matched comparison has enough samples for an interval"
        findings.append(Finding("data", "fail", why))
        return Decision.insufficient(f"The data cannot tell: {why}.", findings, cause=cause)
    if decode.interval.lo <= LOW_FLOOR and decode.clears:
        # The interval shows a loss, but no rule let it be engine age's (context unknown, no control,
        # a comparison that disagrees): say that, not that the interval is too wide.
        warned = [f.name for f in findings if f.status == "warn"]
        if ev.context not in ("fitted", "cannot_explain"):
            warned.append("context could explain it: the samples hold too few context figures to test that")
        findings.append(
            Finding(
                "confidence",
                "fail",
                f"a loss without a cause: {decode.detail}; engine age is not shown "
                f"({'; '.join(warned) or 'no rule claims it'})",
            )
        )
        return Decision.insufficient(
            f"The data cannot tell: on {_on(decode)}, "
            f"{decode.interval.describe()} shows a slowdown, but not that engine age caused "
            f"it ({'; '.join(warned) or 'no rule claims it'}).",
            findings,
            decode,
            cause,
        )
    if decode.interval.lo <= LOW_FLOOR:
        findings.append(
            Finding(
                "confidence",
                "fail",
                f"too few or too noisy samples: {decode.detail}; the interval holds both no loss "
                f"and a loss of more than {1 - LOW_FLOOR:.0%}",
            )
        )
        return Decision.insufficient(
            f"The data cannot tell: on {_on(decode)}, "
            f"{decode.interval.describe()} cannot rule out a loss of {1 - LOW_FLOOR:.0%}.",
            findings,
            decode,
            cause,
        )
    # A slowdown a fresh engine shared is the host's or the load's: throughput fell, but neither
    # by context nor by age.
    verdict = Verdict.CONTEXT_ONLY if (fell or by_context) and cause != Cause.HOST_DRIFT else Verdict.NO_DEGRADATION
    confidence = (
        Confidence.HIGH
        if decode.interval.lo > HIGH_FLOOR
        else Confidence.MEDIUM
        if decode.interval.lo > decode.material
        else Confidence.LOW
    )
    cause = cause or (Cause.CONTEXT_GROWTH if verdict == Verdict.CONTEXT_ONLY else None)
    on = _on(decode)
    faster = (
        "the aged engine ran at least as fast as the fresh one after the restart"
        if decode.basis == "restart"
        else "the late engine ran at least as fast as the early one"
    )
    said = (
        f"on {on} {faster} ({decode.interval.describe()})"
        if decode.interval.lo >= 1.0
        else f"on {on} the data rule out a loss of more than {1 - decode.interval.lo:.0%} ({decode.interval.describe()})"
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
        reason=f"No engine age, {confidence} confidence: {said}.{context}",
        findings=tuple(findings),
    )


def _on(c: Comparison) -> str:
    """What a decode comparison is, in words: its basis, or the parts of the comparisons together."""
    if c.basis != "combined":
        return c.basis.replace("_", " ")
    return "the decode comparisons together (" + c.detail.split("(", 1)[1].split(")", 1)[0] + ")"


def _decisive_decode(ev: Evidence, findings: list[Finding]) -> Comparison | None:
    """The decode comparison a verdict of no age rests on: of the paired control, the restart
    control, the probes, the bins and the step series (each corrected for the host where there is
    a control), all together where two or more bound an interval (diagnostics.combine: each
    widened so that all hold at once, intersected); the one there is otherwise; where they
    disagree, the paired control when it alone rules out a loss of LOW_FLOOR, else the one whose
    interval rules out the most."""
    # The step series is measured against a healthy model; when context explains what it shows,
    # it says nothing about age.
    steps = ev.steps if ev.context != "explains" else None
    bounded = [
        c
        for c in (ev.paired, ev.restart, ev.probes, ev.bins, steps)
        if c is not None and c.interval.bounded and sane(c)
    ]
    # The log's own samples over less than MIN_SPAN_S cannot rule age out (decide): where another
    # comparison can speak, they do not compete with it.
    if ev.span_s is not None and ev.span_s < MIN_SPAN_S and any(c.basis not in LOG_BASES for c in bounded):
        bounded = [c for c in bounded if c.basis not in LOG_BASES]
    # One that shows the late engine materially *faster* compared unlike with unlike (a fresh
    # engine still warming, windows of other work): it decides only where nothing else can.
    plausible = [c for c in bounded if c.interval.lo <= 1 / c.material]
    # Only those narrow enough to rule out a loss of LOW_FLOOR on their own, wherever they lie:
    # each one counted widens all the others, and a wide one adds nothing to the intersection.
    # (Chosen by width, not by where the interval lies: the coverage stays.)
    informative = [
        c for c in plausible if c.joins and c.interval.lo > 0 and c.interval.hi / c.interval.lo <= INFORMATIVE_SPAN
    ]
    # Together only where every one of them is net of the host: with a control probed through the
    # run (the probes, bins and step series divided by its drift; the paired control and the
    # restart on the probes are net of it by design). Without one, the log's own samples measure
    # the host's change with the engine's, and a restart does not: they are not the same quantity.
    together = combine(informative if ev.control_drift is not None else [])
    if together.comparison is not None:
        # Of each alone and all together, the narrowest (by its span, hi / lo: chosen by width, not
        # by where it lies, so the chosen one still holds at its level): together they are
        # narrower where the others add to what the best one knows (a long soak's tight bins and
        # restart), and wider where each one counted only widens the best (Bonferroni's cost).
        return min([*informative, together.comparison], key=lambda c: c.interval.hi / c.interval.lo)
    if len(informative) == 1:
        return informative[0]
    if together.widened:
        findings.append(
            Finding(
                "decode_agreement",
                "warn",
                "the decode comparisons disagree: widened so that all would hold at once, their "
                "intervals do not overlap ("
                + ", ".join(f"{NAMES.get(b, b)} {w.describe()}" for b, w in together.widened)
                + "); they did not measure the same thing",
            )
        )
    if ev.paired is not None and ev.paired.interval.bounded and ev.paired.interval.lo > LOW_FLOOR:
        return ev.paired
    return max(plausible or bounded, key=lambda c: c.interval.lo, default=None)


def _host_corrected(ev: Evidence) -> Evidence:
    """With a young control probed through the run, every comparison of the soaked engine alone
    that times something (probes, step series, bins, prefill) is divided by the control's own
    drift: what slowed the host slowed the control as much."""
    host = ev.control_drift
    if host is None:
        return ev

    def fix(c: Comparison | None, drift: Comparison | None = None) -> Comparison | None:
        return None if c is None else c.corrected(drift or host)

    return ev._replace(
        probes=fix(ev.probes),
        steps=fix(ev.steps, ev.step_drift),
        bins=fix(ev.bins, ev.bin_drift),
        prefill=fix(ev.prefill),
    )


def _drift_explains(raw: Evidence, ev: Evidence, findings: list[Finding]) -> Cause | None:
    """A loss the soaked engine showed alone that is gone once the host's drift is taken out."""
    alone = next(
        (c for c in (raw.probes, raw.steps if raw.onset_found else None, raw.prefill) if c is not None and c.loss), None
    )
    if alone is None:
        return None
    said = "; ".join(c.detail for c in (ev.control_drift, ev.paired) if c is not None)
    findings.append(
        Finding(
            "fresh_control",
            "warn",
            f"the soaked engine alone slowed ({alone.detail}), but not against a fresh control "
            f"probed beside it ({said}): the host slowed, not the engine",
        )
    )
    return Cause.HOST_DRIFT


def _decode_claim(ev: Evidence, findings: list[Finding]) -> tuple[Comparison | None, Cause | None]:
    """Rule 1: the decode comparison that shows a material loss, if any; and a cause when a loss
    the main engine showed alone was host drift."""
    if ev.paired is not None and ev.paired.loss:
        return ev.paired, None
    if ev.paired is not None and ev.paired.no_loss:
        return None, None  # whatever the soaked engine showed alone, the host showed too (_drift_explains)
    if ev.probes is not None and ev.probes.interval.bounded:
        if ev.probes.loss and ev.paired is not None and ev.paired.interval.bounded:
            # The paired cycles are these probes with the host's drift taken out at each moment: where
            # they cannot tell yet, the probes alone are the host as much as the engine. (Watched at
            # every cycle, a healthy engine's probes alone read 0.70, 0.54-0.90, at a look where its
            # paired ratios had not moved.)
            findings.append(
                Finding(
                    "probes_alone",
                    "warn",
                    f"the soaked engine's probes alone show a loss ({ev.probes.detail}), but the "
                    f"paired control cannot tell yet ({ev.paired.detail}): how much of it is the "
                    f"host's is not known",
                )
            )
        elif ev.probes.loss:
            return ev.probes, None
        if ev.probes.no_loss:
            if ev.steps is not None and ev.steps.loss and ev.onset_found:
                findings.append(
                    Finding(
                        "matched_conditions",
                        "warn",
                        f"the step series shows a loss ({ev.steps.detail}) but identical probes rule "
                        f"one out ({ev.probes.detail})",
                    )
                )
            return None, None
    if ev.steps is None or not ev.onset_found or not ev.steps.loss:
        if ev.steps is not None and ev.onset_found and not ev.steps.loss:
            findings.append(
                Finding(
                    "material_loss",
                    "warn",
                    f"a segment of the step series ran materially slower, but everything after its "
                    f"start did not clear a material loss: {ev.steps.detail}",
                )
            )
        return None, None
    if ev.context not in ("fitted", "cannot_explain"):
        return None, Cause.CONTEXT_GROWTH if ev.context == "explains" else None
    if ev.bins is not None and ev.bins.no_loss:
        findings.append(
            Finding(
                "matched_conditions",
                "warn",
                f"the healthy model saw a slowdown but matched bins rule it out: {ev.bins.detail}",
            )
        )
        return None, None
    return ev.steps, None


def _beyond_the_host(claim: Comparison, ev: Evidence, findings: list[Finding]) -> Comparison | None:
    """A loss read from a log's own samples, with no control in the data at all (no restart of the
    same engine, no control probed beside it), must be larger than a host alone makes: its whole
    interval at or below UNCONTROLLED (a loss of at least 15 %). A phone that heats, a neighbour's
    load, a shared host's 35-55 tok/s from run to run: a smaller loss with nothing to compare it
    with cannot be told from them. (A phone's llama.cpp log read 0.75, 0.63-0.89, with no restart
    of the same build; a simulated creep of 5-8 %/h over six hours reads 0.80, 0.78-0.82.)"""
    if ev.restart is not None or ev.paired is not None or ev.control_drift is not None:
        return claim
    if claim.interval.bounded and claim.interval.hi <= UNCONTROLLED:
        return claim
    findings.append(
        Finding(
            "no_control",
            "warn",
            f"decode slowed ({claim.detail}), but the data hold no control (no restart of the same "
            f"engine, no control probed beside it), and a loss that may be under "
            f"{1 - UNCONTROLLED:.0%} cannot be told from the host slowing; a restart in "
            f"the log, or a soak with a control (`soak run --target URL --control-target URL2`), "
            f"would tell",
        )
    )
    return None


def _survives_controls(
    claim: Comparison, ev: Evidence, findings: list[Finding], what: str
) -> tuple[Comparison | None, Cause | None]:
    """Rule 2: a loss seen on one engine alone against the restart and host contention. The
    restart comparisons measure decode: they judge a decode claim only (a prefill claim has no
    restart of its own to compare, and decode can hold while admissions slow)."""
    if what != "decode":
        ev = ev._replace(restart=None)
    # The restart must not rule out that a fresh engine recovers at least half the claimed loss
    # (on the log scale): its whole interval above sqrt(claim) says the fresh engine was nowhere
    # near as much faster as age would make it.
    if ev.restart is not None and ev.restart.interval.bounded and ev.restart.interval.lo > math.sqrt(claim.ratio):
        findings.append(
            Finding(
                "fresh_control",
                "warn",
                f"{what} slowed ({claim.detail}), but a fresh engine right after the restart was not "
                f"that much faster than the aged one just before it ({ev.restart.detail}): the "
                f"slowdown is the host's or the load's, not the engine's age",
            )
        )
        return None, Cause.HOST_DRIFT
    # A restart that does not show the fresh engine materially faster, and rules out that it was
    # as much faster as the claimed loss, leaves the claim unconfirmed: engine age is what a
    # restart takes away, and this one took away less than was claimed. (A restart too noisy to
    # rule that out says nothing either way.)
    r = ev.restart
    if r is not None and r.interval.bounded and not r.loss and r.interval.lo > claim.ratio:
        findings.append(
            Finding(
                "fresh_control",
                "warn",
                f"{what} slowed ({claim.detail}), but a fresh engine after the restart was not "
                f"shown to be materially faster than the aged one ({r.detail}): the data "
                f"cannot tell engine age from the host or the load slowing",
            )
        )
        return None, None
    if ev.host is not None and ev.host.rose and ev.control_drift is None:
        findings.append(
            Finding(
                "host_contention",
                "warn",
                f"{what} slowed ({claim.detail}) while {ev.host.describe()}; with no fresh control "
                f"probed beside it, that contention cannot be told from engine age",
            )
        )
        return None, Cause.HOST_DRIFT
    return claim, None


def _side_claim(ev: Evidence, decode_claim: Comparison | None, findings: list[Finding]) -> Comparison | None:
    """Rule 3: prefix reuse or prefill time, when decode shows no loss or only a contested one."""
    contested = decode_claim is not None and decode_claim.basis == "probes" and ev.bins is not None and ev.bins.no_loss
    if decode_claim is not None and not contested:
        return None
    side = None
    if ev.reuse is not None and ev.reuse.loss:
        side = ev.reuse
    elif ev.prefill is not None and ev.prefill.loss:
        side, _ = _survives_controls(ev.prefill, ev, findings, "prefill")
    if side is not None and contested:
        assert decode_claim is not None and ev.bins is not None  # what `contested` says
        findings.append(
            Finding(
                "decode_basis",
                "warn",
                f"only identical probes show a decode loss ({decode_claim.detail}) and matched bins "
                f"rule one out ({ev.bins.detail}): the slowdown is placed on "
                f"{SIDE_TEXT[side.basis]}, which shows it clearly",
            )
        )
    return side


def _age_confidence(claim: Comparison) -> Confidence:
    return Confidence.HIGH if claim.interval.hi <= claim.material * MARGIN else Confidence.MEDIUM
