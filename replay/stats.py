"""What a trace holds: sessions, calls, lengths, prefix reuse, appends, compactions, over-long calls."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from replay.trace import Call, Trace


@dataclass(frozen=True, kw_only=True)
class Distribution:
    count: int
    mean: float
    min: float
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Distribution:
        if not values:
            return cls(count=0, mean=0.0, min=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
        a = np.asarray(values, dtype=float)
        p50, p90, p99 = np.percentile(a, [50, 90, 99])
        return cls(
            count=len(a),
            mean=float(a.mean()),
            min=float(a.min()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            max=float(a.max()),
        )


@dataclass(frozen=True, kw_only=True)
class TraceStats:
    source: str
    block_size: int
    num_sessions: int
    num_calls: int
    duration: float  # seconds from the first send to the last send
    calls_by_kind: dict[str, int]
    input_tokens: Distribution
    output_tokens: Distribution
    session_peak_input: Distribution  # largest prompt of each session
    total_input_tokens: int
    total_output_tokens: int
    prefix_reuse: float  # share of input blocks whose id an earlier call already sent
    num_appends: int  # calls that extend the previous call of their session
    append_tokens: Distribution  # new tokens of those calls
    num_compactions: int
    max_context: int | None  # the limit over-long calls are counted against
    num_over_long: int  # input + output above max_context (0 when no limit is known)
    num_skipped_lines: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def trace_stats(trace: Trace, max_context: int | None = None) -> TraceStats:
    """Figures of a trace; `max_context` defaults to the header's meta.max_context."""
    calls = sorted(trace.calls, key=lambda c: (c.t, c.session, c.turn))
    block = trace.header.block_size
    if max_context is None:
        limit = trace.header.meta.get("max_context")
        max_context = limit if isinstance(limit, int) else None
    seen: set[int] = set()
    num_blocks = num_reused = 0
    last_in_session: dict[str, Call] = {}
    peak: dict[str, int] = {}
    appends: list[float] = []
    for call in calls:
        num_blocks += len(call.hash_ids)
        num_reused += sum(1 for h in call.hash_ids if h in seen)
        seen.update(call.hash_ids)
        prev = last_in_session.get(call.session)
        if prev is not None and call.kind != "compaction":
            shared = _common_prefix(prev.hash_ids, call.hash_ids)
            # An append keeps every block of the previous prompt but its last (maybe partial) one.
            if shared >= max(len(prev.hash_ids) - 1, 1) and call.input_tokens > prev.input_tokens:
                appends.append(call.input_tokens - min(shared * block, call.input_tokens))
        last_in_session[call.session] = call
        peak[call.session] = max(peak.get(call.session, 0), call.input_tokens)
    starts = [c.t for c in calls]
    return TraceStats(
        source=trace.header.source,
        block_size=block,
        num_sessions=len(peak),
        num_calls=len(calls),
        duration=(max(starts) - min(starts)) if starts else 0.0,
        calls_by_kind=dict(Counter(c.kind for c in calls)),
        input_tokens=Distribution.of([c.input_tokens for c in calls]),
        output_tokens=Distribution.of([c.output_tokens for c in calls]),
        session_peak_input=Distribution.of(list(peak.values())),
        total_input_tokens=sum(c.input_tokens for c in calls),
        total_output_tokens=sum(c.output_tokens for c in calls),
        prefix_reuse=num_reused / num_blocks if num_blocks else 0.0,
        num_appends=len(appends),
        append_tokens=Distribution.of(appends),
        num_compactions=sum(1 for c in calls if c.kind == "compaction"),
        max_context=max_context,
        num_over_long=0
        if max_context is None
        else sum(1 for c in calls if c.input_tokens + c.output_tokens > max_context),
        num_skipped_lines=trace.num_bad,
    )


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
