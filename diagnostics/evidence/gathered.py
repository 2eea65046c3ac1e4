"""What a verdict is decided from: the comparisons and checks an analysis gathers (`Evidence`)
and the levels the rules share (docs/diagnostics.md,
"The verdict"). diagnostics.decision.verdict decides; diagnostics.decision.claims says which comparison a claim
rests on and whether it survives the controls."""

from __future__ import annotations

import math
from typing import NamedTuple

from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.youth import Youth
from diagnostics.labels import Basis

CONTEXT_STATES = ("fitted", "explains", "cannot_explain", "cannot_say")
RAW_DROP = 0.9  # raw per-request throughput late / early below this: it "fell"
HIGH_FLOOR = 0.95  # no age with its interval above this: high confidence
LOW_FLOOR = 0.81  # ...above this: low confidence; at or below it the data cannot tell
INFORMATIVE_SPAN = 1 / LOW_FLOOR**2  # an interval wider than this (hi / lo) cannot rule out LOW_FLOOR wherever it lies
UNCONTROLLED = 0.85  # a loss read with no control in the data must clear this whole (beyond_the_host)
MARGIN = 0.9  # engine age whose interval clears the material level by this factor again: high
SIDE_BASES = (Basis.PREFIX_REUSE, Basis.PREFILL)  # claims of another kind than decode speed
DECODE_BASES = (Basis.PAIRED_CONTROL, Basis.RESTART, Basis.PROBES, Basis.BINS, Basis.STEP_SERIES, Basis.COMBINED)
SANE_RATIO = (0.02, 5.0)  # late over healthy beyond these: the matching failed, not the engine
MIN_SPAN_S = 300.0  # engine time a verdict of no age from the log's samples needs them to cover
LOG_BASES = (Basis.BINS, Basis.STEP_SERIES)  # comparisons made from the step series itself: a log's own decode samples
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
    youth: Youth | None = None  # whether the control stayed young (diagnostics.evidence.youth)
    # ... and the paired control on the cycles right after its restarts alone, what stands in for the
    # paired control where it aged (controls.paired(..., fresh_only=True))
    paired_fresh: Comparison | None = None
    host: HostLoad | None = None
    raw_ratio: float | None = None  # last quarter's raw decode rate over the first quarter's
    no_data: str | None = None  # why neither steps nor probes can carry an analysis
    span_s: float | None = None  # engine time the usable decode samples cover
    unmatched: str | None = None  # why the step series found no matched conditions, when that is why
    # What context costs in this log, in words and as speed at the longest contexts served over the
    # shortest (diagnostics.evidence.context.context_effect): below RAW_DROP, context slowed decode materially.
    context_effect: tuple[float, str] | None = None


def sane(c: Comparison | None) -> bool:
    """Whether a comparison (None: none) reads within SANE_RATIO, where an engine compared with
    itself can read."""
    return c is None or not math.isfinite(c.ratio) or SANE_RATIO[0] <= c.ratio <= SANE_RATIO[1]
