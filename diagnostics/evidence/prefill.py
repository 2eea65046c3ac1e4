"""Prefill time at matched conditions: an engine that takes longer and longer to admit a prompt.

The decode analysis does not look at prefill steps, and time to first token as a client sees
it holds the wait behind other prompts. The engine's own prefill rows do not: each says how
many new tokens it computed and how long that took (the built-in engine's step time; an
engine log's `input throughput`). A cost that lands on admissions — eviction that has to
work harder for every page it frees once the pool is full, say — shows there.

- rows: prefill rows of the first engine life with new tokens and a time, in time order;
- matched conditions: bands of new tokens and, where the rows say it, of cached tokens (powers
  of BAND each) and of the requests running beside it (healthy.batch_band): a prefill attends to its cached prefix, so an append onto a longer context
  takes longer at the same new-token count, which is context, not age. A band's healthy time
  is the median over the first EARLY_FRACTION of the rows, and every row's residual is
  log(its time / its band's healthy median); a late row whose band was never seen early has
  none and is not compared;
- a loss: the matched rows of the last LATE_FRACTION took, in total, at least MATERIAL_RATIO
  times what their bands' healthy medians predict (a cost paid by some admissions and not
  others counts by the time it adds), with at least MIN_LATE such rows and more than half of
  them (MIN_SHARE) slower than their band's healthy median.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence import changepoint, intervals
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.healthy import batch_band
from diagnostics.labels import Basis
from diagnostics.source.frames import first_life_ends
from rundir.schema import StepPhase

BAND = 1.5
EARLY_FRACTION = 1 / 3
LATE_FRACTION = 1 / 3
MATERIAL_RATIO = 1.5
MIN_LATE = 6
MIN_SHARE = 0.5


class PrefillComparison(NamedTuple):
    ratio: float  # late prefill time over what the healthy bands predict, in total (> 1: slower)
    num_healthy: int
    num_late: int  # matched late rows
    share_slower: float
    loss: bool
    detail: str
    rows: pd.DataFrame  # t, engine_age_s, engine_life, residual, excluded: every matched prefill row
    onset_t: np.datetime64 | None = None  # first prefill of the first materially slower segment
    onset_age_s: float | None = None
    comparison: Comparison | None = None  # on the speed scale: predicted over late time (below 1 is slower)


def compare(steps: pd.DataFrame) -> PrefillComparison | None:
    """None when the data hold too few prefill rows with a time to compare."""
    need = {"phase", "new_tokens", "input_tps", "t", "engine_life"}
    if steps is None or steps.empty or not need <= set(steps.columns):
        return None
    df = steps[(steps["phase"] == StepPhase.PREFILL) & (steps["new_tokens"] > 0) & (steps["input_tps"] > 0)]
    df = df.dropna(subset=["t", "new_tokens", "input_tps"])
    if df.empty:
        return None
    ends = first_life_ends(df, "t", EARLY_FRACTION, LATE_FRACTION, MIN_LATE)
    if ends is None:
        return None
    df, num_early, num_late = ends
    n = len(df)
    new = df["new_tokens"].to_numpy(dtype=float)
    log_t = np.log(new / df["input_tps"].to_numpy(dtype=float))
    band = np.floor(np.log(new) / math.log(BAND))
    if "cached_tokens" in df:
        cached = df["cached_tokens"].to_numpy(dtype=float)
        cached_band = np.where(np.isfinite(cached), np.floor(np.log1p(np.nan_to_num(cached)) / math.log(BAND)), -1)
        band = band * 1000 + cached_band
    if "num_running_reqs" in df and df["num_running_reqs"].notna().any():
        # Requests running beside it: a prefill shares the engine with them (llama.cpp's slots
        # take turns in one batch), so it is matched on their number too (in bands: healthy.BATCH_BAND).
        band = band * 1000 + batch_band(df["num_running_reqs"].to_numpy(dtype=float))
    healthy = pd.Series(log_t[:num_early]).groupby(band[:num_early]).median()
    residual = log_t - pd.Series(band).map(healthy).to_numpy(dtype=float)
    age = df["engine_age_s"].to_numpy(dtype=float) if "engine_age_s" in df else np.full(n, np.nan)
    rows = pd.DataFrame(
        {
            "t": df["t"].to_numpy(),
            "engine_age_s": age,
            "engine_life": df["engine_life"].to_numpy(),
            "residual": residual,
            "excluded": "",
        }
    )
    rows = rows[np.isfinite(rows["residual"])].reset_index(drop=True)
    late = residual[n - num_late :]
    late = late[np.isfinite(late)]
    if len(late) < MIN_LATE:
        return None
    # In total, not per row: an admission that has to evict pays in some prefills, not all of
    # them, and the time it adds is what a client waits.
    time = np.exp(log_t[n - num_late :])
    expected = np.exp(log_t[n - num_late :] - residual[n - num_late :])
    ok = np.isfinite(expected)
    ratio = float(time[ok].sum() / expected[ok].sum())
    share = float(np.mean(late > 0))
    loss = ratio >= MATERIAL_RATIO and share > MIN_SHARE
    detail = (
        f"prefill time at matched new and cached token counts: the last {len(late)} matched prefills took {ratio:.2f}x, in "
        f"total, what the first {num_early} predict ({share:.0%} of them above their band's healthy median; a "
        f"loss from {MATERIAL_RATIO:.1f}x with more than {MIN_SHARE:.0%} slower)"
    )
    onset_t = onset_age = None
    if loss:  # the first segment PELT finds materially slower than healthy
        seg = changepoint.detect(rows["residual"].to_numpy(dtype=float)).first_rise(math.log(MATERIAL_RATIO))
        if seg is not None:
            onset_t, onset_age = rows["t"].iloc[seg.start], float(rows["engine_age_s"].iloc[seg.start])
    pairs = np.column_stack([expected[ok], time[ok]])
    interval = intervals.bootstrap(lambda g: g[..., 0].sum(axis=-1) / g[..., 1].sum(axis=-1), [pairs])
    # The material level on the speed scale; most late rows must also be slower than healthy.
    material = 1 / MATERIAL_RATIO if share > MIN_SHARE else 0.0
    comparison = Comparison(
        basis=Basis.PREFILL,
        interval=interval,
        num_early=num_early,
        num_late=len(late),
        material=material,
        detail=f"prefill time at matched new and cached token counts, predicted over taken for the last {len(late)} "
        f"{interval.describe()}",
        healthy_level=None,
        unit="speed",
    )
    return PrefillComparison(
        ratio=ratio,
        num_healthy=num_early,
        num_late=len(late),
        share_slower=share,
        loss=loss,
        detail=detail,
        rows=rows,
        onset_t=onset_t,
        onset_age_s=onset_age,
        comparison=comparison,
    )
