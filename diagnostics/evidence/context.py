"""What context explains: the most generous context-only model for a claimed slowdown, and what
context costs decode in a log with no age (docs/diagnostics.md, sections 5 and 6).

A slowdown is engine age only where context cannot explain it (context_only_test); a verdict of
no age names context where decode ran materially slower at the long contexts a log served than
at the short ones, and short contexts late ran at the healthy speed again (context_effect).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from diagnostics.evidence import healthy
from diagnostics.evidence.comparison import DECODE_MATERIAL
from diagnostics.evidence.healthy import HealthyModel
from diagnostics.labels import CheckStatus
from diagnostics.result import Check

CONTEXT_BAND = 1.2  # context bands are powers of this (each about +-10% wide)
MIN_POINTS = 4  # samples with context a cost model needs before it says what context costs
MIN_BACK = 3  # late samples back at short context before the text says how fast they ran


def context_effect(model: HealthyModel | None, use: pd.DataFrame) -> tuple[float, str] | None:
    """What context costs decode in this log: speed at the longest contexts served (90th percentile
    of the usable samples of the model's life) over the shortest (10th), at the median batch, and
    the words for it. The cost model is fitted on the whole life (its terms chosen as the healthy
    model's are): for a verdict of no age, all of it is healthy, and more samples pin the context
    slope that a short early window may leave out. None without a context term or a context spread."""
    if model is None or use.empty:
        return None
    life = use[(use["engine_life"] == model.engine_life) & (use["context"] > 0)]
    if len(life) >= healthy.CV_MIN:
        model = healthy.fit_healthy(life)
    if not model.context_identified:
        return None
    ctx = life["context"].dropna().to_numpy(dtype=float)
    if len(ctx) < MIN_POINTS:
        return None
    short, long = np.percentile(ctx, [10, 90])
    batch = np.array([float(life["num_running_reqs"].median()) if life["num_running_reqs"].notna().any() else 1.0] * 2)
    fast, slow = model.predict(batch, np.array([short, long]))
    if not (fast > 0 and slow > 0) or long <= short:
        return None
    ratio = float(fast / slow)
    unit = "KV usage" if long <= 1.0 else "tokens"
    at: Callable[[float], str] = (lambda v: f"{v:.0%}") if unit == "KV usage" else (lambda v: f"{v:,.0f}")
    back = _back_to_short(life, short, long)
    if back is None:
        return None  # short contexts late ran slower than early: not what context growth looks like
    return ratio, (
        f"decode runs {1 - ratio:.0%} slower at {at(long)} {unit} of context than at {at(short)} (the "
        f"cost fitted on the life's samples, {model.describe()})" + back
    )


def _back_to_short(life: pd.DataFrame, short: float, long: float) -> str | None:
    """`; late samples back at short context run at the early speed (1.01x)` where the log shows it:
    a new session starts fast again, as context growth and not age would have it."""
    n = len(life)
    late = life.iloc[n // 2 :]
    back = late[late["context"] <= short + 0.25 * (long - short)]
    if len(back) < MIN_BACK or not life["residual"].notna().any():
        return ""
    speed = float(np.exp(-back["residual"].median()))
    if speed < DECODE_MATERIAL:
        return None
    return f"; late samples back at short context run at {speed:.2f}x the healthy speed there"


def beyond_window(model: HealthyModel, degraded: pd.DataFrame) -> bool:
    """Do most degraded samples run at more context than the healthy window ever held? Then the
    window's context slope is an extrapolation there, fitted over a range that may not show it."""
    if model.context_range is None:
        return True
    ctx = degraded["context"].to_numpy(dtype=float)
    ctx = ctx[np.isfinite(ctx)]
    return len(ctx) > 0 and float(np.median(ctx)) > CONTEXT_BAND * model.context_range[1]


def within_window(model: HealthyModel, compared: pd.DataFrame) -> Check | None:
    """Where the context-only test cannot say (the healthy window held one context, and so did the
    degraded samples), the samples compared may still have run at the very context the window held:
    then context is matched, and cannot explain a slowdown between them. A check that says so, or
    None where some compared sample ran outside the window's context (one band either side of it)
    or has no context figure."""
    if model.context_range is None or compared.empty:
        return None
    ctx = compared["context"].to_numpy(dtype=float)
    lo, hi = model.context_range
    if not (np.isfinite(ctx).all() and ctx.min() >= lo / CONTEXT_BAND and ctx.max() <= hi * CONTEXT_BAND):
        return None
    at: Callable[[float], str] = (lambda v: f"{v:.0%}") if hi <= 1.0 else (lambda v: f"{v:,.0f}")

    def span(a: float, b: float) -> str:
        return at(a) if at(a) == at(b) else f"{at(a)}-{at(b)}"

    unit = "KV usage" if hi <= 1.0 else "tokens of context"
    return Check(
        "context_only_model",
        CheckStatus.OK,
        f"context cannot explain it: the {len(compared)} latest samples compared ran at "
        f"{span(ctx.min(), ctx.max())} {unit}, what the healthy window held ({span(lo, hi)})",
    )


def context_only_test(degraded: pd.DataFrame, model: HealthyModel, sigma: float) -> tuple[str, Check]:
    """Could context alone explain the degraded samples? `explains`, `cannot_explain`, or
    `cannot_say` when the data cannot test it.

    The generous model: healthy step time as if the healthy window had held no context at all,
    plus c * context with c >= 0 chosen to fit the degraded samples best (relative error).
    """
    ctx = degraded["context"].to_numpy(dtype=float)
    s = degraded["step_time_s"].to_numpy(dtype=float)
    ok = np.isfinite(ctx) & (ctx > 0)
    if ok.sum() < 2 or (ctx[ok].max() - ctx[ok].min()) / ctx[ok].max() < healthy.MIN_SPREAD:
        return "cannot_say", Check(
            "context_only_model",
            CheckStatus.WARN,
            "the healthy window holds no context figures and the degraded samples do not vary "
            "in context enough to test whether context alone explains the slowdown",
        )
    ctx, s = ctx[ok], s[ok]
    base = model.predict(degraded["num_running_reqs"].fillna(1.0).to_numpy(dtype=float)[ok], np.zeros(len(s)))
    u = ctx / s
    c = max(0.0, float(np.sum(u * (1 - base / s)) / np.sum(u * u)))
    r = np.log(s / (base + c * ctx))
    rms = float(np.sqrt(np.mean(r**2)))
    limit = max(2 * (sigma if np.isfinite(sigma) else 0.0), math.log(1.2))
    worst = int(np.argmax(np.abs(r)))
    detail = (
        f"most generous context-only model (healthy step time + {c:.3g} s per context token, fitted to the "
        f"{len(s)} degraded samples): misses them by {rms:.2f} in log RMS (limit {limit:.2f}); worst: "
        f"{ctx[worst]:.0f} context tokens ran {math.exp(r[worst]):.2f}x its prediction"
    )
    if rms <= limit:
        return "explains", Check("context_only_model", CheckStatus.OK, "context explains the slowdown: " + detail)
    return "cannot_explain", Check("context_only_model", CheckStatus.WARN, "context cannot explain it: " + detail)
