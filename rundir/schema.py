"""The run directory's schema: the one place its column names and version live.

The soak writer imports these constants; the diagnostics reader checks against them.
Documented in docs/run-directory.md. Bump SCHEMA_VERSION when a column changes meaning or a
required column is added; adding an optional column does not need a bump.

Times in parts are float Unix seconds (UTC); engine age is seconds since the engine process
the row belongs to started; `engine_life` counts engine starts from 0.
"""

from __future__ import annotations

from ground import Label

SCHEMA_VERSION = 2
# Versions this reader understands. Older ones are read with missing columns filled with nulls,
# and with the columns that have since been renamed under their new names (RENAMED).
READABLE_VERSIONS = (1, 2)
# table -> {old name: new name}. Version 2 gave the state slots one name in every table (and in the
# engine's /metrics and hooks): steps had num_mamba_used / num_mamba_total.
RENAMED: dict[str, dict[str, str]] = {
    "steps": {"num_mamba_used": "mamba_slots_used", "num_mamba_total": "mamba_slots_total"},
}

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
ENGINE_LOG = "engine.log"
ENGINE_CONFIG = "engine-config.json"  # the built-in engine's options, one JSON document (engine.server.cli)
CONTROL_LOG = "control.log"  # the control engine's own log (a twin's); diag reads engine.log only
METRICS = "metrics.prom"  # URL targets: every /metrics scrape, a scrape series diag reads
PROFILES = "profiles"
ANALYSIS = "analysis.json"
REPORT = "report.html"


class RunStatus(Label):
    """How a run stands (the manifest's `status`, the `stop` event's; what soak.run.Soak.run returns)."""

    RUNNING = "running"  # under way, or killed without a word (a SIGKILL): `soak resume` goes on
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"  # stopped (Ctrl-C, SIGTERM)
    CRASHED = "crashed"


class StopReason(Label):
    """Why a run ended (the manifest's `stop_reason`, the `stop` event's `reason`)."""

    DURATION = "duration"  # it served its planned length
    DECIDED = "decided"  # --until-decided: its running verdict was decided
    INTERRUPTED = "interrupted"
    CRASHED = "crashed"


# How a stop reason reads to a person (soak status), by its value: a manifest holds what it was written with.
STOP_TEXT: dict[str, str] = {
    StopReason.DURATION: "ran its planned length",
    StopReason.DECIDED: "stopped once decided (--until-decided)",
    StopReason.INTERRUPTED: "stopped by the user",
    StopReason.CRASHED: "the driver crashed",
}


class StepPhase(Label):
    """What a step or a log's window computed (the steps table's `phase`)."""

    PREFILL = "prefill"  # prompt tokens only
    DECODE = "decode"  # new tokens only
    MIXED = "mixed"  # both
    IDLE = "idle"  # neither (a log's window with no work)


class ProbeRole(Label):
    """Which engine a probe went to (the probes table's `role`)."""

    MAIN = "main"  # the soaked engine
    CONTROL = "control"  # its young twin, or the --control-target


# manifest.json: required fields first, then optional ones.
MANIFEST_REQUIRED = ("schema_version", "run_id", "status", "started_at")
MANIFEST_OPTIONAL = (
    "ended_at",
    "command",
    "configs",
    "trace",
    "target",
    "host",
    "tokdrift_version",
    "engine",
    "model",
    "steps_source",
    "elapsed_s",
    "num_requests",
    "resumes",
    "materialized",
    "steps_missed",
    "control",
    "affinity",
    "decided",
    "stop_reason",
)

# One table per folder: column -> (pyarrow-ish type name, required, meaning).
REQUEST_COLUMNS: dict[str, tuple[str, bool, str]] = {
    "request_id": ("string", True, "the soak's id of the call"),
    "session": ("string", False, "trace session (fresh id per trace loop)"),
    "turn": ("int64", False, "turn within the session"),
    "kind": ("string", False, "turn, compaction, subagent or probe"),
    "t_send": ("float64", True, "send time, Unix s"),
    "t_first_token": ("float64", False, "first streamed delta of any kind (reasoning, content, tool call)"),
    "t_first_content": ("float64", False, "first non-empty content delta"),
    "t_last_token": ("float64", False, "last streamed delta"),
    "prompt_tokens": ("int64", False, "usage.prompt_tokens"),
    "cached_tokens": ("int64", False, "usage.prompt_tokens_details.cached_tokens"),
    "output_tokens": ("int64", False, "usage.completion_tokens (includes reasoning)"),
    "reasoning_tokens": ("int64", False, "reasoning tokens where reported"),
    "status": ("string", True, "ok, error, refused (over-long), aborted"),
    "error": ("string", False, "error text when status is not ok"),
    "engine_age_s": ("float64", False, "engine age at send time"),
    "engine_life": ("int64", False, "engine start counter at send time"),
}

