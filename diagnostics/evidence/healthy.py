"""Decode samples and the healthy model: what a young engine's decode step costs.

A decode sample is one step row with a throughput: its step time is `num_running_reqs / gen_tps` (the
time of one decode step, which every running request shares), or the engine's own
`step_time_s` where it reports one. The healthy model is

    step_time = a + b * batch + c * context_tokens        (a, b, c >= 0)

fitted by non-negative least squares on relative error over the first part of the engine's
life: `a` reads the weights, `b` is the per-sequence overhead, `c` is what attention over
the KV cache costs per token. A term is fitted only when the healthy window can identify it
(its feature known everywhere in the window and varying there); otherwise it is left out and
the model says so (`terms`). Residuals are log(observed / predicted): positive is slower.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from rundir.schema import StepPhase

HEALTHY_FRACTION = 0.25  # of an engine life's span (engine time): its early life
MIN_HEALTHY = 2  # samples; fewer and there is no healthy reference at all
MIN_SPREAD = 0.2  # (max - min) / max of a feature before its slope is fitted
CV_MIN = 12  # window samples before terms are chosen by cross-validation (fewer: every identifiable term)
CV_FOLDS = 6
CV_MARGIN = 0.02  # a term must cut the held-out error by more than this to beat the constant
GAP_FLOOR_S = 30.0  # a decode line this long after the previous one spans an idle gap...
GAP_FACTOR = 10.0  # ...or this many times the usual interval
IDLE_GAP_S = 600.0  # no row for this long (nor GAP_FACTOR usual intervals) without an idle line: idle all the same
PENDING_RATE = 0.25  # a window below this share of the per-request rate its life reaches (90th pct) is a stall
BATCH_BAND = 1.1  # batch sizes within this ratio are one batch: a step's cost barely moves inside it
STEP_BLOCK = 16  # an engine's own per-step times are averaged over this many decode steps
STEP_ROW_MAX_GAP_S = 0.5  # rows this close together are single steps, not interval averages
# Why a decode sample is kept out of the fit (decode_samples' `excluded`), in words.
KEPT_OUT = {
    "after_prefill": "after a prefill",
    "after_idle": "after an idle gap",
    "window_with_prefill": "windows holding more prompt than generated tokens",
    "batch_changed": "with a batch that changed inside the window",
    "prefill_pending": "holding a prefill that completed in a later window (almost nothing generated)",
    "prefill_dominated": "whose time went mostly to prefill by the fitted prompt cost",
}


class HealthyModel(NamedTuple):
    terms: tuple[str, ...]  # of "intercept", "batch", "context"
    coef: tuple[float, ...]  # seconds, s per sequence, s per context token
    engine_life: int
    num_points: int
    t_end: np.datetime64  # last sample of the window
    batch_values: tuple[float, ...]  # batch sizes seen in the window
    context_range: tuple[float, float] | None
    r2: float | None
    # Terms the window could identify that predicted held-out samples no better than the model
    # without them (fit_healthy): left out, and said so.
    left_out: tuple[str, ...] = ()

    @property
    def context_identified(self) -> bool:
        return "context" in self.terms

    def predict(self, batch: np.ndarray, context: np.ndarray, prompt: np.ndarray | None = None) -> np.ndarray:
        """Healthy step time (s) at the given batch sizes and context tokens; with the prompt term,
        a window's apparent step time, `prompt` tokens of prefill per decode step inside it (none
        when not given: the decode step alone)."""
        features = {
            "batch": batch,
            "context": context,
            "prompt": prompt if prompt is not None else np.zeros(len(batch)),
        }
        out = np.zeros(len(batch))
        for term, k in zip(self.terms, self.coef):
            out = out + k * (1.0 if term == "intercept" else features[term])
        return out

    def describe(self) -> str:
        parts = {
            "intercept": "{:.4g} s",
            "batch": "{:.3g} s/seq",
            "context": "{:.3g} s/token",
            "prompt": "{:.3g} s per prompt token in the window",
        }
        return " + ".join(parts[t].format(k) for t, k in zip(self.terms, self.coef))


def decode_samples(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per decode step row with a throughput, and why a row is kept out of the fit.

    Columns: t, engine_life, engine_age_s, num_running_reqs, context, step_time_s, gen_tps, excluded
    ('' when usable; 'after_prefill', 'after_idle' for lines whose window holds other work),
    step_index (row in `steps`).
    """
    df = steps.reset_index(drop=True)
    life = df["engine_life"]
    batch = df["num_running_reqs"].groupby(life).ffill()
    context_col = "num_tokens" if df["num_tokens"].notna().any() else "token_usage"
    context = df[context_col].groupby(life).ffill()
    phase = df["phase"].to_numpy()
    is_decode = np.isin(phase, (StepPhase.DECODE, StepPhase.MIXED))
    own_time = df["step_time_s"].to_numpy(dtype=float)
    gen = df["gen_tps"].to_numpy(dtype=float)
    usable = is_decode & ((gen > 0) | (own_time > 0))
    # Previous step row of the same life: a decode line's window covers everything since the
    # previous decode line, so a prefill or idle row between them lands inside it.
    prev_phase = pd.Series(phase).groupby(life).shift(1).to_numpy()
    # Prompt tokens the next row completed: vLLM V1 and scrapes count a prompt in the window its
    # prefill ends in, so a window before it may hold that prefill with nothing to show for it.
    next_input = df["input_tps"].groupby(life).shift(-1).to_numpy(dtype=float)
    idx = np.flatnonzero(usable)
    t = df["t"].to_numpy(dtype="datetime64[ns]")
    out = pd.DataFrame(
        {
            "t": t[idx],
            "engine_life": life.to_numpy()[idx],
            "engine_age_s": df["engine_age_s"].to_numpy()[idx],
            "busy_s": busy_clock(df)[idx],
            "num_running_reqs": batch.to_numpy(dtype=float)[idx],
            "context": context.to_numpy(dtype=float)[idx],
            "gen_tps": gen[idx],
            "own_time": own_time[idx],
            "prev_phase": prev_phase[idx],
            "step_index": idx,
            "phase": phase[idx],
            "input_tps": df["input_tps"].to_numpy(dtype=float)[idx],
            "next_input": next_input[idx],
        }
    )
    b = out["num_running_reqs"].fillna(1.0).clip(lower=1.0).to_numpy()
    measured = np.isfinite(out["own_time"].to_numpy()) & (out["own_time"].to_numpy() > 0)
    out["step_time_s"] = np.where(measured, out["own_time"], b / out["gen_tps"].to_numpy())
    out.loc[~measured & ~np.isfinite(out["gen_tps"]), "step_time_s"] = np.nan
    excluded = np.full(len(out), "", dtype=object)
    from_log = ~measured  # only interval-averaged throughput carries other work inside it
    excluded[from_log & (out["prev_phase"].to_numpy() == StepPhase.PREFILL)] = "after_prefill"
    excluded[from_log & np.isin(out["prev_phase"].to_numpy(), (StepPhase.IDLE,))] = "after_idle"
    # Tokens over wall time at the batch the line prints hold only while that batch decoded the
    # whole window: a batch that changed since the previous line (a request finished or joined,
    # or none runs at the line's moment) mixes batch sizes and idle time into the rate.
    # Batch sizes are compared in bands (same_batch): 1,000 running requests draining to 999 is one
    # batch, whose window averaged the two; 1 against 2 is not.
    prev_batch = out.groupby("engine_life")["num_running_reqs"].shift(1).to_numpy()
    cur_batch = out["num_running_reqs"].to_numpy()
    both = np.isfinite(prev_batch) & np.isfinite(cur_batch)
    close = both & same_batch(cur_batch, prev_batch)
    changed = both & ~close
    excluded[from_log & (excluded == "") & (changed | (cur_batch == 0))] = "batch_changed"
    drift = from_log & close & (cur_batch != prev_batch)
    out.loc[drift, "num_running_reqs"] = (cur_batch[drift] + prev_batch[drift]) / 2
    out.loc[drift, "step_time_s"] = out.loc[drift, "num_running_reqs"] / out.loc[drift, "gen_tps"]
    gap = out.groupby("engine_life")["t"].diff().dt.total_seconds().to_numpy()
    usual = np.nanmedian(gap) if np.isfinite(gap).any() else np.nan
    limit = max(GAP_FLOOR_S, GAP_FACTOR * usual) if np.isfinite(usual) else np.inf
    excluded[from_log & (excluded == "") & (gap > limit)] = "after_idle"
    # Last, so that a window kept out for holding prompt tokens has nothing else against it
    # (diagnostics.evidence.decode may take such windows back in). A window that holds prompt tokens (vLLM's
    # stats lines, a scrape) spent part of its time on prefill: its decode time per token, or its
    # tokens per wall second, is not a decode step's.
    # A prefill forward computes thousands of tokens in the time a decode forward makes one per
    # request, so a window with no more prompt tokens than generated ones lost a percent or so.
    windows = from_log | (measured & _interval_rows(out["t"], out["engine_life"], measured))
    inp = np.nan_to_num(out["input_tps"].to_numpy(dtype=float))
    heavy = inp > out["gen_tps"].to_numpy(dtype=float)
    mixed = windows & (out["phase"].to_numpy() == StepPhase.MIXED)
    excluded[(excluded == "") & mixed & heavy] = "window_with_prefill"
    # Prompt tokens per decode step inside the window: the healthy model may fit what they cost
    # (fit_healthy's `prompt` term) and so read decode speed from windows that admitted a turn.
    out["prompt"] = np.where(mixed, inp * b / out["gen_tps"].to_numpy(dtype=float), 0.0)
    if (phase == StepPhase.MIXED).any():  # one line per window carries both prompt and generated tokens
        excluded[(excluded == "") & _pending_prefill(out, from_log)] = "prefill_pending"
    out["excluded"] = excluded
    out["measured"] = measured
    out = out[np.isfinite(out["step_time_s"]) & (out["step_time_s"] > 0)]
    out = out.drop(columns=["own_time", "prev_phase", "phase", "input_tps", "next_input"]).reset_index(drop=True)
    return _step_blocks(out)


