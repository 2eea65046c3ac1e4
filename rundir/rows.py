"""The run directory's rows as types: one per table, each its table's columns (rundir.schema),
typed, and the event (a line of events.jsonl); a test keeps every one equal to its table, name
for name and type for type.

The soak builds its rows as these types and writes them through `RunStore.add`, which takes
each table's own; `rundir.reader.read_rows` gives the same types back. A row leaves out what
its source does not say (every key is optional to the type; the reader refuses parts without
the table's required columns).

A snapshot also has columns no table lists: figures a source names itself (the built-in
engine's fault signals and GC totals, what an engine's log states). They go beside the typed
row as `Snapshot.extra` and are written after the documented columns, each under its own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, TypedDict, TypeVar, cast

from rundir import schema


class RequestRow(TypedDict, total=False):
    """A requests row: schema.REQUEST_COLUMNS, typed."""

    request_id: str
    session: str | None
    turn: int | None
    kind: str | None
    t_send: float
    t_first_token: float | None
    t_first_content: float | None
    t_last_token: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    output_tokens: int | None
    reasoning_tokens: int | None
    status: str
    error: str | None
    engine_age_s: float | None
    engine_life: int | None


class StepRow(TypedDict, total=False):
    """A steps row: schema.STEP_COLUMNS, typed. Only `t` and `phase` are required there; a row
    leaves out what its source does not say."""

    t: float
    engine_age_s: float | None
    engine_life: int | None
    phase: str  # a StepPhase
    num_running_reqs: float | None
    num_queue_reqs: float | None
    num_tokens: float | None
    num_new_seqs: float | None
    new_tokens: float | None
    cached_tokens: float | None
    gen_tps: float | None
    input_tps: float | None
    step_time_s: float | None
    num_decode_tokens: float | None
    schedule_s: float | None
    forward_s: float | None
    sample_s: float | None
    token_usage: float | None
    full_token_usage: float | None
    swa_token_usage: float | None
    mamba_usage: float | None
    mamba_slots_used: float | None
    mamba_slots_total: float | None
    cache_hit_rate: float | None
    accept_len: float | None
    accept_rate: float | None
    num_preemptions: float | None
    num_deferred: float | None
    num_swapped_reqs: float | None
    swap_usage: float | None
    num_swa_tokens: float | None
    cuda_graph: float | None
    idle_slot_tokens: float | None
    request_tpot_s: float | None
    iteration_tokens: float | None


class SnapshotRow(TypedDict, total=False):
    """A snapshots row's documented columns: schema.SNAPSHOT_COLUMNS, typed (its other columns:
    `Snapshot.extra`)."""

    t: float
    engine_age_s: float | None
    engine_life: int | None
    radix_nodes: float | None
    radix_cached_tokens: float | None
    radix_evictable_tokens: float | None
    radix_locked_tokens: float | None
    mamba_slots_used: float | None
    mamba_snapshots: float | None
    kv_free_tokens: float | None
    kv_free_runs: float | None
    kv_largest_free_run: float | None
    kv_fragmentation: float | None
    expert_hits: float | None
    expert_misses: float | None
    expert_evictions: float | None
    expert_miss_rate: float | None
    num_queue_reqs: float | None
    token_usage: float | None
    cache_hit_rate: float | None
    num_preemptions: float | None
    rss_bytes: float | None
    heap_in_use_bytes: float | None
    heap_kept_bytes: float | None
    cpu_percent: float | None
    num_threads: float | None
    num_fds: float | None
    core_rss_bytes: float | None
    core_cpu_percent: float | None
    core_num_threads: float | None
    gc_gen2_collections: float | None
    gc_pause_s: float | None
    gpu_mem_bytes: float | None
    gpu_util: float | None
    driver_cpu_percent: float | None
    driver_rss_bytes: float | None
    driver_anon_bytes: float | None
    control_cpu_percent: float | None
    control_rss_bytes: float | None
    host_cpu_percent: float | None
    host_other_cpu_percent: float | None


class ProbeRow(TypedDict, total=False):
    """A probes row: schema.PROBE_COLUMNS, typed. `decode_tps` is a required column that a failed
    probe leaves empty."""

    t: float
    engine_age_s: float | None
    engine_life: int | None
    probe_id: str | None
    prompt_tokens: int | None
    output_tokens: int | None
    ttft_s: float | None
    decode_tps: float | None
    status: str | None
    reason: str | None
    role: str | None  # a ProbeRole
    cycle: int | None


class Snapshot(NamedTuple):
    """One snapshot: its documented columns, and the figures its sources named themselves."""

    row: SnapshotRow
    extra: dict[str, float]  # column -> value; no documented column among them

    @classmethod
    def of(cls, figures: Mapping[str, float]) -> Snapshot:
        """Figures named at run time, the documented columns among them typed and the rest extra."""
        row = {name: value for name, value in figures.items() if name in schema.SNAPSHOT_COLUMNS}
        extra = {name: value for name, value in figures.items() if name not in schema.SNAPSHOT_COLUMNS}
        return cls(cast(SnapshotRow, row), extra)  # SNAPSHOT_COLUMNS' names


class Event(NamedTuple):
    """One line of events.jsonl: schema.EVENT_COLUMNS typed, then its kind's own fields
    (schema.EVENT_KINDS says which; free, and written as given)."""

    t: float
    kind: str
    fields: dict[str, Any]  # the rest of its JSON object, in the order written
    line: int | None = None  # its line in events.jsonl, once read (rundir.reader.read_events)

    def to_json(self) -> dict[str, Any]:
        return {"t": self.t, "kind": self.kind, **self.fields}

    @classmethod
    def from_json(cls, obj: object, line: int | None = None) -> Event:
        """An event as written; ValueError for anything else."""
        if not isinstance(obj, dict) or "t" not in obj or "kind" not in obj:
            raise ValueError("expected an object with 't' and 'kind'")
        t, kind = obj["t"], obj["kind"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not isinstance(kind, str):
            raise ValueError(f"expected a number 't' and a word 'kind', found {t!r} and {kind!r}")
        return cls(t, kind, {k: v for k, v in obj.items() if k not in ("t", "kind")}, line)


_Row = TypeVar("_Row", RequestRow, StepRow, SnapshotRow, ProbeRow)


def said(row: _Row) -> _Row:
    """`row` without the columns its source left empty (None)."""
    return cast(_Row, {name: value for name, value in row.items() if value is not None})