STEP_COLUMNS: dict[str, tuple[str, bool, str]] = {
    "t": ("float64", True, "end of the step or sample, Unix s"),
    "engine_age_s": ("float64", False, "engine age at t"),
    "engine_life": ("int64", False, "engine start counter"),
    "phase": ("string", True, "prefill, decode, mixed or idle"),
    "num_running_reqs": ("float64", False, "requests in the batch"),
    "num_queue_reqs": ("float64", False, "requests waiting"),
    "num_tokens": ("float64", False, "KV tokens in use (context attended by the batch)"),
    "num_new_seqs": ("float64", False, "prefill: sequences started"),
    "new_tokens": ("float64", False, "prefill: tokens computed"),
    "cached_tokens": ("float64", False, "prefill: tokens reused from the prefix cache"),
    "gen_tps": ("float64", False, "generation throughput, tokens/s over the step or sample"),
    "input_tps": ("float64", False, "prefill throughput, tokens/s"),
    "step_time_s": ("float64", False, "wall time of one decode step (built-in engine)"),
    "num_decode_tokens": ("float64", False, "tokens generated in the step"),
    "schedule_s": ("float64", False, "time in the scheduler"),
    "forward_s": ("float64", False, "time in the forward pass"),
    "sample_s": ("float64", False, "time in sampling"),
    "token_usage": ("float64", False, "KV usage, 0..1 (evictable counts as free)"),
    "full_token_usage": ("float64", False, "hybrid: full-attention KV usage, 0..1"),
    "swa_token_usage": ("float64", False, "SWA usage, 0..1"),
    "mamba_usage": ("float64", False, "state-slot usage, 0..1"),
    "mamba_slots_used": ("float64", False, "state slots in use"),
    "mamba_slots_total": ("float64", False, "state slots in all"),
    "cache_hit_rate": ("float64", False, "prefix cache hit rate, 0..1"),
    "accept_len": ("float64", False, "speculative: accepted length"),
    "accept_rate": ("float64", False, "speculative: acceptance rate"),
    "num_preemptions": ("float64", False, "preemptions/retractions in the step or sample"),
    "num_deferred": ("float64", False, "vLLM: deferred requests"),
    "num_swapped_reqs": ("float64", False, "vLLM V0: requests swapped out to CPU memory"),
    "swap_usage": ("float64", False, "vLLM V0: usage of the CPU swap space for KV, 0..1"),
    "num_swa_tokens": ("float64", False, "SWA: sliding-window tokens in use"),
    "cuda_graph": ("float64", False, "1 when the step ran as a CUDA graph"),
    "idle_slot_tokens": (
        "float64",
        False,
        "llama.cpp logs: KV tokens idle slots still hold (their last conversations)",
    ),
    "request_tpot_s": (
        "float64",
        False,
        "/metrics: mean time per output token of the requests that ended in the sample (vLLM's "
        "request_time_per_output_token_seconds)",
    ),
    "iteration_tokens": (
        "float64",
        False,
        "/metrics: mean tokens an engine step computed in the sample (vLLM's iteration_tokens_total)",
    ),
}


# The built-in engine's step figures (engine.runtime.stats.StepStats, as the server sends them)
# that the steps table names otherwise: the one place the two names of a figure meet
# (soak.samplers.step_row). The steps table keeps the names the engines' logs and /metrics use.
STEP_FROM_ENGINE: dict[str, str] = {
    "batch_size": "num_running_reqs",
    "num_waiting": "num_queue_reqs",
    "num_context_tokens": "num_tokens",
    "kv_usage": "token_usage",
    "num_retracted": "num_preemptions",
}

