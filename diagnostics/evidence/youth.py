"""Whether the control stayed young: the paired control assumes it, and a fault driven by
requests served reaches a control of the same build too, only later (docs/soak.md, "What the
control assumes").

Read per probe cycle as the control over the soaked engine probed beside it (1 / the pair's
ratio: what slows the host slows both), grouped by the control's lives within each life of the
soaked engine:

    control life:   1 1 1 1 1 1 1 1 | 2 2 2 2 2 2 2 2 | 3 ...
    across:                 [  old  ] [fresh  ]              its last YOUTH_K before a restart
                                                             against its first YOUTH_K after
    within:         [early] . [late]                         each life's last third against its first
    fresh pairs:    [     ]           [     ]                its first YOUTH_K cycles a life

- **across** a restart, the old control against the fresh one, minutes apart: below 1, the
  control had slowed. Only restarts whose old life answered MIN_OLD_LIFE cycles count (a life of a
  few probes is too young to show age and would dilute the others). A step of the soaked engine
  inside those cycles reads the same way; it can only keep a "no age" back, never make one.
- **within** a life, late against early: the soaked engine does not grow young, so its own
  age there only hides the control's.
- **fresh pairs**: every life's first YOUTH_K cycles set the soaked engine beside a control of
  the same age each time (its age is the requests it answered), so where the control ages they
  compare like with like whatever its fault's onset.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence import intervals, sequential
from diagnostics.evidence.comparison import DECODE_MATERIAL, PAIRED_DETECT, Comparison
from diagnostics.labels import Basis, ControlYouth

# Cycles a side of a restart of the control that its youth is judged on, and the cycles of each
# life that are its fresh pairs: four, the fewest that may decide (sequential.MIN_DECIDING), so that
# a baseline's fresh pairs (the start cycle and the next three) can be the early side of one.
YOUTH_K = sequential.MIN_DECIDING
MIN_OLD_LIFE = 2 * YOUTH_K  # cycles an old life answered for its restart to judge the control's age
MIN_SIDE = sequential.MIN_DECIDING  # cycles a side before the control may be called aging or verified
JUST_RESTARTED = f"just-restarted control (its first {YOUTH_K} cycles a life)"


class Youth(NamedTuple):
    """The control against its own age (`measure`)."""

    across: Comparison | None  # over its restarts: the old control's last pairs against the fresh one's first
    within: Comparison | None  # within its lives: its late pairs against its early ones

    @property
    def status(self) -> ControlYouth:
        if any(_slowed(c) for c in (self.across, self.within)):
            return ControlYouth.AGING
        a = self.across
        if a is not None and min(a.num_early, a.num_late) >= MIN_SIDE and a.no_loss:
            return ControlYouth.VERIFIED
        return ControlYouth.UNVERIFIED

    @property
    def aging(self) -> bool:
        return self.status == ControlYouth.AGING

    @property
    def verified(self) -> bool:
        return self.status == ControlYouth.VERIFIED

    @property
    def shown(self) -> Comparison | None:
        """The comparison the status rests on: the one that shows the control aging, else the restarts'."""
        aged = [c for c in (self.across, self.within) if _slowed(c)]
        return aged[0] if aged else self.across or self.within

    def describe(self) -> str:
        c = self.shown
        if self.aging:
            assert c is not None
            return (
                f"the fresh engine beside it slowed with its own age ({c.detail}): whatever ages this engine "
                f"reached it too, so its pairs with this engine cannot rule a loss out"
            )
        if self.verified:
            assert c is not None
            return f"the fresh engine beside it stayed young: a restart of it ruled out a material slowing ({c.detail})"
        said = f" ({c.detail})" if c is not None else ""
        return (
            f"not verified that the fresh engine beside it stayed young: no restart of it after a life of "
            f"{MIN_OLD_LIFE} or more cycles ruled out that it slowed{said}; its pairs with this engine assume it"
        )


def measure(cycles: pd.DataFrame, level: float = intervals.LEVEL) -> Youth | None:
    """The control against its own age, from the paired cycles (diagnostics.evidence.controls.pairs); None
    without a control."""
    if cycles.empty or "control_life" not in cycles or cycles["control_life"].isna().all():
        return None
    v = cycles.assign(v=cycles["control"] / cycles["main"]).dropna(subset=["v", "control_life"])
    v = v[np.isfinite(v["v"]) & (v["v"] > 0)]
    old: list[np.ndarray] = []
    fresh_: list[np.ndarray] = []
    early: list[np.ndarray] = []
    late: list[np.ndarray] = []
    judged: set[float] = set()  # the control's lives judged within (one may span two of the engine's)
    for _, life in v.groupby("engine_life", sort=True):
        lives = [(c, g["v"].to_numpy(dtype=float)) for c, g in life.groupby("control_life", sort=True)]
        for (_, before), (_, after) in zip(lives, lives[1:]):
            if len(before) >= MIN_OLD_LIFE:
                k = min(YOUTH_K, len(after))
                _centred(before[-k:], after[:k], old, fresh_)
        for c, one in lives:
            third = sequential.side(len(one))
            if third is not None:
                judged.add(c)
                _centred(one[:third], one[-third:], early, late)
    across = within = None
    if old:
        across = _comparison(
            fresh_,
            old,
            level,
            False,
            f"over {len(old)} restart{'s' if len(old) > 1 else ''} of the control, its "
            "last cycles before over its first after",
        )
    if early:
        within = _comparison(
            early,
            late,
            level,
            True,
            f"within {len(judged)} li{'ves' if len(judged) > 1 else 'fe'} of the control, "
            "its last third over its first",
        )
    return Youth(across, within) if across is not None or within is not None else None


def _comparison(early: list[np.ndarray], late: list[np.ndarray], level: float, serial: bool, what: str) -> Comparison:
    interval = intervals.log_ratio(np.concatenate(early), np.concatenate(late), level, serial=serial)
    return Comparison(
        basis=Basis.CONTROL_YOUTH,
        interval=interval,
        num_early=sum(len(a) for a in early),
        num_late=sum(len(a) for a in late),
        material=DECODE_MATERIAL,
        detail=f"{what}, each beside the soaked engine: {interval.describe()}",
        min_for_loss=MIN_SIDE,
        detect=PAIRED_DETECT,
    )


def fresh(cycles: pd.DataFrame) -> pd.DataFrame:
    """The cycles whose control was within the first YOUTH_K cycles of one of its lives."""
    if cycles.empty or "control_life" not in cycles:
        return cycles.iloc[:0]
    position = cycles.groupby(["engine_life", "control_life"], sort=False).cumcount()
    return cycles[position < YOUTH_K]


def _slowed(c: Comparison | None) -> bool:
    """The control slowed with its age: the whole interval below 1 and the estimate a material
    loss, on MIN_SIDE cycles a side at least. Not the bar of a loss of the soaked engine: what rests
    on the control is a verdict of no age, and a control that probably slowed cannot carry one."""
    return (
        c is not None
        and c.interval.bounded
        and c.interval.hi < 1.0
        and c.ratio <= c.material
        and min(c.num_early, c.num_late) >= MIN_SIDE
    )


def _centred(a: np.ndarray, b: np.ndarray, into_a: list[np.ndarray], into_b: list[np.ndarray]) -> None:
    """Two sides of one group, on a ratio scale, divided by the group's geometric mean."""
    centre = np.log(np.concatenate([a, b])).mean()
    into_a.append(np.exp(np.log(a) - centre))
    into_b.append(np.exp(np.log(b) - centre))
