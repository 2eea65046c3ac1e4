"""Tests of tokdrift's vLLM plugins, without vLLM: stand-ins for the stats objects vLLM hands a
stat logger, with the fields 0.27.1 and 0.32.0 give them (vllm/v1/metrics/stats.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace


@dataclass
class PrefixCacheStats:
    queries: int = 0
    hits: int = 0


@dataclass
class IterationDetails:  # SchedulerIterationDetails (--enable-logging-iteration-details)
    num_ctx_requests: int
    num_ctx_tokens: int
    num_generation_requests: int
    num_generation_tokens: int
    elapsed_ms: float
    is_dummy: bool = False


@dataclass
class SchedulerStats:
    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    iteration_details: IterationDetails | None = None


@dataclass
class PromptTokenStats:
    computed: int = 0
    cached_tokens: int = 0
    total: int = 0


@dataclass
class IterationStats:
    iteration_timestamp: float
    num_generation_tokens: int = 0
    prompt_token_stats: PromptTokenStats = field(default_factory=PromptTokenStats)
    num_preempted_reqs: int = 0
    finished_requests: list[object] = field(default_factory=list)
    time_to_first_tokens_iter: list[float] = field(default_factory=list)
    inter_token_latencies_iter: list[float] = field(default_factory=list)


def decode_step(t: float, batch: int, step_s: float, usage: float = 0.1, finished: int = 0) -> tuple:
    """The stats of a step in which `batch` requests each generated one token, `step_s` after the last."""
    return (
        SchedulerStats(num_running_reqs=batch - finished, kv_cache_usage=usage),
        IterationStats(
            t,
            num_generation_tokens=batch,
            finished_requests=[object()] * finished,
            inter_token_latencies_iter=[step_s] * batch,
        ),
    )


def prefill_end(t: float, prompt: int, cached: int = 0, decoding: int = 0, step_s: float = 0.05) -> tuple:
    """A step whose prefill of `prompt` tokens ended (its first token), beside `decoding` decodes."""
    return (
        SchedulerStats(
            num_running_reqs=decoding + 1,
            kv_cache_usage=0.1,
            prefix_cache_stats=PrefixCacheStats(queries=prompt, hits=cached),
        ),
        IterationStats(
            t,
            num_generation_tokens=decoding + 1,
            prompt_token_stats=PromptTokenStats(computed=prompt - cached, cached_tokens=cached, total=prompt),
            time_to_first_tokens_iter=[0.3],
            inter_token_latencies_iter=[step_s] * decoding,
        ),
    )


def vllm_config(num_blocks: int = 1000, block_size: int = 16, details: bool = False) -> SimpleNamespace:
    """The parts of a VllmConfig the start line reads."""
    return SimpleNamespace(
        model_config=SimpleNamespace(
            model="/models/Qwen3-8B",
            served_model_name=["qwen3"],
            dtype="bfloat16",
            quantization=None,
            max_model_len=32768,
            enforce_eager=False,
        ),
        cache_config=SimpleNamespace(
            block_size=block_size, num_gpu_blocks=num_blocks, enable_prefix_caching=True, cache_dtype="auto"
        ),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1),
        scheduler_config=SimpleNamespace(max_num_seqs=256, max_num_batched_tokens=2048, async_scheduling=False),
        observability_config=SimpleNamespace(enable_logging_iteration_details=details),
    )