SNAPSHOT_COLUMNS: dict[str, tuple[str, bool, str]] = {
    "t": ("float64", True, "sample time, Unix s"),
    "engine_age_s": ("float64", False, "engine age at t"),
    "engine_life": ("int64", False, "engine start counter"),
    "radix_nodes": ("float64", False, "nodes in the radix tree"),
    "radix_cached_tokens": ("float64", False, "tokens held by the prefix cache"),
    "radix_evictable_tokens": ("float64", False, "cached tokens that could be evicted"),
    "radix_locked_tokens": ("float64", False, "cached tokens locked by running requests"),
    "mamba_slots_used": ("float64", False, "state slots in use (live + snapshots)"),
    "mamba_snapshots": ("float64", False, "state snapshots anchored in the tree"),
    "kv_free_tokens": ("float64", False, "free KV slots"),
    "kv_free_runs": ("float64", False, "runs of contiguous free KV slots"),
    "kv_largest_free_run": ("float64", False, "largest run of free KV slots"),
    "kv_fragmentation": ("float64", False, "1 - largest free run / free slots"),
    "expert_hits": ("float64", False, "expert cache hits, cumulative"),
    "expert_misses": ("float64", False, "expert cache misses, cumulative"),
    "expert_evictions": ("float64", False, "expert cache evictions, cumulative"),
    "expert_miss_rate": ("float64", False, "misses / (hits + misses) since the previous sample"),
    "num_queue_reqs": ("float64", False, "URL targets: requests waiting, from /metrics"),
    "token_usage": ("float64", False, "URL targets: KV usage, 0..1, from /metrics"),
    "cache_hit_rate": ("float64", False, "URL targets: prefix cache hits over lookups since the previous scrape"),
    "num_preemptions": ("float64", False, "URL targets: preemptions since the previous scrape, from /metrics"),
    "rss_bytes": ("float64", False, "engine process resident memory"),
    "heap_in_use_bytes": ("float64", False, "engine's malloc heap in allocated blocks (built-in engine, glibc)"),
    "heap_kept_bytes": ("float64", False, "engine's malloc heap freed but kept for reuse (built-in engine, glibc)"),
    "cpu_percent": ("float64", False, "engine process CPU"),
    "num_threads": ("float64", False, "engine process threads"),
    "num_fds": ("float64", False, "engine process open files"),
    "core_rss_bytes": (
        "float64",
        False,
        "the engine's busiest child process (most CPU time: vLLM's engine core or its worker, where the "
        "model runs): resident memory",
    ),
    "core_cpu_percent": ("float64", False, "the engine's busiest child process: CPU, percent of one core"),
    "core_num_threads": ("float64", False, "the engine's busiest child process: threads"),
    "gc_gen2_collections": ("float64", False, "Python full collections, cumulative"),
    "gc_pause_s": ("float64", False, "Python GC pause time since the previous sample"),
    "gpu_mem_bytes": ("float64", False, "GPU memory used"),
    "gpu_util": ("float64", False, "GPU utilisation, 0..1"),
    "driver_cpu_percent": ("float64", False, "the soak process's CPU, percent of one core"),
    "driver_rss_bytes": ("float64", False, "the soak process's resident memory"),
    "driver_anon_bytes": (
        "float64",
        False,
        "the soak process's own resident memory: RSS less its file-backed pages (library code, which "
        "another process loading the same libraries can fault in)",
    ),
    "control_cpu_percent": (
        "float64",
        False,
        "the control engine's CPU, percent of one core (when local; its child processes included)",
    ),
    "control_rss_bytes": (
        "float64",
        False,
        "the control engine's resident memory (when local; its child processes included)",
    ),
    "host_cpu_percent": ("float64", False, "the whole machine's CPU, percent of one core"),
    "host_other_cpu_percent": (
        "float64",
        False,
        "host minus engine (its child processes included), driver and control CPU, at least 0: other tenants",
    ),
}
# Snapshot columns that are bookkeeping, not engine internals, and are never suspects.
SNAPSHOT_META = ("t", "engine_age_s", "engine_life")
# Snapshot columns that measure the host and the soak around the engine, not the engine's
# internals: context for the analysis, never suspects.
SNAPSHOT_HOST = (
    "driver_cpu_percent",
    "driver_rss_bytes",
    "driver_anon_bytes",
    "control_cpu_percent",
    "control_rss_bytes",
    "host_cpu_percent",
    "host_other_cpu_percent",
)
# Cumulative counters (reset when the engine restarts); analysis reads them as rates. Extra
# columns a writer adds are counters when their name ends in `_total`.
SNAPSHOT_COUNTERS = ("expert_hits", "expert_misses", "expert_evictions", "gc_gen2_collections")

