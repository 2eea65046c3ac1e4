"""Batch-and-context bins: the step series' decode samples of the same batch size and context band,
early against late in one engine life, with a bootstrap interval over the bands (docs/diagnostics.md,
"Decode evidence", comparison 7). The report shows the bands as they were compared."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from diagnostics.evidence import healthy, intervals
from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.context import CONTEXT_BAND
from diagnostics.evidence.controls import Sides
from diagnostics.evidence.healthy import HealthyModel
from diagnostics.labels import Basis

MAX_BIN_SAMPLES = 400  # samples per band and side the bootstrap resamples (_spread)


def compare(
    use: pd.DataFrame, model: HealthyModel, onset_idx: int | None
) -> tuple[Comparison | None, pd.DataFrame | None, Sides | None]:
    """Same batch size and context band, early against late in the model's engine life; the
    bands compared (_band_row), which the report shows as they were; and the sides' moments."""
    life = use[use["engine_life"] == model.engine_life]
    if onset_idx is not None:
        early, late = life.loc[life.index < onset_idx], life.loc[life.index >= onset_idx]
    else:
        half = len(life) // 2
        early, late = life.iloc[:half], life.iloc[half:]
    if life["context"].isna().all():
        return None, None, None

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        # Context may be a token count or a usage fraction (a scrape's KV usage): bands are relative
        # either way; an empty cache is a band of its own.
        ctx = df["context"].to_numpy(dtype=float)
        with np.errstate(divide="ignore"):
            band = np.where(ctx > 0, np.floor(np.log(np.where(ctx > 0, ctx, 1.0)) / math.log(CONTEXT_BAND)), -9_999)
        return df.assign(
            key=healthy.batch_band(df["num_running_reqs"].to_numpy(dtype=float)) * 100_000 + band,
            logt=np.log(df["step_time_s"]),
        )

    e, lt = keyed(early.dropna(subset=["context"])), keyed(late.dropna(subset=["context"]))
    ne, nl = e["key"].value_counts(), lt["key"].value_counts()
    # A band needs two samples on each side: one against one is no evidence, and the bootstrap
    # would call it certain.
    shared = sorted(k for k in set(ne.index) & set(nl.index) if min(ne[k], nl[k]) >= 2)
    if not shared:
        return None, None, None
    weights = np.array([min(ne[k], nl[k]) for k in shared], dtype=float)
    groups = [_spread(df.loc[df["key"] == key, "logt"].to_numpy()) for key in shared for df in (e, lt)]

    def ratio(*g: np.ndarray) -> np.ndarray:  # each g: [R, n] resampled log step times
        diffs = np.stack([np.median(g[2 * i + 1], axis=1) - np.median(g[2 * i], axis=1) for i in range(len(shared))])
        ratios: np.ndarray = np.exp(-(weights @ diffs) / weights.sum())
        return ratios

    interval = intervals.bootstrap(ratio, groups)
    support = int(weights.sum())
    early_tps = e.loc[e["key"].isin(shared), "gen_tps"]
    bands = pd.DataFrame([_band_row(e[e["key"] == key], lt[lt["key"] == key]) for key in shared])
    return (
        Comparison(
            basis=Basis.BINS,
            interval=interval,
            num_early=support,
            num_late=support,
            material=DECODE_MATERIAL,
            detail=f"{len(shared)} batch-and-context bands hold samples early and late ({support} pairs): late "
            f"throughput {interval.describe()} of early",
            healthy_level=float(early_tps.median()),
        ),
        bands,
        moments(e[e["key"].isin(shared)], lt[lt["key"].isin(shared)]),
    )


def _spread(values: np.ndarray) -> np.ndarray:
    """At most MAX_BIN_SAMPLES of a band's samples, evenly spread in time: the bootstrap resamples
    each band 2,000 times, and a band of a million single steps (a 12-hour log) says no more about
    its median than a few hundred spread over it do, at a thousandth of the cost (the interval only
    widens, a little)."""
    if len(values) <= MAX_BIN_SAMPLES:
        return values
    return values[np.linspace(0, len(values) - 1, MAX_BIN_SAMPLES).astype(np.int64)]


def _band_row(early: pd.DataFrame, late: pd.DataFrame) -> dict[str, float]:
    """One band of the bins comparison, as the report shows it: batch, context range, samples and
    median decode rate on each side."""
    ctx = pd.concat([early["context"], late["context"]])
    band = math.floor(math.log(ctx.min()) / math.log(CONTEXT_BAND)) if ctx.min() > 0 else None
    return {
        "num_running_reqs": float(early["num_running_reqs"].iloc[0])
        if early["num_running_reqs"].notna().any()
        else math.nan,
        "context_lo": 0.0 if band is None else CONTEXT_BAND**band,
        "context_hi": 0.0 if band is None else CONTEXT_BAND ** (band + 1),
        "num_early": len(early),
        "early_tps": float(early["gen_tps"].median()),
        "num_late": len(late),
        "late_tps": float(late["gen_tps"].median()),
    }


def moments(early: pd.DataFrame, late: pd.DataFrame) -> Sides | None:
    """The first and the last moment of each side, (early, late); None where a side is empty."""
    if early.empty or late.empty or "t" not in early or "t" not in late:
        return None
    return (early["t"].min(), early["t"].max()), (late["t"].min(), late["t"].max())
