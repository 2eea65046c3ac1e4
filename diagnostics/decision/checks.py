"""Checks: what could mislead a reading of the data, each ok / warn / fail with the numbers."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from diagnostics.evidence.healthy import KEPT_OUT
from diagnostics.labels import CheckStatus
from diagnostics.result import Check
from diagnostics.source.source import Source
from logformats import CLOCK_NOTES, LogInfo

AGREEMENT = 0.05  # client versus engine decode rate
FULL = 0.95  # KV usage at or above this reads as exhausted
QUEUE_GROWTH = 2.0
IDLE_SHARE = 0.5  # idle for more than this share of the life: said, and a high confidence lowered


def source_checks(source: Source, samples: pd.DataFrame) -> Iterator[Check]:
    info = source.log_info
    if info is not None:
        skipped = info.num_unknown_lines
        clean = skipped == 0 and info.num_bad_values == 0 and info.num_bad_lines == 0 and not info.notes
        yield Check(
            "log_lines",
            CheckStatus.OK if clean else CheckStatus.WARN,
            f"{info.format} log, {info.num_lines} lines: {info.num_step_lines} step lines, "
            f"{info.num_event_lines} events, {skipped} lines with no known prefix skipped, "
            f"{info.num_bad_lines} bad lines (impossible time, truncated) skipped, "
            f"{info.num_bad_values} malformed numbers left empty" + "".join(f"; {n}" for n in info.notes),
        )
        if info.clock != "wall":
            yield Check(
                "engine_age",
                CheckStatus.OK if info.clock == "relative" else CheckStatus.WARN,
                CLOCK_NOTES[info.clock]
                + (
                    ""
                    if info.age_known
                    else "; no engine startup line before the first step: counted from the log's first line"
                ),
            )
        elif not info.age_known:
            yield Check(
                "engine_age",
                CheckStatus.WARN,
                "no engine startup line before the first step: engine age is counted from the log's first line",
            )
        if info.missing:
            yield Check("log_figures", CheckStatus.WARN, what_log_lacks(info).strip())
    kept_out = samples[samples["excluded"] != ""]
    if len(samples):
        valid = samples[samples["excluded"] == ""]
        counts = kept_out["excluded"].value_counts()
        why = ", ".join(f"{counts[k]} {text}" for k, text in KEPT_OUT.items() if counts.get(k, 0))
        detail = (
            f"{len(kept_out)} of {len(samples)} decode lines hold other work in their window"
            + (f" ({why})" if why else "")
            + ", so their throughput is not a decode step's; excluded from "
            "the fit and the comparisons"
        )
        if len(kept_out) and len(valid):
            detail += (
                f" (median {kept_out['gen_tps'].median():.1f} tok/s against {valid['gen_tps'].median():.1f} "
                f"for the rest)"
            )
        yield Check(
            "decode_after_prefill_or_idle",
            CheckStatus.WARN if len(kept_out) > 0.5 * len(samples) else CheckStatus.OK,
            detail,
        )
        stalled = int(counts.get("prefill_pending", 0)) + int(counts.get("prefill_dominated", 0))
        if stalled:
            yield Check(
                "stalled_windows",
                CheckStatus.WARN,
                f"{stalled} windows held a prefill (running requests, little or nothing generated): kept out, "
                f"and a reminder that this log's windows mix prefill into decode",
            )
        idle = _idle_share(samples)
        if idle is not None:
            share, idle_s, span_s = idle
            yield Check(
                "idle_time",
                CheckStatus.WARN if share > IDLE_SHARE else CheckStatus.OK,
                f"no work for {idle_s / 3600:.1f} h of the {span_s / 3600:.1f} h the first engine life spans "
                f"({share:.0%}: idle, or lines an excerpt left out); its early life and trend are counted in "
                f"busy time",
            )


def what_log_lacks(info: LogInfo | None) -> str:
    """The figures a log lacks for a verdict from the log alone, each with the engine option that
    prints it, as a sentence for a refusal ("" when it lacks none that diag knows of)."""
    if info is None or not info.missing:
        return ""
    return f"This {info.format} log lacks " + "; and ".join(m.describe() for m in info.missing) + ". "


def _idle_share(samples: pd.DataFrame) -> tuple[float, float, float] | None:
    """(idle share, idle s, span s) of the first engine life with samples, from its age and busy time."""
    if samples.empty or "busy_s" not in samples:
        return None
    life = samples[samples["engine_life"] == samples["engine_life"].min()]
    span = float(life["engine_age_s"].max() - life["engine_age_s"].min())
    busy = float(life["busy_s"].max() - life["busy_s"].min())
    if span <= 0:
        return None
    idle = max(0.0, span - busy)
    return idle / span, idle, span


def engine_checks(source: Source, samples: pd.DataFrame) -> Iterator[Check]:
    steps, events = source.steps, source.events
    n_pre = int(events["kind"].eq("preemption").sum())
    pre_count = float(events.loc[events["kind"].eq("preemption"), "count"].fillna(1).sum())
    yield Check(
        "preemptions",
        CheckStatus.OK if n_pre == 0 else CheckStatus.WARN,
        "no preemptions or retractions"
        if n_pre == 0
        else f"{pre_count:.0f} requests preempted or retracted in {n_pre} episodes (first at "
        f"{pd.Timestamp(events.loc[events['kind'].eq('preemption'), 't'].iloc[0]).isoformat()}); "
        f"their recompute time lands in decode throughput",
    )
    yield _queue(steps)
    yield _usage(steps, "token_usage", "kv_exhaustion", "KV cache")
    yield _kv_space(events)
    yield _usage(steps, "mamba_usage", "state_slot_exhaustion", "state slots")
    dropped = events[events["kind"].eq("dropped_request")]
    refused = 0
    if not source.requests.empty and "status" in source.requests:
        refused = int(source.requests["status"].eq("refused").sum())
    total = len(dropped) + refused
    yield Check(
        "dropped_requests",
        CheckStatus.OK if total == 0 else CheckStatus.WARN,
        "no dropped requests"
        if total == 0
        else f"{len(dropped)} dropped by the engine, {refused} refused to the client (over-long prompts)",
    )
    yield _agreement(source, samples)
    yield _ttft(source.requests)


def _kv_space(events: pd.DataFrame) -> Check:
    """llama.cpp's log lines that say the KV cache had no room for a batch (logformats.messages):
    retried with a smaller batch, or given up on (the requests failed)."""
    hits = events[events["kind"].isin(("kv_no_space", "kv_full"))] if not events.empty else events
    if hits.empty:
        return Check("kv_space", CheckStatus.OK, "no batch found the KV cache without room")
    retried, failed = int(hits["kind"].eq("kv_no_space").sum()), int(hits["kind"].eq("kv_full").sum())
    first, last = (pd.Timestamp(t).isoformat() for t in (hits["t"].min(), hits["t"].max()))
    return Check(
        "kv_space",
        CheckStatus.WARN,
        f"{retried} times the KV cache had no room for a batch and the engine retried with a smaller "
        f"one, {failed} times not even for the smallest (its requests failed), from {first} to {last}: "
        f"a full KV cache, or one fragmented into holes too small for a batch (llama.cpp without KV "
        f"defragmentation); prefill runs in ever smaller batches",
    )


def _queue(steps: pd.DataFrame) -> Check:
    q = steps["num_queue_reqs"].dropna()
    if q.empty:
        return Check("queue_buildup", CheckStatus.OK, "no queue figures in the data")
    k = max(1, len(q) // 4)
    early, late = float(q.head(k).mean()), float(q.tail(k).mean())
    grew = late >= 1 and late > QUEUE_GROWTH * max(early, 0.5)
    return Check(
        "queue_buildup",
        CheckStatus.WARN if grew else CheckStatus.OK,
        f"mean queue {early:.1f} in the first quarter, {late:.1f} in the last (max {q.max():.0f})"
        + ("; requests wait longer as the run goes on" if grew else ""),
    )


def _usage(steps: pd.DataFrame, column: str, name: str, what: str) -> Check:
    u = steps[column].dropna()
    if u.empty:
        return Check(name, CheckStatus.OK, f"no {what} usage figures in the data")
    frac = float((u >= FULL).mean())
    return Check(
        name,
        CheckStatus.WARN if frac > 0.01 else CheckStatus.OK,
        f"{what} usage peaked at {u.max():.2f}; at or above {FULL} in {100 * frac:.1f}% of samples",
    )


def _agreement(source: Source, samples: pd.DataFrame) -> Check:
    req = source.requests
    needed = {"t_first_token", "t_last_token", "output_tokens"}
    if req.empty or not needed <= set(req.columns):
        return Check(
            "client_engine_agreement", CheckStatus.OK, "not checked: no client-side request timings in this source"
        )
    if samples.empty:  # transformers serve: no /metrics, no log with timings
        return Check(
            "client_engine_agreement",
            CheckStatus.OK,
            "not checked: the engine reports no decode timing of its own (no usable steps from its /metrics or log)",
        )
    r = req[req.get("status", "ok") == "ok"].dropna(subset=list(needed))
    span = (r["t_last_token"] - r["t_first_token"]).dt.total_seconds()
    r = r[(span > 0) & (r["output_tokens"] > 1)]
    if r.empty:
        return Check(
            "client_engine_agreement", CheckStatus.OK, "not checked: no streamed request with two or more tokens"
        )
    client = float(((r["output_tokens"] - 1) / span[r.index]).median())
    lo, hi = r["t_first_token"].min(), r["t_last_token"].max()
    eng = samples[(samples["t"] >= lo) & (samples["t"] <= hi) & (samples["excluded"] == "")]
    if eng.empty:
        return Check(
            "client_engine_agreement", CheckStatus.OK, "not checked: no engine samples while requests streamed"
        )
    engine = float((1.0 / eng["step_time_s"]).median())
    gap = abs(client - engine) / engine
    return Check(
        "client_engine_agreement",
        CheckStatus.WARN if gap > AGREEMENT else CheckStatus.OK,
        f"client-side decode {client:.1f} tok/s per request, engine {engine:.1f} ({100 * gap:.1f}% apart; "
        f"limit {100 * AGREEMENT:.0f}%)",
    )


def _ttft(req: pd.DataFrame) -> Check:
    if req.empty or "t_send" not in req:
        return Check("ttft_content_only", CheckStatus.OK, "not checked: no client-side requests in this source")
    has_any = req["t_first_token"].notna().sum() if "t_first_token" in req else 0
    has_content = req["t_first_content"].notna().sum() if "t_first_content" in req else 0
    if has_any == 0 and has_content > 0:
        return Check(
            "ttft_content_only",
            CheckStatus.WARN,
            "TTFT is known only to the first content delta: reasoning time is counted as prefill",
        )
    if has_any == 0:
        return Check("ttft_content_only", CheckStatus.OK, "no TTFT figures in the requests")
    both = req.dropna(subset=["t_first_token", "t_first_content"]) if has_content else req.iloc[:0]
    lag = (both["t_first_content"] - both["t_first_token"]).dt.total_seconds() if len(both) else pd.Series(dtype=float)
    detail = f"TTFT taken at the first delta of any kind for {has_any} requests"
    if len(lag) and float(np.median(lag)) > 0:
        detail += f"; content came a median {float(np.median(lag)):.2f} s later (reasoning), reported apart"
    return Check("ttft_content_only", CheckStatus.OK, detail)