def _pending_prefill(out: pd.DataFrame, from_log: np.ndarray) -> np.ndarray:
    """Windows that hold a prefill still running: requests running, no prompt completed, almost
    nothing generated (a per-request rate below PENDING_RATE of the rate the life reaches, its 90th
    percentile: a median falls with the stalls themselves where long prompts come one after
    another), and the next window completed prompt tokens, or is such a window itself. A prefill
    longer than a window stalls the decodes beside it for windows on end, and its prompt is
    counted only where it ends (20,000 tok/s there): the windows before it are not decode speed."""
    rate = out["gen_tps"].to_numpy(dtype=float) / out["num_running_reqs"].fillna(1.0).clip(lower=1.0).to_numpy()
    reach = pd.Series(rate).groupby(out["engine_life"].to_numpy()).transform(lambda r: r.quantile(0.9)).to_numpy()
    inp = np.nan_to_num(out["input_tps"].to_numpy(dtype=float))
    stalled = (
        from_log & (inp == 0) & (out["num_running_reqs"].fillna(0).to_numpy() >= 1) & (rate < PENDING_RATE * reach)
    )
    nxt = np.nan_to_num(out["next_input"].to_numpy(dtype=float)) > 0
    life = out["engine_life"].to_numpy()
    pending = np.zeros(len(out), dtype=bool)
    for i in np.flatnonzero(stalled)[::-1]:
        chained = i + 1 < len(out) and pending[i + 1] and life[i + 1] == life[i]
        pending[i] = nxt[i] or chained
    return pending


