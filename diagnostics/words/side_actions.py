"""What an operator must do whatever the verdict: a line each, the action first, beside the
opening's next step (diagnostics.words.opening, its **Also:** lines).

Engine age is a question of weeks; requests that failed or a KV cache that ran out of room are a
problem today, whatever the verdict says of age. Each is said as what to do, then what happened,
from the source's own records where it holds them (the requests' statuses, the engine's events),
times to the second.
"""

from __future__ import annotations

from diagnostics.labels import CheckStatus
from diagnostics.result import Analysis, Check
from diagnostics.source.source import Source
from diagnostics.words.details import failed_rows
from diagnostics.words.said import between, stamp, times, to_the_second

# What an operator must know whatever the verdict: the service itself failed or ran out of room.
OPERATOR_CHECKS = ("kv_space", "kv_exhaustion", "dropped_requests", "preemptions", "queue_buildup")
MORE_KV = "Give the engine more KV cache or fewer parallel requests"


def side_actions(a: Analysis, source: Source | None = None) -> tuple[str, ...]:
    """What an operator must do whatever the verdict, a line each, the action first: requests that
    failed, a KV cache that ran out of room, requests dropped or preempted, a queue that grew."""
    out = []
    requests = getattr(source, "requests", None)
    if requests is not None:
        failed = failed_rows(requests, "requests")
        if failed:
            out.append(f"Find out why {failed}: the engine's log holds their errors.")
    for c in a.checks:
        if c.status == CheckStatus.WARN and c.name in OPERATOR_CHECKS:
            out.append(_operator_action(a, source, c))
    return tuple(out)


def _operator_action(a: Analysis, source: Source | None, c: Check) -> str:
    """An operator check's warning as a line, the action first: the KV cache's failures from the
    events where the source holds them; another check's detail as it is (to the second)."""
    events = getattr(source, "events", None)
    if c.name == "kv_space" and events is not None and not events.empty:
        hits = events[events["kind"].isin(("kv_no_space", "kv_full"))]
        failed, retried = int(hits["kind"].eq("kv_full").sum()), int(hits["kind"].eq("kv_no_space").sum())
        span_ = between(stamp(hits["t"].min(), a.source_kind), stamp(hits["t"].max(), a.source_kind))
        said = [f"{times(failed)} so that its requests failed"] if failed else []
        said += [f"{times(retried)} a batch was retried smaller"] if retried else []
        return f"{MORE_KV}: its KV cache ran out of room, {' and '.join(said)} ({span_})."
    detail = to_the_second(c.detail).rstrip(".")
    if c.name == "kv_exhaustion":
        return f"{MORE_KV}: its {detail}."
    if c.name == "preemptions":
        return f"{MORE_KV}: {detail.split('; ', 1)[0]}."
    if c.name == "dropped_requests":
        return f"Check the engine's limits on prompt length and queueing: requests were lost ({detail})."
    if c.name == "queue_buildup":
        return f"Serve fewer requests at once or add capacity: the queue grew ({detail})."
    return f"{detail}."
