"""The analysis result as typed objects; `Analysis.to_dict()` is the JSON of shared/DESIGN.md."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence.changepoint import ChangePoints
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.healthy import HealthyModel
from diagnostics.evidence.intervals import LEVEL, Interval
from diagnostics.evidence.prefill import PrefillComparison
from diagnostics.evidence.reuse import ReuseComparison
from diagnostics.evidence.trend import PerHour
from diagnostics.labels import Basis, Cause, CheckStatus, Confidence, Verdict
from diagnostics.source.identity import LifeIdentity

RESULT_SCHEMA_VERSION = 1
VERDICTS = tuple(Verdict)
STATUSES = tuple(CheckStatus)


class Slowdown(NamedTuple):
    """Three figures from one comparison (`basis`), so that they always agree: degraded_tps is
    healthy_tps times ratio, the rate now at the healthy conditions. `per_hour` and `shape` come
    from the step series (diagnostics.evidence.trend)."""

    ratio: float  # latest over healthy at matched conditions on `basis` (below 1 is slower)
    # The healthy side's level on the basis (geometric mean of probes, median of samples) and
    # healthy_tps * ratio; None for a claim of another kind than decode speed (prefix reuse, prefill).
    healthy_tps: float | None
    degraded_tps: float | None
    basis: Basis  # the comparison the figures come from (diagnostics.evidence.comparison)
    lo: float | None = None  # the ratio's interval (diagnostics.evidence.intervals.LEVEL)
    hi: float | None = None
    per_hour: PerHour | None = None  # decode speed's change per hour of engine age, with its interval
    shape: str | None = None  # step or gradual (an engine-age slowdown only)
    level: float = LEVEL  # the interval's level (a run stopped at a decided look keeps the running level)

    def interval_text(self, none: str = "") -> str:
        """` (90% interval 0.74-0.88)`, or `none` without an interval."""
        if self.lo is None or self.hi is None:
            return none
        return f" ({Interval(self.ratio, self.lo, self.hi, self.level).span()})"


class Trigger(NamedTuple):
    kind: str  # prefill_append, prefill, dropped_request, preemption, fault_on, ...
    t: np.datetime64
    new_tokens: int | None
    cached_tokens: int | None
    detail: str


class Onset(NamedTuple):
    t: np.datetime64
    engine_age_s: float
    engine_life: int
    trigger: Trigger | None
    # The window the change is known to lie in: from the last healthy sample to the first degraded
    # one (a creep: how long its trend had been rising when it stood out). None: not a step series.
    window_s: float | None = None


class Suspect(NamedTuple):
    name: str
    score: float  # 0..1: share of wall time a time counter added, or |rank correlation| with the residual
    evidence: str


class Check(NamedTuple):
    """A check: a finding of the data checks (diagnostics.decision.checks) or of the rules that decide (diagnostics.decision.verdict,
    diagnostics.decision.claims), with its status and its text in numbers."""

    name: str
    status: CheckStatus
    detail: str


@dataclass(frozen=True, kw_only=True)
class Analysis:
    verdict: Verdict
    slowdown: Slowdown | None
    onset: Onset | None
    recovered_by_restart: bool | None
    suspects: tuple[Suspect, ...]
    checks: tuple[Check, ...]
    # What the report plots: every decode sample with its residual, the model, the segments.
    samples: pd.DataFrame
    model: HealthyModel | None
    changepoints: ChangePoints | None
    comparisons: tuple[Comparison, ...]  # every comparison made, deciding or not
    source_path: str
    source_kind: str
    engine: str
    # Prefix reuse of continuation turns, early against late (diagnostics.evidence.reuse), when the run
    # records it; `age_basis` says what carried an engine_age_degradation verdict; `prefill`
    # compares prefill time at matched new-token counts.
    prefix_reuse: ReuseComparison | None = None
    age_basis: str = "decode"  # decode (steps and probes), prefix_reuse or prefill
    prefill: PrefillComparison | None = None  # prefill time at matched new-token counts (diagnostics.evidence.prefill)
    # How sure (diagnostics.decision.verdict): high, medium, low, or None for insufficient_data; the
    # comparison that decided; host_or_load_drift when a slowdown was not the engine's age; and
    # the verdict in one sentence.
    confidence: Confidence | None = None
    basis: Basis | None = None
    cause: Cause | None = None
    reason: str = ""
    probe_pairs: pd.DataFrame | None = (
        None  # one row per probe cycle with a control (diagnostics.evidence.controls.pairs)
    )
    # The batch-and-context bands the `bins` comparison compared: num_running_reqs, context_lo, context_hi,
    # num_early, early_tps, num_late, late_tps (diagnostics.evidence.decode).
    bands: pd.DataFrame | None = None
    # Decode's own figures beside an age claim on prefix reuse or prefill time (`slowdown` is the claim's).
    decode_held: Slowdown | None = None
    # The clock of the source's times: wall (a time of day), relative (since the engine started) or
    # busy (engine busy time, a log without stamps); `dated` False when times are no time of day,
    # so that an onset is said in engine time, never as a 1970 date.
    clock: str = "wall"
    dated: bool = True
    lives: tuple[LifeIdentity, ...] = ()  # each engine life's identity

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        for check in self.checks:
            if check.status not in STATUSES:
                raise ValueError(f"check {check.name} status must be one of {STATUSES}, got {check.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON of `diag analyze --json` (shared/DESIGN.md, "Analysis result")."""
        onset = None
        if self.onset is not None:
            trig = self.onset.trigger
            onset = {
                "t": iso(self.onset.t) if self.dated else None,
                "engine_age_s": _num(self.onset.engine_age_s),
                "trigger": None
                if trig is None
                else {
                    "kind": trig.kind,
                    "t": iso(trig.t) if self.dated else None,
                    "new_tokens": trig.new_tokens,
                    "cached_tokens": trig.cached_tokens,
                },
                "window_s": _num(self.onset.window_s),
            }
        return {
            "schema_version": RESULT_SCHEMA_VERSION,
            "verdict": self.verdict,
            "slowdown": None
            if self.slowdown is None
            else {
                "ratio": _num(self.slowdown.ratio, 3),
                "healthy_tps": _num(self.slowdown.healthy_tps, 2),
                "degraded_tps": _num(self.slowdown.degraded_tps, 2),
                "interval": None
                if self.slowdown.hi is None
                else [_num(self.slowdown.lo, 3), _num(self.slowdown.hi, 3)],
                "level": _num(self.slowdown.level, 5),
                "basis": self.slowdown.basis,
                "per_hour": None
                if self.slowdown.per_hour is None
                else {
                    "estimate": _num(self.slowdown.per_hour.estimate, 4),
                    "interval": [_num(self.slowdown.per_hour.lo, 4), _num(self.slowdown.per_hour.hi, 4)],
                },
                "shape": self.slowdown.shape,
            },
            "onset": onset,
            "recovered_by_restart": self.recovered_by_restart,
            "suspects": [{"name": s.name, "score": _num(s.score, 3), "evidence": s.evidence} for s in self.suspects],
            "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in self.checks],
            # beyond shared/DESIGN.md's keys, which come first
            "age_basis": self.age_basis,
            "prefix_reuse": None
            if self.prefix_reuse is None
            else {
                "ratio": _num(self.prefix_reuse.ratio, 3),
                "healthy_share": _num(self.prefix_reuse.healthy_share, 3),
                "late_share": _num(self.prefix_reuse.late_share, 3),
                "loss": self.prefix_reuse.loss,
            },
            "prefill": None
            if self.prefill is None
            else {
                "ratio": _num(self.prefill.ratio, 3),
                "loss": self.prefill.loss,
            },
            "confidence": self.confidence,
            "basis": self.basis,
            "cause": self.cause,
            "reason": self.reason,
            "comparisons": [c.to_dict() for c in self.comparisons],
            "clock": self.clock,
            "lives": [
                {"life": int(x.life), "start": iso(x.start) if self.dated else None, "identity": dict(x.facts)}
                for x in self.lives
            ],
        }


def iso(t: np.datetime64 | pd.Timestamp | None) -> str | None:
    """ISO-8601 in the source's own clock; whole seconds print without a fraction."""
    if t is None or pd.isna(t):
        return None
    stamp: str = pd.Timestamp(t).isoformat()
    return stamp


def _num(x: float | None, digits: int = 1) -> int | float | None:
    if x is None or not math.isfinite(x):
        return None
    value = round(float(x), digits)
    return int(value) if digits <= 1 and value == int(value) else value