def busy_clock(steps: pd.DataFrame) -> np.ndarray:
    """Engine busy time (s) at each step row, per engine life: its age less the time it sat idle.

    Idle is the time after a row that says so (an idle line, a stats line with nothing running) until
    the next row, and any gap between rows longer than max(IDLE_GAP_S, GAP_FACTOR x the usual
    interval) (no engine is silent that long while it works; a shorter gap may be lines an excerpt
    left out); each such gap counts as one usual interval. Eighteen hours with nothing to do are not
    eighteen hours of age: the early life is where the engine first worked, and a trend per hour is
    per hour of work."""
    df = steps.reset_index(drop=True)
    out = np.zeros(len(df))
    if df.empty:
        return out
    for _, rows in df.groupby("engine_life", sort=False):
        idx = rows.index.to_numpy()
        age = rows["engine_age_s"].to_numpy(dtype=float)
        dt = np.diff(age, prepend=0.0)
        dt[0] = max(age[0], 0.0) if np.isfinite(age[0]) else 0.0
        dt = np.where(np.isfinite(dt) & (dt > 0), dt, 0.0)
        usual = float(np.median(dt[1:])) if len(dt) > 1 else 0.0
        limit = max(IDLE_GAP_S, GAP_FACTOR * usual)
        gen = rows["gen_tps"].to_numpy(dtype=float)
        prev_idle = np.concatenate(
            [
                [False],
                (rows["phase"].to_numpy() == StepPhase.IDLE)[:-1]
                | ((rows["num_running_reqs"].to_numpy(dtype=float) == 0) & ~(gen > 0))[:-1],
            ]
        )
        idle = (dt > limit) | (prev_idle & (dt > usual))
        out[idx] = np.cumsum(np.where(idle, np.minimum(dt, usual), dt))
    return out


