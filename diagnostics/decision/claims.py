"""Which comparison a verdict's claim rests on, and whether it survives the controls the data hold
(rules 1, 2 and 3 of diagnostics.decision.verdict): the decisive decode comparison, the host's correction,
the restart and host-load controls, the prefill side, and the confidence of an age claim."""

from __future__ import annotations

import math

from diagnostics.evidence.combine import combine
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.gathered import (
    DRIFT_SPREAD,
    INFORMATIVE_SPAN,
    LOG_BASES,
    LOW_FLOOR,
    MARGIN,
    MIN_SPAN_S,
    UNCONTROLLED,
    Evidence,
    sane,
)
from diagnostics.labels import BASIS_WORDS, Basis, Cause, CheckStatus, Confidence
from diagnostics.result import Check


def basis_words(c: Comparison) -> str:
    """What a decode comparison is, in words: its basis, or the parts of the comparisons together."""
    if c.basis != Basis.COMBINED:
        return c.basis.replace("_", " ")
    return "the decode comparisons together (" + c.detail.split("(", 1)[1].split(")", 1)[0] + ")"


def decisive_decode(ev: Evidence, findings: list[Check]) -> Comparison | None:
    """The decode comparison a verdict of no age rests on: of the paired control, the restart
    control, the probes, the bins and the step series (each corrected for the host where there is
    a control), all together where two or more bound an interval (diagnostics.evidence.combine: each
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
    together = combine([c for c in informative if host_taken_out(c, ev)])
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
            Check(
                "decode_agreement",
                CheckStatus.WARN,
                "the decode comparisons disagree: widened so that all would hold at once, their "
                "intervals do not overlap ("
                + ", ".join(f"{BASIS_WORDS[b].name} {w.describe()}" for b, w in together.widened)
                + "); they did not measure the same thing",
            )
        )
    if ev.paired is not None and ev.paired.interval.bounded and ev.paired.interval.lo > LOW_FLOOR:
        return ev.paired
    return max(plausible or bounded, key=lambda c: c.interval.lo, default=None)


def measured(drift: Comparison) -> bool:
    """A control's drift that may correct a comparison: bounded, and within a factor of DRIFT_SPREAD."""
    return drift.interval.bounded and drift.interval.hi <= DRIFT_SPREAD * drift.interval.lo


def host_taken_out(c: Comparison, ev: Evidence) -> bool:
    """Whether `c` is net of the host: `host_corrected` divided it by a control's drift, or it is
    net by design (the paired control; the restart on the probes). Only with a control probed
    through the run."""
    if ev.control_drift is None:
        return False
    side = {Basis.STEP_SERIES: ev.step_drift, Basis.BINS: ev.bin_drift}.get(c.basis)
    return side is None or measured(side)


def host_corrected(ev: Evidence) -> Evidence:
    """With a young control probed through the run, every comparison of the soaked engine alone
    that times something (probes, step series, bins, prefill) is divided by the control's own
    drift: what slowed the host slowed the control as much. The step series and the bins are
    divided by the drift beside their own sides where the data give it (`step_drift`,
    `bin_drift`), and stay as they are where that drift is not `measured`."""
    host = ev.control_drift
    if host is None:
        return ev

    def fix(c: Comparison | None, drift: Comparison | None = None) -> Comparison | None:
        return c if c is None or not host_taken_out(c, ev) else c.corrected(drift or host)

    return ev._replace(
        probes=fix(ev.probes),
        steps=fix(ev.steps, ev.step_drift),
        bins=fix(ev.bins, ev.bin_drift),
        prefill=fix(ev.prefill),
    )


def drift_explains(raw: Evidence, ev: Evidence, findings: list[Check], unresolved: Comparison | None) -> Cause | None:
    """A loss the soaked engine showed alone that is gone once the host's drift is taken out: its
    estimate net of the host no longer a material loss, or the paired control ruling one out.
    (A prefill loss only where the corrected prefill rules the loss out: decode has the paired
    control besides, prefill nothing; `unresolved` is `drift_unresolved(raw, ev)`.)"""
    prefill = raw.prefill if unresolved is None else None
    alone = next(
        (c for c in (raw.probes, raw.steps if raw.onset_found else None, prefill) if c is not None and c.loss), None
    )
    if alone is None:
        return None
    corrected = {Basis.PROBES: ev.probes, Basis.STEP_SERIES: ev.steps}.get(alone.basis)
    paired_rules_out = ev.paired is not None and ev.paired.no_loss
    if not paired_rules_out and corrected is not None and corrected.ratio <= corrected.material:
        # Net of the host the estimate is still a material loss: the drift took the interval's
        # certainty away, not the loss. A loss the corrected interval shows is not the host's
        # either (other rules decided what it is).
        if not corrected.loss:
            findings.append(
                Check(
                    "fresh_control",
                    CheckStatus.WARN,
                    f"the soaked engine alone slowed ({alone.detail}); net of the host's drift "
                    f"{corrected.interval.describe()}, still a material loss by its estimate but not by "
                    f"its interval: the data cannot tell the host from the engine yet",
                )
            )
        return None
    said = "; ".join(c.detail for c in (ev.control_drift, ev.paired) if c is not None)
    findings.append(
        Check(
            "fresh_control",
            CheckStatus.WARN,
            f"the soaked engine alone slowed ({alone.detail}), but not against a fresh control "
            f"probed beside it ({said}): the host slowed, not the engine",
        )
    )
    return Cause.HOST_DRIFT


