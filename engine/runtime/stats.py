"""Per-step figures the engine returns from `step()` and the soak records as `steps/` rows."""

from __future__ import annotations

from typing import NamedTuple


class StepStats(NamedTuple):
    step: int  # engine step counter since start
    t: float  # wall clock (time.time()) at the end of the step
    engine_age_s: float  # seconds since the engine started
    phase: str  # "prefill", "decode" or "mixed"
    batch_size: int  # requests in the forward
    num_prefill_tokens: int  # new prompt tokens computed this step
    num_decode_tokens: int  # requests that decoded one token this step
    num_cached_tokens: int  # prompt tokens newly admitted from the prefix cache this step
    num_context_tokens: int  # sum over the batch of each request's context after the step
    max_context_tokens: int  # longest context in the batch
    num_running: int  # requests holding memory after the step
    num_waiting: int  # requests queued after the step
    kv_used_tokens: int  # KV slots held by requests and the cache
    kv_total_tokens: int
    kv_usage: float  # (total - free - evictable) / total, as FreeToken's `token usage`
    mamba_slots_used: int
    mamba_slots_total: int
    schedule_s: float  # choosing the batch, matching prefixes, allocating
    forward_s: float  # the model forward
    sample_s: float  # sampling and bookkeeping of new tokens
    num_retracted: int  # requests retracted this step for lack of KV
    num_finished: int
    expert_misses: int | None = None  # expert cache misses this step (offload backend)
    evict_s: float | None = None  # of schedule_s (and sample_s), time inside prefix-cache eviction

    @property
    def duration_s(self) -> float:
        return self.schedule_s + self.forward_s + self.sample_s