def _interval_rows(t: pd.Series, life: pd.Series, measured: np.ndarray) -> np.ndarray:
    """True where rows with their own step time average an interval (scrapes), not single steps."""
    gaps = t[measured].groupby(life[measured]).diff().dt.total_seconds()
    return np.full(len(t), bool(gaps.notna().any() and gaps.median() >= STEP_ROW_MAX_GAP_S))


def _step_blocks(out: pd.DataFrame) -> pd.DataFrame:
    """The engine's own per-step times, STEP_BLOCK decode steps at a time, as a log line averages
    its interval: mean batch, context and step time (the block's decode time over its steps).
    A per-step median drops a cost paid in one step of many (a collection, an eviction) as an
    outlier; a block's mean keeps it, as the throughput a client sees does."""
    measured = out["measured"].to_numpy()
    out = out.drop(columns=["measured"])
    if not measured.any():
        return out
    gaps = out.loc[measured, "t"].diff().dt.total_seconds()
    if not gaps.notna().any() or gaps.median() >= STEP_ROW_MAX_GAP_S:
        return out  # rows that already average an interval (scrape windows), not single steps
    steps = out[measured]
    key = steps.groupby("engine_life").cumcount() // STEP_BLOCK
    blocks = steps.groupby([steps["engine_life"], key], sort=False).agg(
        t=("t", "last"),
        engine_life=("engine_life", "last"),
        engine_age_s=("engine_age_s", "last"),
        busy_s=("busy_s", "last"),
        num_running_reqs=("num_running_reqs", "mean"),
        context=("context", "mean"),
        step_time_s=("step_time_s", "mean"),
        step_index=("step_index", "last"),
        excluded=("excluded", "first"),
        num_steps=("t", "size"),
    )
    blocks["gen_tps"] = blocks["num_running_reqs"].clip(lower=1.0) / blocks["step_time_s"]
    blocks = blocks[blocks["num_steps"] >= max(1, STEP_BLOCK // 4)].drop(columns=["num_steps"])
    rest = out[~measured]
    return (
        pd.concat([rest, blocks.reset_index(drop=True)], ignore_index=True)
        .sort_values(["engine_life", "t"], kind="stable")
        .reset_index(drop=True)[out.columns]
    )


def healthy_window(samples: pd.DataFrame) -> pd.DataFrame | None:
    """The early-life samples of the first engine life that has enough of them.

    Early by engine busy time (busy_clock), not by count: the usable samples of the first
    HEALTHY_FRACTION of the life's busy span (at least MIN_HEALTHY of them). Where clean samples are
    rarer early than late (a fast engine's windows mostly hold a prefill or a batch change; a slowed
    one's do not), the first quarter of them by count would reach into the late life and call it
    healthy. A life whose first MIN_HEALTHY samples lie beyond the first half of its span has no
    early life to speak of.
    """
    valid = samples[samples["excluded"] == ""]
    for _, life in valid.groupby("engine_life", sort=True):
        if len(life) < MIN_HEALTHY + 1:
            continue
        busy = life["busy_s"]  # engine busy time: hours idle are not early life
        span = busy.iloc[-1] - busy.iloc[0]
        early = life[busy <= busy.iloc[0] + HEALTHY_FRACTION * span]
        if len(early) >= MIN_HEALTHY:
            return early
        if busy.iloc[MIN_HEALTHY - 1] <= busy.iloc[0] + 0.5 * span:
            return life.iloc[:MIN_HEALTHY]
    return None


def fit_healthy(window: pd.DataFrame, required: tuple[str, ...] = ()) -> HealthyModel:
    """The healthy model on the early-life window: the terms the window identifies, and of those
    the ones that predict held-out samples better than the model without them (CV_FOLDS-fold
    cross-validation on relative error, in time order): a term that fits noise is no baseline.
    `required` terms stay in wherever the window identifies them (the prompt term, once mixed
    windows were taken in because of it)."""
    n = len(window)
    y = window["step_time_s"].to_numpy(dtype=float)
    batch = window["num_running_reqs"].to_numpy(dtype=float)
    context = window["context"].to_numpy(dtype=float)
    prompt = window["prompt"].to_numpy(dtype=float) if "prompt" in window else np.zeros(n)
    features = {"batch": batch, "context": context, "prompt": np.nan_to_num(prompt)}
    candidates = [t for t in ("batch", "context") if n >= 4 and _identifiable(features[t])]
    if n >= CV_MIN and _identifiable(features["prompt"], allow_zero=True):
        candidates.append("prompt")
    terms = ["intercept", *candidates]
    left_out: tuple[str, ...] = ()
    if n >= CV_MIN and candidates:
        subsets = [
            ["intercept", *[t for k, t in enumerate(candidates) if keep >> k & 1]]
            for keep in range(2 ** len(candidates))
        ]
        subsets = [s for s in subsets if all(t in s for t in required if t in candidates)]
        errors = [_cv_error(y, [features[t] for t in s[1:]]) for s in subsets]
        best = min(
            range(len(subsets)), key=lambda k: (errors[k] * (1 - CV_MARGIN * (len(subsets[k]) == 1)), len(subsets[k]))
        )
        terms = subsets[best]
        left_out = tuple(t for t in candidates if t not in terms)
    x = np.column_stack([np.ones(n), *[features[t] for t in terms[1:]]])
    coef = _fit(x, y)
    pred = x @ coef
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss if ss > 0 and n > len(terms) > 1 else None
    ctx = context[np.isfinite(context)]
    return HealthyModel(
        terms=tuple(terms),
        coef=tuple(float(k) for k in coef),
        engine_life=int(window["engine_life"].iloc[0]),
        num_points=n,
        t_end=window["t"].iloc[-1].to_datetime64(),
        batch_values=tuple(sorted({float(v) for v in batch[np.isfinite(batch)]})),
        context_range=(float(ctx.min()), float(ctx.max())) if len(ctx) else None,
        r2=r2,
        left_out=left_out,
    )


def batch_band(batch: np.ndarray) -> np.ndarray:
    """Each batch size's band (powers of BATCH_BAND); -1 for none or unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        band = np.where(batch > 0, np.floor(np.log(batch) / math.log(BATCH_BAND)), -1.0)
    return np.nan_to_num(band, nan=-1.0)


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares on relative error: a 10 ms miss on a 20 ms step matters more
    than on a 200 ms one."""
    w = 1.0 / y
    coef: np.ndarray
    coef, _ = nnls(x * w[:, None], y * w)
    return coef


def _cv_error(y: np.ndarray, columns: list[np.ndarray]) -> float:
    """Relative squared error of held-out predictions, CV_FOLDS contiguous folds in time order."""
    n = len(y)
    x = np.column_stack([np.ones(n), *columns])
    folds = np.array_split(np.arange(n), min(CV_FOLDS, n))
    err = 0.0
    for held in folds:
        train = np.ones(n, dtype=bool)
        train[held] = False
        coef = _fit(x[train], y[train])
        err += float(np.sum(((y[held] - x[held] @ coef) / y[held]) ** 2))
    return err


def residuals(model: HealthyModel, samples: pd.DataFrame) -> np.ndarray:
    """log(observed / healthy) step time per sample; NaN where the model cannot predict."""
    batch = samples["num_running_reqs"].fillna(1.0).to_numpy(dtype=float)
    context = samples["context"].to_numpy(dtype=float)
    if not model.context_identified:
        context = np.zeros(len(samples))
    prompt = samples["prompt"].fillna(0.0).to_numpy(dtype=float) if "prompt" in samples else None
    pred = model.predict(batch, context, prompt)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(samples["step_time_s"].to_numpy(dtype=float) / pred)
    return np.where(np.isfinite(r), r, np.nan)


def matched(model: HealthyModel, samples: pd.DataFrame) -> np.ndarray:
    """Samples whose batch the model covers: its batch term, or a batch seen in the window (in
    bands: same_batch)."""
    if "batch" in model.terms or not model.batch_values:
        return np.ones(len(samples), dtype=bool)
    batch = samples["num_running_reqs"].to_numpy(dtype=float)
    seen = np.asarray(model.batch_values, dtype=float)  # sorted
    # The nearest seen size on either side is the only one that can lie in the band.
    right = np.clip(np.searchsorted(seen, batch), 0, len(seen) - 1)
    left = np.clip(right - 1, 0, len(seen) - 1)
    near = same_batch(batch, seen[right]) | same_batch(batch, seen[left])
    covered: np.ndarray = near | np.isnan(batch)
    return covered


def same_batch(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Batch sizes in one band: within BATCH_BAND of each other (999 and 1,000; never 1 and 2)."""
    with np.errstate(invalid="ignore"):
        same: np.ndarray = np.maximum(a, b) <= BATCH_BAND * np.minimum(a, b)
    return same


def robust_sigma(r: np.ndarray) -> float:
    """Noise of a series that may hold level shifts: MAD of first differences / sqrt(2)."""
    r = r[np.isfinite(r)]
    if len(r) < 3:
        return float("nan")
    d = np.diff(r)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


def _identifiable(values: np.ndarray, allow_zero: bool = False) -> bool:
    """A feature varies enough in the window to fix its slope (`allow_zero`: most values may be
    0, as a window's prompt tokens are where no turn began)."""
    if not np.isfinite(values).all():
        return False
    hi, lo = float(values.max()), float(values.min())
    enough = len(np.unique(values)) >= 3 and (not allow_zero or np.count_nonzero(values) >= 3)
    return bool(hi > 0 and (hi - lo) / hi >= MIN_SPREAD and enough)
