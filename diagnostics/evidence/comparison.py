"""One comparison at matched conditions: late against healthy, with its interval and its bar.

Every basis diag compares on (paired main/control probes, identical probes, batch-and-context
bins, the step series around an onset, prefix reuse, prefill time) becomes a `Comparison` on
one scale: late over healthy, where below 1 is worse. Each basis has its material level (a
10 % loss of decode throughput, half the prefix reuse, prefill 1.5x slower) and the rules are
the same for all of them:

- a **loss**: the whole interval lies at or below the material level, with at least
  `min_for_loss` samples on each side (probes: four, see diagnostics.evidence.controls); for the paired
  control, whose fresh control cancels the host, the interval need only rule out a loss below
  `detect` (5 %) with the estimate itself material;
- **no loss**: the whole interval lies above it;
- otherwise the comparison cannot tell.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from diagnostics.evidence.intervals import Interval, divide
from diagnostics.labels import Basis

DECODE_MATERIAL = 0.9  # a 10 % loss of decode throughput at matched conditions
# A paired comparison shows a loss when its interval rules out a loss smaller than this and its
# estimate is material: the fresh control beside it takes the host's drift out, so what is left
# is the engine's (docs/diagnostics.md, "Running verdicts": a 15 % loss decided in minutes
# rather than the hour a whole interval below 0.9 needs at this host's noise).
PAIRED_DETECT = 0.95


class Comparison(NamedTuple):
    basis: Basis
    interval: Interval  # late over healthy (below 1 is worse)
    num_early: int  # samples behind each side (probes, cycles, block means, calls, rows)
    num_late: int
    material: float  # a ratio at or below this is a material loss
    detail: str  # one clause with the numbers, naming the basis
    healthy_level: float | None = None  # the healthy side's level in `unit` (tok/s for decode bases)
    unit: str = "tok/s"
    min_for_loss: int = 1  # samples a side needs before the comparison may show a loss at all
    # Where the comparison has a fresh control beside it (paired_control): a loss is established
    # when the interval's upper end lies at or below `detect` and the estimate at or below the
    # material level. None: the whole interval at or below the material level.
    detect: float | None = None
    parts: tuple[Basis, ...] = ()  # a comparison made of others (diagnostics.evidence.combine): their bases
    # Whether it may enter the decode comparisons together (diagnostics.evidence.combine): not a design known
    # to compare unlike conditions (the restart on the step series: the aged engine under the
    # traffic against the fresh one under little more than probes).
    joins: bool = True
    # The two measured levels (early, late; tok/s) whose ratio is the estimate, where the figure is
    # one: the medians of identical probes of one engine (geometric, as the ratio; the fresh control's
    # own probes too, whose details do not say them). The detail of a decode comparison says them, so a
    # page that puts them before a reader puts figures a table below shows. None where the
    # figure is no ratio of two measured levels (paired ratios, the bins' bands, the step series
    # against a model): `late_level` is then the healthy level times the ratio, computed.
    levels: tuple[float, float] | None = None

    @property
    def bases(self) -> tuple[Basis, ...]:
        """The bases it rests on: its own, or those of the comparisons it combines."""
        return self.parts or (self.basis,)

    @property
    def ratio(self) -> float:
        return self.interval.estimate

    @property
    def clears(self) -> bool:
        """The interval shows a material loss, however few samples it rests on."""
        limit = self.material if self.detect is None else self.detect
        return self.interval.bounded and self.interval.hi <= limit and self.ratio <= self.material

    @property
    def loss(self) -> bool:
        """A material loss, at the interval's confidence, on enough samples a side."""
        return self.clears and min(self.num_early, self.num_late) >= self.min_for_loss

    @property
    def no_loss(self) -> bool:
        """The interval lies above the material level: a material loss is ruled out."""
        return self.interval.bounded and self.interval.lo > self.material

    @property
    def late_level(self) -> float | None:
        """The healthy level times the ratio: what the engine runs at now at the healthy conditions,
        so that the three figures a text puts side by side always agree."""
        if self.healthy_level is None or not math.isfinite(self.ratio):
            return None
        return self.healthy_level * self.ratio

    def corrected(self, host: Comparison) -> Comparison:
        """This comparison with the host's own change taken out: divided by a young control's
        late-over-early ratio over the same run (`control_drift`), intervals combined."""
        interval = divide(self.interval, host.interval)
        return self._replace(
            interval=interval,
            levels=None,  # the ratio is no longer the measured levels
            detail=f"{self.detail}; corrected for the host by the fresh control's own drift "
            f"({host.interval.describe()}): {interval.describe()}",
        )

    def to_dict(self) -> dict[str, Any]:
        i = self.interval
        return {
            "basis": self.basis,
            "ratio": _round(i.estimate),
            "interval": [_round(i.lo), _round(i.hi)] if i.bounded else None,
            "level": i.level,
            "num_early": self.num_early,
            "num_late": self.num_late,
            "material": _round(self.material),
            "loss": self.loss,
            "no_loss": self.no_loss,
        }


def _round(x: float) -> float | None:
    return round(float(x), 3) if x is not None and math.isfinite(x) else None
