"""A served engine's warm-up: the largest steps' memory taken before the first request.

On a CPU the engine keeps a step's large temporaries in malloc's heap (hostmalloc.py), and a
thread's arena never gives them back; so without a warm-up the engine's RSS steps up whenever
the trace brings a larger prompt than any before (a 60-minute soak of the default checkpoint:
kept memory 57 -> 329 MB in steps, the last at minute 20), and a memory slope fitted over the
first hour mixes that with a leak. Two full prompt chunks, the second an extend over the first
(attention over a cached prefix), run once on the engine thread, take what the largest steps
need up front: measured on the default checkpoint, 2 threads, kept memory after a warm-up of
one chunk still rose 290 -> 396 MB over later prompts of 300-20,000 tokens, after two chunks
400 -> 421 MB (vLLM's start-up "profile run" does the same for its GPU memory).

The forward is the model's, on KV and state slots no request holds yet: no request, no step,
no prefix-cache entry, no allocator call, no log line but one, no change to any counter a step
reports.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, NamedTuple

import torch

from engine.model.forward_batch import ForwardBatch, RequestSlice

if TYPE_CHECKING:
    from engine.runtime.engine import Engine

logger = logging.getLogger("engine")


class WarmUp(NamedTuple):
    num_tokens: int  # prompt tokens run, over `num_chunks` forwards
    num_chunks: int
    duration_s: float


def warm_up(engine: Engine, num_chunks: int) -> WarmUp | None:
    """Run up to `num_chunks` full chunks of a throwaway prompt through the model, as one
    request's prefill would (the first chunk from empty, each next one over the KV of those
    before), on the calling thread (call it on the thread that will step the engine: glibc
    keeps memory per thread arena). Fewer tokens when the KV pool or the context is smaller;
    None when nothing was run, as when a request came first (the slots it writes are free only
    before)."""
    chunk = engine.config.chunked_prefill_size
    kv = engine.kv_allocator
    num_tokens = min(num_chunks * chunk, engine.max_context - 1, kv.num_slots)
    if num_chunks < 1 or num_tokens < 1 or kv.num_used or engine.state_allocator.num_used:
        return None  # nothing asked, or requests came first: their slots are not ours to write
    # Slots no request holds, written and left as garbage (a request writes its slots before it
    # reads them); the allocators are not asked, so their free lists stay as a fresh engine's.
    kv_slots = torch.arange(num_tokens, dtype=torch.int64)
    state_slot = 0
    engine.state_pool.reset(state_slot)
    vocab = engine.model_config.vocab_size
    ids = [(7 * i + 1) % vocab for i in range(num_tokens)]  # any valid ids: only the shapes matter
    t0 = time.perf_counter()
    try:
        for start in range(0, num_tokens, chunk):
            end = min(start + chunk, num_tokens)
            piece = RequestSlice(ids[start:end], start, kv_slots[:end], state_slot)
            batch = ForwardBatch.build([piece], device=engine.device)
            engine.model(batch, engine.kv_pool, engine.state_pool, engine.attention)
    finally:
        engine.state_pool.reset(state_slot)
    engine.settle_step_counters()
    done = WarmUp(num_tokens, -(-num_tokens // chunk), time.perf_counter() - t0)
    logger.info(
        "Warm-up: %d prompt tokens in %d chunks, %.1f s (the largest steps' memory taken before serving)",
        *done,
    )
    return done
