"""The step record's lines: the contract between the writer (steps.py, inside vLLM) and the reader
(logformats.vllm_steps, inside diag). One JSON object a line, its `kind` first:

    engine_start   once per engine start: the time, the writer, vLLM's version and configuration
    step           one engine iteration: what vLLM's stat loggers are handed for it
    fault_on       a test instrument's fault began (TOKDRIFT_VLLM_FAULT)
    figures        a process's own figures at a moment (`pid`, `root`, then FIGURE_KEYS): the fault's
                   state, the garbage collector's, the host's CPU beside vLLM (figures.py)

Times are Unix seconds (`t`); the start line says the host's UTC offset, so that a reader can show
the times a vLLM log beside it shows. A key whose figure the iteration did not carry is left out.
"""

from __future__ import annotations

FORMAT = "tokdrift-vllm-steps"  # the start line's `format`
VERSION = 1  # the start line's `version`: a reader refuses a newer one
STEPS_ENV = "TOKDRIFT_VLLM_STEPS"  # the file to append the record to; unset: no record
FAULT_ENV = "TOKDRIFT_VLLM_FAULT"  # a fault to switch on; unset: none
ROOT_ENV = "TOKDRIFT_VLLM_ROOT"  # set by the plugins in vLLM's first process, for those it starts: its pid

ENGINE_START = "engine_start"
STEP = "step"
FAULT_ON = "fault_on"
FIGURES = "figures"

# A step line's figures: key -> what it is (vLLM's SchedulerStats / IterationStats field it comes from).
STEP_KEYS: dict[str, str] = {
    "t": "when the frontend received the iteration's outputs, Unix s (IterationStats.iteration_timestamp)",
    "running": "requests running after the iteration (SchedulerStats.num_running_reqs)",
    "waiting": "requests waiting (num_waiting_reqs)",
    "deferred": "waiting requests deferred (num_skipped_waiting_reqs)",
    "kv_usage": "KV cache usage, 0..1 (kv_cache_usage; cached blocks no request holds count as free)",
    "gen_tokens": "tokens generated (IterationStats.num_generation_tokens), first tokens included",
    "first_tokens": "requests whose first token came in the iteration: their prefill ended (time_to_first_tokens_iter)",
    "decode_reqs": "requests that generated a token past their first (inter_token_latencies_iter)",
    "prompt_tokens": "prompt tokens of the prefills that ended (prompt_token_stats.total; 0.15.1: num_prompt_tokens)",
    "computed_tokens": "of them, computed (prompt_token_stats.computed; not in 0.15.1)",
    "cached_tokens": "of them, reused from a cache (prompt_token_stats.cached_tokens)",
    "prefix_queries": "prefix-cache lookups, tokens (prefix_cache_stats.queries)",
    "prefix_hits": "prefix-cache hits, tokens (prefix_cache_stats.hits)",
    "preempted": "requests preempted (num_preempted_reqs)",
    "finished": "requests that finished (finished_requests)",
    "itl_s": "the iteration's time on the engine's clock: the shortest inter-token latency of the step",
    # With vLLM's --enable-logging-iteration-details (SchedulerStats.iteration_details):
    "sched_prompt_reqs": "requests scheduled for prefill (num_ctx_requests)",
    "sched_prompt_tokens": "prompt tokens scheduled (num_ctx_tokens)",
    "sched_gen_reqs": "requests scheduled for decode (num_generation_requests)",
    "sched_gen_tokens": "decode tokens scheduled (num_generation_tokens)",
    "elapsed_s": "the engine's wait for the model's output (elapsed_ms / 1000)",
}

# A figures line's figures: key -> what it is. A figure is one process's (the line's `pid`; `root` is
# the pid of its vLLM's first process, the API server, as the start line states it; `process`, where
# said, is the process's name in vLLM: MainProcess, EngineCore_DP0, VllmWorker-0). A reader sums a
# figure over the processes of one engine life. A name ending in `_total` is cumulative (from the
# process's start), one ending in `_s_total` cumulative seconds, which diag reads as a share of the
# engine's wall time.
FAULT_FIGURES: dict[str, str] = {
    "fault_entries": "entries the step-cost fault holds (vllm_plugin/fault.py): every step walks them all",
    "fault_walk_s_total": "seconds the step-cost fault's walks took, in all, in the process that runs the model",
}
# The step record's writer states these every HOST_S (host.py), as the soak's host sampler names them.
HOST_FIGURES: dict[str, str] = {
    "host_cpu_percent": "the host's CPU busy, percent of one core",
    "host_other_cpu_percent": "of it, what this vLLM (its API server and every process under it) did not spend",
}
# Every vLLM process's garbage collector (gcstats.py), under the built-in engine's snapshot names.
GC_FIGURES: dict[str, str] = {
    "gc_pause_s_total": "seconds inside Python's garbage collector, every generation (gc.callbacks)",
    "gc_full_pause_s_total": "of them, inside full (generation 2) collections",
    "gc_gen2_collections": "full collections",
    "gc_collections_total": "collections of every generation",
    "gc_collected_total": "objects the collections found unreachable and freed: what only the cycle "
    "collector frees (reference cycles), since reference counting frees the rest at once",
    "gc_frozen_objects": "objects gc.freeze() moved out of the collector's reach (vLLM freezes its start-up heap)",
}
FIGURE_KEYS: dict[str, str] = {**FAULT_FIGURES, **HOST_FIGURES, **GC_FIGURES}
