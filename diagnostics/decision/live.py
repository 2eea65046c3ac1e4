"""The running verdict a soak prints after every probe cycle: what the probes so far say, and
whether that is decided.

Only the probes (and the paired control, where the run has one) are read, so it costs nothing
however long the run; `diag analyze` on the run directory weighs everything else too. Every
look takes its intervals at the level that keeps all the looks a soak plans valid together
(diagnostics.evidence.sequential), so a user who watches every cycle, or `soak run --until-decided`
stopping at the first decided one, is wrong no more often than one look at the end would be.

Decided means, of the decode comparisons the probes make (the paired control where the run has
one, else the identical probes alone), on at least four cycles a side:

- **age**: engine age at medium or high confidence (a material loss, the whole interval at or
  below the material level, with enough cycles a side);
- **no age**: no degradation with the decisive interval wholly above 1 - `rule_out` (a loss of
  more than `rule_out` ruled out; by default the material level, 10 %), never while the control
  shows age of its own (diagnostics.evidence.youth). Whether its youth was verified (a restart of
  it with cycles on both sides) is `Running.youth`: a soak stops on "no age" only once it was.

A soak asks `RunningJudge` after every cycle (it answers soak.judge.Judge).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pandas as pd

from diagnostics.decision import caps
from diagnostics.decision.verdict import Decision, decide
from diagnostics.evidence import controls, sequential
from diagnostics.evidence import youth as youth_mod
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.gathered import Evidence
from diagnostics.labels import Cause, Confidence, ControlYouth, Verdict
from rundir.rows import ProbeRow

AGE = Verdict.AGE
NO_AGE = Verdict.NO_DEGRADATION
RULE_OUT = 1 - DECODE_MATERIAL  # the loss a decided "no age" must rule out, by default


class Running(NamedTuple):
    """One look at the probes so far."""

    line: str  # "verdict so far: ...", as printed
    verdict: str | None  # None with too few probes
    decided: str | None  # AGE or NO_AGE once decided at the requested level, else None
    looks: int  # looks taken so far (paired cycles, or main probes, less the first three)
    level: float  # the level every look's intervals are taken at
    onset_cycle: int | None = None  # with decided age: the probe cycle where the loss set in
    ratio: float | None = None  # the decisive comparison's late-over-healthy ratio
    interval: tuple[float, float] | None = None
    youth: ControlYouth | None = None  # whether the control stayed young (None: no control probed beside it)
    looks_planned: int = 0  # the looks the soak plans (the level holds over these or the looks taken, the more)

    @property
    def awaits_young_control(self) -> bool:
        """Decided "no age" beside a control whose youth is not verified yet: it stands once a
        restart of the control showed the fresh one no faster."""
        return self.decided == NO_AGE and self.youth not in (None, ControlYouth.VERIFIED)

    @property
    def details(self) -> dict[str, Any]:
        """What a soak keeps beside a decided look (its manifest's `decided`)."""
        return {"looks_planned": self.looks_planned, "level": round(self.level, 5), "onset_cycle": self.onset_cycle}


class RunningJudge:
    """The running verdict as a soak asks it after every probe cycle (soak.judge.Judge): every
    look's intervals valid over all the looks a soak of `duration_s`, probed every
    `probe_every_s`, plans."""

    def __init__(
        self, duration_s: float, probe_every_s: float, baseline_cycles: int = 0, rule_out: float = RULE_OUT
    ) -> None:
        self.looks_planned = sequential.looks_planned(duration_s, probe_every_s)
        self.rule_out = rule_out
        # Simulated once now, before any engine runs (a baseline: the start cycle and its own).
        sequential.level_for(self.looks_planned, baseline=baseline_cycles + 1 if baseline_cycles else 0)

    def look(self, probes: list[ProbeRow]) -> Running:
        """The verdict on every probe row so far (the run directory's probes table, as written)."""
        return running_verdict(pd.DataFrame(probes), self.looks_planned, self.rule_out)


def running_verdict(probes: pd.DataFrame, looks_planned: int = 0, rule_out: float = RULE_OUT) -> Running:
    """The verdict on the probes so far (columns of the run directory's probes table, with the
    optional `role` and `cycle`), its intervals valid over max(looks_planned, looks so far) looks."""
    rows = controls.probe_rows(probes)
    return look(rows, controls.pairs(rows), looks_planned, rule_out)


def look(rows: pd.DataFrame, cycles: pd.DataFrame, looks_planned: int = 0, rule_out: float = RULE_OUT) -> Running:
    """`running_verdict` on probe rows and paired cycles already taken apart (controls.probe_rows,
    controls.pairs): what a benchmark that looks at every prefix of one run calls."""
    series, _ = controls.probe_series(rows, cycles)
    base = controls.baseline(series)
    looks = (
        sequential.looks_after_baseline(len(series) - base) if base else max(0, len(series) - sequential.MIN_CYCLES + 1)
    )
    if base and not looks:  # no boundary to simulate for a baseline still growing
        return Running(
            line=f"verdict so far: a baseline of {base} cycles and {len(series) - base} since; the first look "
            f"at {sequential.BASELINE_FIRST} since",
            verdict=None,
            decided=None,
            looks=0,
            level=1 - sequential.ALPHA,
            looks_planned=looks_planned,
        )
    level = sequential.level_for(max(looks_planned, looks), baseline=base)
    # The control's youth at the one look's level, not the running level: what it guards is a
    # decided "no age", and a wider interval would let a control that probably slowed carry one.
    youth = youth_mod.measure(cycles)
    evidence = Evidence(
        paired=controls.paired(cycles, level),
        probes=controls.probes(rows, level),
        control_drift=controls.control_drift(cycles, level),
        restart=controls.restart(rows, cycles),
        youth=youth,
        paired_fresh=controls.paired_fresh(cycles, youth, level),
    )
    if evidence.paired is None and evidence.probes is None:
        return Running(
            line=f"verdict so far: too few probes ({len(rows)} ok) to compare early with late",
            verdict=None,
            decided=None,
            looks=looks,
            level=level,
            youth=youth.status if youth is not None else None,
            looks_planned=looks_planned,
        )
    d = decide(evidence)
    shown = d.decisive or evidence.paired or evidence.probes
    assert shown is not None  # the paired control or the probes, at least (above)
    aging = youth is not None and youth.aging
    # Beside a control that aged only the fresh pairs decide, and never "no age" (diagnostics.decision.verdict).
    decided = _decided(d, shown, rule_out, None if aging else evidence.paired)
    onset = _onset_cycle(rows, cycles) if decided == AGE else None
    how = _confidence(d)
    cause = "; host or load drift, not age" if d.cause == Cause.HOST_DRIFT else ""
    line = f"verdict so far: {d.verdict}{how} ({shown.basis.replace('_', ' ')} {shown.interval.describe()}){cause}"
    if decided == AGE:
        line += "; decided: engine age" + (f" from cycle {onset}" if onset is not None else "")
    elif decided == NO_AGE:
        line += f"; decided: a loss of more than {rule_out:.0%} ruled out"
    if aging:
        assert youth is not None and youth.shown is not None
        line += f"; the control aged ({youth.shown.interval.describe()})"
    i = shown.interval
    return Running(
        line=line,
        verdict=d.verdict,
        decided=decided,
        looks=looks,
        level=level,
        onset_cycle=onset,
        ratio=i.estimate,
        interval=(i.lo, i.hi) if i.bounded else None,
        youth=youth.status if youth is not None else None,
        looks_planned=looks_planned,
    )


def _confidence(d: Decision) -> str:
    """`, medium confidence` and why it is not high. The line never says high: it reads the probes
    alone, and the analysis of the whole run caps a high confidence wherever a check of the other
    data warns (diagnostics.decision.caps), so a high here could be taken back (seen in a demo: high at one
    cycle, medium in the final verdict). Where the probes' own rules warn, the line names them; where
    a side holds too few cycles for its interval to say how sure, it is low (diagnostics.decision.caps.thin),
    as the analysis of the whole run says."""
    if not d.confidence:
        return ""
    confidence, thin = caps.thin(d.confidence, d.decisive)
    if thin is not None:
        return f", {confidence} confidence (too few cycles a side to say how sure)"
    if d.confidence != Confidence.HIGH:
        return f", {d.confidence} confidence"
    warned = caps.data_warnings(d.verdict, d.findings)
    why = f"{', '.join(warned)} warn" if warned else "`diag analyze` says high once the rest of the data checks out"
    return f", {Confidence.MEDIUM} confidence (high by its interval; {why})"


def _decided(d: Decision, shown: Comparison, rule_out: float, paired: Comparison | None = None) -> str | None:
    # Either way on at least MIN_FOR_LOSS cycles a side: two cycles seconds apart can agree by
    # chance and give an interval that looks tight and is not (seen live: ratios of 0.970, 0.970
    # against 0.927, 0.927 read 0.95-0.96 at the running level and "decided" in 41 s).
    # Where a control was probed beside the engine, only the paired cycles decide, either way: the
    # soaked engine's probes alone hold the host's drift (a host that sped up hides a loss).
    judged = paired if paired is not None else shown
    if judged is None or min(judged.num_early, judged.num_late) < controls.MIN_FOR_LOSS:
        return None
    if d.verdict == AGE and d.confidence in (Confidence.MEDIUM, Confidence.HIGH) and d.basis == judged.basis:
        return AGE
    if d.verdict == NO_AGE and judged.interval.bounded and judged.interval.lo > 1 - rule_out:
        return NO_AGE
    return None


def _onset_cycle(rows: pd.DataFrame, cycles: pd.DataFrame) -> int | None:
    """The probe cycle where the paired ratio (else the main probes' rate) first runs materially low."""
    series, value = controls.probe_series(rows, cycles)
    at = controls.probe_onset(series.reset_index(drop=True), value)
    if at is None:
        return None
    cycle = series["cycle"].iloc[at] if "cycle" in series else None
    return int(cycle) if cycle is not None and pd.notna(cycle) else int(at)