def drift_unresolved(raw: Evidence, ev: Evidence) -> Comparison | None:
    """A prefill loss the soaked engine showed alone that the host's drift, taken out, neither
    keeps nor rules out: the corrected prefill, or None. The drift measured loosely makes the
    corrected interval wide; the loss is then as likely the engine's as the host's, and a verdict
    of no age would rest on decode alone while prefill may be what aged. (eviction-scan on a quiet
    host: prefill 0.57, 0.50-0.64, over a control drift of 0.83, 0.59-1.17, corrected 0.69,
    0.43-1.08; the verdict was "no engine age" from decode.)"""
    if raw.prefill is None or not raw.prefill.loss or ev.prefill is None or ev.prefill is raw.prefill:
        return None
    return None if ev.prefill.loss or ev.prefill.no_loss else ev.prefill


def decode_claim(ev: Evidence, findings: list[Check]) -> tuple[Comparison | None, Cause | None]:
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
                Check(
                    "probes_alone",
                    CheckStatus.WARN,
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
                    Check(
                        "matched_conditions",
                        CheckStatus.WARN,
                        f"the step series shows a loss ({ev.steps.detail}) but identical probes rule "
                        f"one out ({ev.probes.detail})",
                    )
                )
            return None, None
    if ev.steps is None or not ev.onset_found or not ev.steps.loss:
        if ev.steps is not None and ev.onset_found and not ev.steps.loss:
            findings.append(
                Check(
                    "material_loss",
                    CheckStatus.WARN,
                    f"a segment of the step series ran materially slower, but everything after its "
                    f"start did not clear a material loss: {ev.steps.detail}",
                )
            )
        return None, None
    if ev.context not in ("fitted", "cannot_explain"):
        return None, Cause.CONTEXT_GROWTH if ev.context == "explains" else None
    if ev.bins is not None and ev.bins.no_loss:
        findings.append(
            Check(
                "matched_conditions",
                CheckStatus.WARN,
                f"the healthy model saw a slowdown but matched bins rule it out: {ev.bins.detail}",
            )
        )
        return None, None
    return ev.steps, None


def beyond_the_host(claim: Comparison, ev: Evidence, findings: list[Check]) -> Comparison | None:
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
        Check(
            "no_control",
            CheckStatus.WARN,
            f"decode slowed ({claim.detail}), but the data hold no control (no restart of the same "
            f"engine, no control probed beside it), and a loss that may be under "
            f"{1 - UNCONTROLLED:.0%} cannot be told from the host slowing; a restart in "
            f"the log, or a soak with a control (`soak run --target URL --control-target URL2`), "
            f"would tell",
        )
    )
    return None


def survives_controls(
    claim: Comparison, ev: Evidence, findings: list[Check], what: str
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
            Check(
                "fresh_control",
                CheckStatus.WARN,
                f"{what} slowed ({claim.detail}), but a fresh engine right after the restart was not "
                f"that much faster than the engine just before it ({ev.restart.detail}): the "
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
            Check(
                "fresh_control",
                CheckStatus.WARN,
                f"{what} slowed ({claim.detail}), but a fresh engine after the restart was not "
                f"shown to be materially faster than the engine just before it ({r.detail}): the data "
                f"cannot tell engine age from the host or the load slowing",
            )
        )
        return None, None
    if ev.host is not None and ev.host.rose and not host_taken_out(claim, ev):
        said = next((k for k, f in enumerate(findings) if f.name == "host_contention"), None)
        if said is not None:  # decode's claim said it already: one finding, both sides named
            findings[said] = findings[said]._replace(
                detail=f"{findings[said].detail}; {what} slowed too ({claim.detail})"
            )
            return None, Cause.HOST_DRIFT
        findings.append(
            Check(
                "host_contention",
                CheckStatus.WARN,
                f"{what} slowed ({claim.detail}) while {ev.host.describe()}; with no fresh control "
                f"probed beside it, that contention cannot be told from engine age",
            )
        )
        return None, Cause.HOST_DRIFT
    return claim, None


def side_claim(ev: Evidence, decode_claim: Comparison | None, findings: list[Check]) -> Comparison | None:
    """Rule 3: prefix reuse or prefill time, when decode shows no loss or only a contested one."""
    contested = (
        decode_claim is not None and decode_claim.basis == Basis.PROBES and ev.bins is not None and ev.bins.no_loss
    )
    if decode_claim is not None and not contested:
        return None
    side = None
    if ev.reuse is not None and ev.reuse.loss:
        side = ev.reuse
    elif ev.prefill is not None and ev.prefill.loss:
        side, _ = survives_controls(ev.prefill, ev, findings, "prefill")
    if side is not None and contested:
        assert decode_claim is not None and ev.bins is not None  # what `contested` says
        findings.append(
            Check(
                "decode_basis",
                CheckStatus.WARN,
                f"only identical probes show a decode loss ({decode_claim.detail}) and matched bins "
                f"rule one out ({ev.bins.detail}): the slowdown is placed on "
                f"{BASIS_WORDS[side.basis].name}, which shows it clearly",
            )
        )
    return side


def age_confidence(claim: Comparison) -> Confidence:
    return Confidence.HIGH if claim.interval.hi <= claim.material * MARGIN else Confidence.MEDIUM
