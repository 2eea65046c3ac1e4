"""The step series' two comparisons at matched conditions (diagnostics.evidence.decode, items 7 and 8 of
its steps): the latest stretch against its reference, and the restart control, both as speed
against the healthy model in block means, both kept to the context the healthy window held.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnostics.evidence import healthy, intervals
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.context import CONTEXT_BAND
from diagnostics.evidence.healthy import HealthyModel
from diagnostics.labels import Basis

MIN_LATE = 3  # samples the latest stretch holds at least (the last ones after the onset)
FRESH_FRACTION = 0.25  # of the next engine life's samples: its fresh level


def in_range(model: HealthyModel, a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both sides kept to the context the healthy window held (one band beyond it at most) when
    each side still has MIN_LATE samples there: the model then interpolates on both sides, and
    a context slope fitted over a narrow window (noise, mostly) cannot make one side look fast.
    Otherwise both sides whole: the same extrapolation then reaches both.

    Batch sizes are kept to the window's range (one band beyond it) always: a batch term fitted
    over 800-965 running requests says nothing of 100 (a one-shot batch draining), and a side
    with fewer than MIN_LATE samples there is not compared at all (empty)."""
    if "batch" in model.terms and model.batch_values:
        lo, hi = model.batch_values[0] / healthy.BATCH_BAND, model.batch_values[-1] * healthy.BATCH_BAND
        a, b = (x[x["num_running_reqs"].isna() | x["num_running_reqs"].between(lo, hi)] for x in (a, b))
        if len(a) < MIN_LATE or len(b) < MIN_LATE:
            return a.iloc[:0], b.iloc[:0]

    if model.context_range is None:
        return a, b
    top = CONTEXT_BAND * model.context_range[1]
    keep_a, keep_b = a[~(a["context"] > top)], b[~(b["context"] > top)]
    if len(keep_a) >= MIN_LATE and len(keep_b) >= MIN_LATE:
        return keep_a, keep_b
    return a, b


def step_comparison(early: pd.DataFrame, late: pd.DataFrame, where: str, reference: pd.DataFrame) -> Comparison | None:
    """Speed against the healthy model (exp(-residual)), block means of the latest stretch
    against its reference (_claim_sides), at the context the healthy window held where both
    sides have samples there (in_range). The latest stretch's mean is no surer than the means
    of stretches as long along the reference (stretch_floor): a slow spell of the host in the
    last seconds before a restart is one state of the host, however many samples it holds."""
    if early.empty or late.empty:
        return None
    e = intervals.blocks(np.exp(-early["residual"].to_numpy()))
    la = intervals.blocks(np.exp(-late["residual"].to_numpy()))
    interval = intervals.log_ratio(e, la, floors=(None, stretch_floor(reference, late)))
    n_early, n_late = len(e), len(la)
    return Comparison(
        basis=Basis.STEP_SERIES,
        interval=interval,
        num_early=n_early,
        num_late=n_late,
        material=DECODE_MATERIAL,
        detail=f"step series at matched conditions (speed against the step-time model fitted early, the latest {len(late)} "
        f"samples against {where}, in {n_early} and {n_late} block means): {interval.describe()}",
        healthy_level=float(early["gen_tps"].median()),
    )


def restart(
    model: HealthyModel,
    use: pd.DataFrame,
    life_use: pd.DataFrame,
    late: pd.DataFrame,
    onset_idx: int | None,
    reference: pd.DataFrame,
) -> Comparison | None:
    """The restart control: the aged engine's latest stretch (the claim's own late side) over the
    next engine life's young samples — younger than the onset's engine age (or than the latest
    stretch's start), over no longer a span than the latest stretch — both against the healthy
    model, in block means. Aged and fresh run minutes apart at most: a slowdown of the host or
    of the load reaches both, engine age only the aged one. Each stretch's mean is no surer than
    the means of stretches as long along the aged life's reference (stretch_floor): two short
    stretches are two states of the host."""
    if life_use.empty or late.empty:
        return None
    life = int(life_use["engine_life"].iloc[0])
    nxt = use[use["engine_life"] > life]
    if nxt.empty:
        return None
    nxt = nxt[nxt["engine_life"] == nxt["engine_life"].iloc[0]]
    young = float(life_use.loc[onset_idx, "busy_s"]) if onset_idx is not None else float(late["busy_s"].min())
    ages = nxt["busy_s"].to_numpy(dtype=float)
    late_span = float(late["busy_s"].max() - late["busy_s"].min())
    fresh = nxt[(ages < young) & (ages <= ages.min() + max(late_span, 1e-9))]
    if len(fresh) < MIN_LATE:
        # By engine time, not by count: a slowed engine prints fewer lines an hour.
        fresh = span_end(nxt, FRESH_FRACTION, first=True)
    fresh, aged = in_range(model, fresh, late)
    if fresh.empty or aged.empty:
        return None
    f = intervals.blocks(np.exp(-fresh["residual"].to_numpy()))
    a = intervals.blocks(np.exp(-aged["residual"].to_numpy()))
    interval = intervals.log_ratio(f, a, floors=(stretch_floor(reference, fresh), stretch_floor(reference, aged)))
    return Comparison(
        basis=Basis.RESTART,
        interval=interval,
        num_early=len(f),
        num_late=len(a),
        material=DECODE_MATERIAL,
        detail=f"restart, on the step series: the engine's latest {len(aged)} samples before it over its first "
        f"{len(fresh)} after it ({len(a)} and {len(f)} block means) "
        f"{interval.describe()}",
        healthy_level=float(fresh["gen_tps"].median()),
        joins=False,
    )


def stretch_floor(reference: pd.DataFrame, stretch: pd.DataFrame) -> intervals.StretchNoise | None:
    """How much the mean speed (against the healthy model) of a stretch of engine time as long as
    `stretch` varies along `reference` (intervals.stretch_noise); None where it cannot say."""
    if len(stretch) < 2 or reference.empty:
        return None
    span = float(stretch["busy_s"].max() - stretch["busy_s"].min())
    return intervals.stretch_noise(
        reference["busy_s"].to_numpy(dtype=float), np.exp(-reference["residual"].to_numpy(dtype=float)), span
    )


def span_end(rows: pd.DataFrame, fraction: float, first: bool) -> pd.DataFrame:
    """The rows of the first (or last) `fraction` of their span by engine busy time, at least two."""
    age = rows["busy_s"].to_numpy(dtype=float)
    lo, hi = age.min(), age.max()
    keep = age <= lo + fraction * (hi - lo) if first else age >= hi - fraction * (hi - lo)
    if keep.sum() >= 2:
        return rows[keep]
    return rows.head(2) if first else rows.tail(2)
