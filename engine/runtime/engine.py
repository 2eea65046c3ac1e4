"""The engine loop: requests in, one batched forward per `step()`, tokens out, hooks on the side.

    engine = Engine(EngineConfig())
    engine.add_request([1, 2, 3], SamplingParams(max_tokens=8, temperature=0))
    while engine.has_work():
        stats = engine.step()          # StepStats, or None when nothing ran
        for update in engine.take_updates():
            ...                        # new token ids per request, and which finished

Not thread-safe: one thread drives `step()`; the server hands requests over through it.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence

import torch

from engine.cache import make_prefix_cache
from engine.errors import EngineError
from engine.memory.allocator import SlotAllocator, available_memory_bytes, kv_tokens_for_memory
from engine.memory.kv_pool import KVPool, kv_bytes_per_token
from engine.memory.state_pool import StatePool
from engine.model.attention_backend import make_attention_backend
from engine.model.checkpoint import default_checkpoint
from engine.model.experts import ExpertProvider
from engine.model.fast import use_fast_layers
from engine.model.forward_batch import ForwardBatch, RequestSlice
from engine.model.loader import load_model
from engine.moe.provider import make_expert_provider
from engine.runtime import logfmt
from engine.runtime.config import EngineConfig, EngineConfigError
from engine.runtime.faults import GcPressure, OutputBuffer
from engine.runtime.gcstats import gc_monitor
from engine.runtime.hooks import EngineHooks
from engine.runtime.hostmalloc import tune_host_malloc
from engine.runtime.request import Request, RequestUpdate
from engine.runtime.scheduler import ScheduledBatch, Scheduler
from engine.runtime.stats import Phase, StepStats
from engine.sampling import SamplingParams, make_generator, sample, stop_ids
from engine.tokenizer import load_tokenizer

logger = logging.getLogger("engine")


class RequestRejected(EngineError):
    """A request the engine can never serve (longer than the KV pool, bad token ids)."""


class Engine(EngineHooks):
    def __init__(self, config: EngineConfig = EngineConfig()) -> None:
        self.config = config
        self.start_time = time.time()
        self.device = torch.device(
            config.device if config.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
        )
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)  # process-wide: the engine owns its process when serving
        if self.device.type == "cpu":
            tune_host_malloc()  # a CPU step's large temporaries stay in the heap (hostmalloc.py)
        self.checkpoint = config.model or str(default_checkpoint())
        self.experts = self._make_experts()
        self.model = load_model(self.checkpoint, dtype=config.dtype, device=self.device, experts=self.experts)
        mc = self.model_config = self.model.config
        self.forward_path = config.forward_path
        if config.forward_path == "fast":
            why_not = use_fast_layers(self.model)
            if why_not is not None:
                self.forward_path = "reference"
                logger.warning("Fast path off: %s; every forward runs through the reference layers", why_not)
        self.tokenizer = load_tokenizer(self.checkpoint, mc.vocab_size, mc.eos_token_ids)
        self.has_linear_layers = bool(mc.linear_attention_layers)
        if config.cache_type == "radix" and self.has_linear_layers:
            raise EngineConfigError(
                "cache_type 'radix' reuses KV only, but this model has linear-attention layers whose "
                "state cannot be rebuilt from KV; use 'hybrid_radix' or 'none'"
            )
        dtype = self.model.model.embed_tokens.weight.dtype
        self.state_pool = StatePool(
            config.mamba_slots,
            mc.linear_attention_layers,
            mc.linear_conv_dim,
            mc.linear_conv_kernel_dim,
            mc.linear_num_value_heads,
            mc.linear_key_head_dim,
            mc.linear_value_head_dim,
            device=self.device,
        )
        kv_tokens = config.kv_tokens or kv_tokens_for_memory(
            available_memory_bytes(self.device),
            config.memory_ratio,
            kv_bytes_per_token(len(mc.full_attention_layers), mc.num_key_value_heads, mc.head_dim, dtype),
            config.page_size,
            config.max_kv_tokens,
        )
        self.kv_pool = KVPool(
            kv_tokens, mc.full_attention_layers, mc.num_key_value_heads, mc.head_dim, dtype=dtype, device=self.device
        )
        faults = config.fault_set
        self.kv_allocator = SlotAllocator(
            kv_tokens, config.page_size, name="kv", scatter_seed=config.seed if faults.kv_scatter else None
        )
        self.state_allocator = SlotAllocator(config.mamba_slots, 1, name="state")
        leak_limit = config.mamba_slots - config.max_running_requests if faults.snapshot_leak else None
        # snapshot-leak from the fault_leak_after-th finished request on (from the start where it is 0)
        self._leak_onset = (
            (leak_limit, config.fault_leak_after) if leak_limit is not None and config.fault_leak_after > 0 else None
        )
        self.cache = make_prefix_cache(
            config.cache_type,
            self.kv_allocator,
            self.state_allocator,
            eviction_policy="lru_page_scan" if faults.eviction_scan else "lru",
            leak_snapshots_limit=None if self._leak_onset is not None else leak_limit,
        )
        self.scheduler = Scheduler(
            self.kv_allocator,
            self.state_allocator,
            self.state_pool,
            self.cache,
            config.max_running_requests,
            config.chunked_prefill_size,
            self.has_linear_layers,
            mixed_chunk=config.mixed_chunk,
        )
        self.attention = make_attention_backend(config.attention_backend, self.device)
        self.max_context = min(kv_tokens, mc.max_position_embeddings)
        self._requests: dict[str, Request] = {}
        self._updates: list[Request] = []
        self._ids = itertools.count()
        self._step = 0
        self._num_decode_steps = 0
        self._last_misses = 0  # expert cache misses at the previous step
        self._gen_meter = logfmt.GenThroughputMeter()
        self._idle_logged = False
        self.num_dropped = 0
        self._num_finished = 0  # requests finished in this engine: what the faults' onsets count
        self._gc_pressure: GcPressure | None = GcPressure() if faults.gc_pressure else None
        self._output_buffer: OutputBuffer | None = (
            OutputBuffer(self.model_config.vocab_size, config.fault_buffer_rows, config.fault_after)
            if faults.output_buffer
            else None
        )
        self._gc = gc_monitor()
        self._log_startup(kv_tokens)

    # --- requests ---------------------------------------------------------------------------

    def add_request(
        self, prompt: str | Sequence[int], params: SamplingParams, request_id: str | None = None
    ) -> Request:
        """Queue a request; raises RequestRejected (and logs FreeToken's drop warning) when it
        can never fit. A request whose prompt fits but whose max_tokens would not gets its
        max_tokens lowered, as FreeToken does."""
        request_id = request_id if request_id is not None else str(next(self._ids))
        if request_id in self._requests:
            raise RequestRejected(f"request {request_id}: a request with this id is already running")
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        vocab = self.model_config.vocab_size
        if not ids:
            raise RequestRejected(f"request {request_id}: expected a non-empty prompt, found no tokens")
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestRejected(f"request {request_id}: token ids must be in [0, {vocab}), found {bad}")
        if len(ids) >= self.max_context:
            self.num_dropped += 1
            logger.warning(logfmt.dropped_line(len(ids), self.max_context, request_id))
            raise RequestRejected(
                f"request {request_id}: input of {len(ids)} tokens exceeds the engine's "
                f"context of {self.max_context} tokens"
            )
        if len(ids) + params.max_tokens > self.max_context:
            params = _replace_max_tokens(params, self.max_context - len(ids))
            logger.info("Adjust max_tokens to %d for request %s.", params.max_tokens, request_id)
        request = Request(
            request_id=request_id,
            prompt_ids=ids,
            params=params,
            stop_ids=stop_ids(params, self.tokenizer.eos_token_ids),
            arrival=time.time(),
            generator=make_generator(params, self.device),
        )
        self._requests[request_id] = request
        self.scheduler.add(request)
        return request

    def abort(self, request_id: str) -> bool:
        """Stop a request and free its memory; False when no such request is live."""
        request = self._requests.get(request_id)
        if request is None or request.is_finished:
            return False
        request.finish_reason = "abort"
        self._finish(request)
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def take_updates(self) -> list[RequestUpdate]:
        """New tokens of every request since the last call, and which requests finished."""
        out = []
        for request in self._updates:
            new = request.output_ids[request.num_sent :]
            request.num_sent = len(request.output_ids)
            out.append(
                RequestUpdate(
                    request_id=request.request_id,
                    new_token_ids=new,
                    finished=request.is_finished,
                    finish_reason=request.finish_reason,
                    num_prompt_tokens=len(request.prompt_ids),
                    num_cached_tokens=request.num_cached_tokens or 0,
                    num_output_tokens=len(request.output_ids),
                )
            )
        self._updates = []
        return out

    def output_text(self, request: Request) -> str:
        """The request's output text, without stop ids and cut before a matched stop string."""
        text = self._decode_output(request)
        return text if request.stop_text_len is None else text[: request.stop_text_len]

    def _decode_output(self, request: Request) -> str:
        return self.tokenizer.decode([t for t in request.output_ids if t not in request.stop_ids])

    # --- the loop ---------------------------------------------------------------------------

    def step(self) -> StepStats | None:
        """Run one scheduled batch; None when there was nothing to run."""
        t0 = time.perf_counter()
        evict_s0 = self.cache.eviction_s
        batch = self.scheduler.schedule()
        if batch is None:
            if not self._idle_logged:
                logger.info(logfmt.IDLE_LINE)
                self._idle_logged = True
            return None
        self._idle_logged = False
        if batch.retracted:
            logger.warning(logfmt.retract_line(len(batch.retracted)))
        num_decode = sum(1 for s in batch.items if s.is_decode)
        num_prefill = sum(s.num_new_tokens for s in batch.items if not s.is_decode)
        logits = None
        t1 = time.perf_counter()
        if batch.items:
            slices = []
            for s in batch.items:
                request, end = s.request, s.request.num_computed + s.num_new_tokens
                assert request.state_slot is not None  # a scheduled request holds its state slot
                slices.append(
                    RequestSlice(
                        request.token_ids(request.num_computed, end),
                        request.num_computed,
                        request.kv_slots[:end],
                        request.state_slot,
                    )
                )
            forward_batch = ForwardBatch.build(slices, device=self.device)
            t1 = time.perf_counter()
            logits = self.model(forward_batch, self.kv_pool, self.state_pool, self.attention)  # [B, V]
            if self._output_buffer is not None:
                logits = self._output_buffer.write(logits)
        t2 = time.perf_counter()
        num_finished = self._after_forward(batch, logits)
        if self._gc_pressure is not None:
            self._gc_pressure.on_step_end()
        t3 = time.perf_counter()
        self._step += 1
        stats = self._stats(
            batch, num_prefill, num_decode, t1 - t0, t2 - t1, t3 - t2, num_finished, self.cache.eviction_s - evict_s0
        )
        self._log_step(batch, stats)
        return stats

    def _after_forward(self, batch: ScheduledBatch, logits: torch.Tensor | None) -> int:
        num_finished = 0
        now = time.time()
        for i, item in enumerate(batch.items):
            request = item.request
            samples, prefill = item.samples, not item.is_decode
            request.num_computed += item.num_new_tokens
            if prefill:
                # Anchor the state at every chunk boundary, the prompt's end included: an agent's
                # next turn often shares the whole prompt but not the output as generated.
                self.scheduler.chunk_done(request, evict=samples)
            if not samples:
                continue
            assert logits is not None  # a batch with items ran a forward
            token = sample(logits[i], request.params, request.generator)  # logits[i]: [V]
            request.output_ids.append(token)
            if request.first_token_time is None:
                request.first_token_time = now
            self._updates.append(request)
            reason = self._stop_reason(request, token)
            if reason is not None:
                request.finish_reason = reason
                self._finish(request)
                num_finished += 1
        return num_finished

    def _stop_reason(self, request: Request, token: int) -> str | None:
        if token in request.stop_ids:
            return "stop"
        if request.params.stop:
            text = self._decode_output(request)
            hits = [text.find(s) for s in request.params.stop if s in text]
            if hits:
                request.stop_text_len = min(hits)
                return "stop"
        if len(request.output_ids) >= request.params.max_tokens:
            return "length"
        return None

    def _finish(self, request: Request) -> None:
        self.scheduler.finish(request)
        request.finish_time = time.time()
        self._requests.pop(request.request_id, None)
        if request not in self._updates:
            self._updates.append(request)
        if self._gc_pressure is not None:
            self._gc_pressure.on_finish(
                request.request_id, request.finish_time, request.prompt_ids + request.output_ids
            )
        self._num_finished += 1
        if self._output_buffer is not None:
            self._output_buffer.on_finish(self._num_finished)
        if self._leak_onset is not None and self._num_finished == self._leak_onset[1]:
            self.cache.leak_snapshots(self._leak_onset[0])

    # --- hooks ------------------------------------------------------------------------------

    def settle_step_counters(self) -> None:
        """Count the next step's deltas from now: after work that was no step (the warm-up)."""
        self._last_misses = self.experts.num_misses or 0

    @property
    def engine_age_s(self) -> float:
        return time.time() - self.start_time

    @property
    def num_steps(self) -> int:
        """Steps run since start: the `step` of the newest StepStats."""
        return self._step

    def check_integrity(self) -> None:
        self.scheduler.check_integrity()
        self.experts.check_integrity()

    # --- internals --------------------------------------------------------------------------

    def _make_experts(self) -> ExpertProvider:
        return make_expert_provider(
            self.config.moe_backend, self.config.moe_cache_size, self.device, thrash=self.config.fault_set.expert_thrash
        )

    def _stats(
        self,
        batch: ScheduledBatch,
        num_prefill: int,
        num_decode: int,
        schedule_s: float,
        forward_s: float,
        sample_s: float,
        num_finished: int,
        evict_s: float,
    ) -> StepStats:
        contexts = [s.request.num_computed for s in batch.items]
        kv_total = self.kv_allocator.num_slots
        kv_used = self.kv_allocator.num_used
        evictable = self.cache.evictable_tokens
        misses = self.experts.num_misses  # a counter, not the per-layer stats(): this runs every step
        if misses is not None:
            misses, self._last_misses = misses - self._last_misses, misses
        return StepStats(
            step=self._step,
            t=time.time(),
            engine_age_s=self.engine_age_s,
            phase=batch.phase,
            batch_size=len(batch.items),
            num_prefill_tokens=num_prefill,
            num_decode_tokens=num_decode,
            num_cached_tokens=batch.num_cached_tokens,
            num_context_tokens=sum(contexts),
            max_context_tokens=max(contexts, default=0),
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_used_tokens=kv_used,
            kv_total_tokens=kv_total,
            kv_usage=(kv_used - evictable) / kv_total,
            mamba_slots_used=self.state_allocator.num_used,
            mamba_slots_total=self.state_allocator.num_slots,
            schedule_s=schedule_s,
            forward_s=forward_s,
            sample_s=sample_s,
            num_retracted=len(batch.retracted),
            num_finished=num_finished,
            expert_misses=misses,
            evict_s=evict_s,
        )

    def _log_startup(self, kv_tokens: int) -> None:
        from ground import __version__

        logger.info("tokdrift engine %s starting: %s on %s", __version__, self.checkpoint, self.device)
        logger.info("Resolved config: %s", self.config.resolved_line())
        fast = self.model.fast_layers
        note = f"; {fast.kernel_note}" if fast is not None else ""
        logger.info("Forward path: %s%s", self.forward_path, note)
        if self.config.faults:
            logger.warning("Degradation faults switched on: %s", ", ".join(self.config.faults))
        moe_total, moe_slots, moe_bytes = self.experts.allocate() or (None, None, 0)
        logger.info(
            logfmt.cache_geometry_line(
                kv_tokens // self.config.page_size,
                self.config.page_size,
                self.kv_pool.nbytes,
                self.state_pool.num_slots,
                self.state_pool.num_slots * self.state_pool.bytes_per_slot,
                moe_slots,
                moe_total,
                moe_bytes,
            )
        )

    def _log_step(self, batch: ScheduledBatch, stats: StepStats) -> None:
        self._gen_meter.add(sum(1 for s in batch.items if s.samples))
        if batch.phase in (Phase.PREFILL, Phase.MIXED) and batch.items:
            elapsed = stats.duration_s
            logger.info(
                logfmt.prefill_line(
                    batch.num_new_seqs,
                    stats.num_prefill_tokens,
                    batch.num_cached_tokens,
                    stats.kv_usage,
                    stats.mamba_slots_used,
                    stats.mamba_slots_total,
                    stats.num_running,
                    stats.num_waiting,
                    stats.num_prefill_tokens / elapsed if elapsed > 0 else 0.0,
                )
            )
        if batch.phase in (Phase.DECODE, Phase.MIXED) and batch.items:
            self._num_decode_steps += 1
            if self._num_decode_steps % self.config.decode_log_interval == 0:
                logger.info(
                    logfmt.decode_line(
                        stats.num_decode_tokens,
                        self.kv_allocator.num_used,
                        stats.kv_usage,
                        stats.mamba_slots_used,
                        stats.mamba_slots_total,
                        self._gen_meter.take(),
                        stats.num_waiting,
                    )
                )


def _replace_max_tokens(params: SamplingParams, max_tokens: int) -> SamplingParams:
    import dataclasses

    return dataclasses.replace(params, max_tokens=max_tokens)