PROBE_COLUMNS: dict[str, tuple[str, bool, str]] = {
    "t": ("float64", True, "probe send time, Unix s"),
    "engine_age_s": ("float64", False, "engine age at t"),
    "engine_life": ("int64", False, "engine start counter"),
    "probe_id": ("string", False, "digest of the probe request (identical probes share it)"),
    "prompt_tokens": ("int64", False, "probe prompt length"),
    "output_tokens": ("int64", False, "probe output length"),
    "ttft_s": ("float64", False, "time to first token"),
    "decode_tps": ("float64", True, "decode tokens/s after the first token"),
    "status": ("string", False, "ok or why the probe failed"),
    "reason": ("string", False, "start, baseline (before the replay, no traffic), periodic, end or after_restart"),
    "role": ("string", False, "main (the soaked engine) or control (its young twin or --control-target)"),
    "cycle": ("int64", False, "probe cycle; a main probe and its control probe taken together share it"),
}

TABLES: dict[str, dict[str, tuple[str, bool, str]]] = {
    "requests": REQUEST_COLUMNS,
    "steps": STEP_COLUMNS,
    "snapshots": SNAPSHOT_COLUMNS,
    "probes": PROBE_COLUMNS,
}

# events.jsonl: one JSON object per line, {"t": Unix s, "kind": ..., ...fields}: the keys every
# event has, then each kind's own fields (EVENT_KINDS).
EVENT_COLUMNS: dict[str, tuple[str, bool, str]] = {
    "t": ("float64", True, "event time, Unix s"),
    "kind": ("string", True, "what happened: one of EVENT_KINDS"),
}
EVENT_KINDS: dict[str, str] = {
    "start": "the soak started (fields: run_id)",
    "resume": "the soak resumed after an interruption",
    "stop": "the soak ended (fields: status, reason: duration, decided, interrupted or crashed)",
    "engine_start": "an engine process started; engine age restarts at 0 (fields: pid, engine_life)",
    "engine_exit": "the engine exited (fields: exit_code, log_tail)",
    "engine_restart": "a deliberate restart (fields: reason); an engine_start follows",
    "engine_config": "what a URL target said of itself when it started, one fact each (fields: engine_life; "
    "detail, key=value: version, model, max_seq_len)",
    "fault_on": "a degradation mechanism was switched on (fields: fault; forwarded from an external engine's "
    "log, where a test instrument says it turned on: detail)",
    "probe": "a probe was sent (fields: probe_id)",
    "profile": "a profile was taken (fields: path, reason)",
    "dropped_request": "the engine refused a request (fields: request_id, input_tokens, limit)",
    "preemption": "requests were preempted or retracted (fields: count)",
    "prefill_append": "a notable prefill (fields: new_tokens, cached_tokens)",
    "changepoint": "a change point found during the run (fields: series)",
    "control_start": "a control engine process started; not a main engine life (fields: pid, control_life, url)",
    "control_restart": "a deliberate restart of the control engine (fields: reason)",
    "control_exit": "the control engine exited unasked (fields: exit_code, log_tail)",
    "control_off": "the control is off for the rest of the run (fields: why)",
    "baseline": "baseline probe cycles begin: the fresh engine, no traffic, before the replay (fields: cycles)",
    "decided": "the running verdict became decided (fields: verdict, cycle, elapsed_s, line)",
    "kv_no_space": "the engine's log: no room in the KV cache for a batch, retried smaller (fields: limit, the "
    "batch size named; detail, the line)",
    "kv_full": "the engine's log: no room in the KV cache even for the smallest batch; the requests failed "
    "(fields: limit, detail)",
}
# Events an external engine's log says, forwarded by the soak's log reader as they are read.
LOG_EVENT_KINDS = ("kv_no_space", "kv_full", "fault_on")
# Event kinds that start a new engine life.
STARTUP_KINDS = ("engine_start",)


def column_names(table: str) -> list[str]:
    """The columns of one table, in documented order."""
    return list(TABLES[table])


def required_columns(table: str) -> list[str]:
    return [name for name, (_, required, _) in TABLES[table].items() if required]
