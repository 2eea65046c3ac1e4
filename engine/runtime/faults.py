"""Degradation mechanisms the engine can switch on, one name each (`EngineConfig.faults`).

Each is a real mechanism in the engine's own code path — never a sleep, never a counter
that only pretends — of a kind that has slowed real engines down after hours of serving.
Each leaves its own signal in the hooks (`Engine.fault_stats()`, `Engine.gc_stats()`,
`cache_report()`, `mamba_stats()`, `allocator_summary()`, `expert_cache_stats()`), which
the soak records as snapshot columns, so that the analyzer can name it. The signals are
computed whether or not a fault is on, so a control run has the same columns.

| name | where | what changes |
|---|---|---|
| eviction-scan | engine/cache/eviction.py | KV eviction frees one page at a time, each found by scanning every cached page |
| snapshot-leak | engine/cache/radix.py | an evicted snapshot's state slot is never freed |
| kv-scatter | engine/memory/allocator.py | freed KV pages return shuffled and are never re-sorted |
| expert-thrash | engine/moe/expert_cache.py | a step's staging slot is never given back: slots leak, misses climb |
| gc-pressure | engine/runtime/faults.py (`GcPressure`) | finished requests are retained; a full GC runs every step |
| output-buffer | engine/runtime/faults.py (`OutputBuffer`) | from a chosen request on, every step clears an output buffer sized for the largest output ever asked |

docs/faults.md gives the real-world case behind each, with links.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # torch only where the output-buffer fault runs: the config loads without it
    import torch


class Fault(NamedTuple):
    name: str
    mechanism: str  # what the engine does differently, in one sentence
    real_world: str  # the case it mirrors (repository and issue or PR number)
    signal: str  # the hook figures (snapshot columns) that show it
    requires: str | None = None  # an engine option it needs, e.g. "moe_backend='offload'"


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault(
            name="eviction-scan",
            mechanism=(
                "KV eviction frees exactly the pages an allocation needs, one page at a time, and finds each "
                "by scanning every cached page no request holds for the least recently used (ties to the "
                "deepest), the lru_page_scan policy: O(evictable pages) per page. Once the pool is full every "
                "step that needs a slot evicts, each decode too, and pays a scan that grows with what is cached."
            ),
            real_world=(
                "vLLM's block evictor before vllm-project/vllm#5411, #7193 and #7209 (evict() looped over the "
                "whole free table for every block: a 16K prompt over 10000 cached blocks took 1000 x 10000 "
                "iterations, 2 s to allocate; 7 ms per evict); sgl-project/sglang#38371 (once the pool is "
                "full, eviction runs on every decode step that needs room)."
            ),
            signal="eviction_s_total, eviction_nodes_visited_total and eviction_calls_total (as rates), schedule_s",
        ),
        Fault(
            name="snapshot-leak",
            mechanism=(
                "A state snapshot dropped by eviction (its KV leaf evicted, or the snapshot evicted to free "
                "a slot) is never returned to the state allocator; leaked slots are held by nobody the "
                "cache can evict, so fewer snapshots fit, matches truncate and prefills recompute. The leak "
                "stops at mamba_slots - max_running_requests, so running requests always get a slot."
            ),
            real_world=(
                "sgl-project/sglang#16067 (mamba slot leak when scheduling fails with the radix cache, "
                "issue #15840); sglang#36770 and #40128 (mamba slot exhaustion takes the scheduler down)."
            ),
            signal="state_slots_leaked, mamba_slots_used, match_truncated_tokens_total (as a rate), cache_hit_rate",
        ),
        Fault(
            name="kv-scatter",
            mechanism=(
                "Freed KV pages go back to the free list in scattered order and are never merged back in "
                "address order, so once the pool has cycled, each request's KV sits in scattered slots "
                "and the attention gather loses locality."
            ),
            real_world=(
                "the free-slot sort in SGLang's token allocator that this engine copies (merge_and_sort_free), "
                "and KV cache fragmentation in llama.cpp (ggml-org/llama.cpp#3380)."
            ),
            signal=(
                "kv_gather_s_total (as a share of wall time), kv_free_list_disorder, kv_gather_breaks, kv_free_runs, "
                "kv_fragmentation, forward_s"
            ),
        ),
        Fault(
            name="expert-thrash",
            mechanism=(
                "A step that needs more experts than the cache has slots (a prefill chunk routes to nearly every "
                "expert) borrows one slot as its staging buffer and copies its overflow experts through it; the "
                "slot is never given back. One slot leaks per overflowing step, the LRU works with fewer and "
                "fewer, and once a decode step's own experts outnumber what is left every step overflows and "
                "the cache drains to its last slot: the miss rate and the bytes copied climb with engine age."
            ),
            real_world=(
                "pool slots lost when a borrow or pin is not returned on one path (LMCache/LMCache#2847: leaked "
                "GPU buffer slots after a pin that was never undone; lablup/mlxcel#170: evicted entries dropped "
                "their block pins instead of returning them, blocks never came back to the free list); a "
                "dispatch the expert cache cannot hold goes through a staging buffer (kekzl/imp#1365); slots "
                "held outside the LRU shrink it and raise misses (JustVugg/colibri#815)."
            ),
            signal=(
                "expert_copy_s_total (as a share of wall time), expert_miss_rate, expert_misses (as a rate), "
                "expert_bytes_copied_total (as a rate)"
            ),
            requires="moe_backend='offload'",
        ),
        Fault(
            name="gc-pressure",
            mechanism=(
                "Every finished request leaves a record of Python objects (one small list per token) in a "
                "list that is never cleared, and the serving loop runs a full garbage collection every step "
                "to bound memory: every pause walks a heap that grows with engine age, and every request "
                "in the batch waits for it."
            ),
            real_world=(
                "sgl-project/sglang#28067 (a slow leak made gen-2 pauses grow linearly with uptime), "
                "sglang#30693 (33-41% throughput loss from full collections), a gc.collect() on every "
                "iteration of a hot loop (google/tunix#2086, dpeerlab/segger#46, Mikubill/sd-webui-controlnet#1462)."
            ),
            signal="gc_pause_s_total (as a rate), gc_last_full_pause_s, retained_objects, rss_bytes",
        ),
        Fault(
            name="output-buffer",
            mechanism=(
                "The engine writes each step's logits into one output buffer that keeps the largest size any "
                "step ever needed and is cleared whole before every step. The `fault_after`-th finished request "
                "is taken as one that asked for every position's logits: from then on the buffer holds "
                "`fault_buffer_rows` rows of the vocabulary, and every step, decode steps of one token included, "
                "zeroes all of them. A step from a known request on, of a size the rows set: the controllable "
                "slowdown benchmarks/time_to_verdict.py checks its resampling against."
            ),
            real_world=(
                "ggml-org/llama.cpp#9200 (after a batch that requested many output logits, the output buffer "
                "stays that large and is reset whole with 0 on every llama_decode call: generation slower "
                "for the rest of the session); llama.cpp#10322 (a batch with every logit enabled left "
                "llama_decode at 14 instead of 36 tok/s until restart)."
            ),
            signal="output_buffer_bytes, forward_s",
        ),
    )
}


class FaultStats(NamedTuple):
    """The faults' own signals. Every field is computed with or without the fault switched on."""

    faults: tuple[str, ...]  # switched on, in config order
    eviction_calls_total: int  # evict / evict_snapshots calls that looked for a victim
    eviction_nodes_visited_total: int  # heap entries popped (lru), tree nodes walked (lru_scan) or
    #                                    pages scanned (lru_page_scan, the eviction-scan fault)
    eviction_s_total: float  # wall time spent inside eviction since start
    state_slots_leaked: int  # state slots held by no snapshot, no request (snapshot-leak)
    match_truncated_tokens_total: int  # matched KV tokens dropped for want of a snapshot
    kv_free_list_disorder: float  # share of adjacent free-list entries that are not adjacent pages
    kv_gather_breaks: float | None  # share of adjacent context positions of running requests
    #                                    whose KV slots are not adjacent; None with nothing running
    kv_gather_s_total: float | None  # wall time gathering KV contexts from the pool (torch backend
    #                                     on a CPU, where the gather is synchronous; at decode there, the
    #                                     C kernel that reads them in place, attention included); else None
    expert_miss_rate: float | None  # lifetime misses / lookups; None with resident experts
    expert_bytes_copied_total: int | None  # host -> slot copies; None with resident experts
    expert_copy_s_total: float | None  # wall time issuing those copies; None with resident experts
    retained_requests: int  # finished requests kept alive by gc-pressure
    retained_objects: int  # Python containers those records hold
    output_buffer_bytes: int = 0  # the output buffer every step clears (output-buffer; one step's logits without it)


class FaultSet(NamedTuple):
    """The faults switched on, resolved from their names once (`EngineConfig.fault_set`): one flag
    each, so the engine asks `faults.kv_scatter` rather than whether a string is in a tuple."""

    eviction_scan: bool = False
    snapshot_leak: bool = False
    kv_scatter: bool = False
    expert_thrash: bool = False
    gc_pressure: bool = False
    output_buffer: bool = False

    @classmethod
    def of(cls, names: Sequence[str]) -> FaultSet:
        return cls(**{name.replace("-", "_"): True for name in names})


def check_faults(faults: Sequence[str], moe_backend: str) -> str | None:
    """Why `faults` is not a valid choice (a message naming the field), or None when it is."""
    if isinstance(faults, str) or not all(isinstance(f, str) for f in faults):
        return f"faults must be a tuple of fault names, got {faults!r}"
    for name in faults:
        if name not in FAULTS:
            return f"faults: unknown fault {name!r}; known: {', '.join(FAULTS)}"
    if len(set(faults)) != len(faults):
        return f"faults: each fault at most once, got {list(faults)}"
    if "expert-thrash" in faults and moe_backend != "offload":
        return (
            f"faults: 'expert-thrash' degrades the expert cache and requires "
            f"moe_backend='offload' (with moe_cache_size), got moe_backend={moe_backend!r}"
        )
    return None


class GcPressure:
    """The gc-pressure mechanism, a hook the engine calls where it is on (absent when off):
    every finished request leaves a record behind for good — per token, a small list with its
    top four alternatives, as (prompt) logprob records are kept — and a full collection runs
    at the end of every step, as serving loops that bound memory with a gc.collect() per
    iteration do; each pause walks everything the finished requests left behind."""

    def __init__(self) -> None:
        self.retained: list[tuple[str, float, list[list[object]]]] = []
        self.num_objects = 0
        # Out of the collector's walk goes the startup heap (model, imports), as engines that
        # freeze it after warm-up do: what a collection walks is then what serving left behind.
        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)  # let the interpreter's last collection see everything

    def on_finish(self, request_id: str, finish_time: float, token_ids: Sequence[int]) -> None:
        per_token = [
            [token, position, [[(token + k) % 256, k] for k in range(1, 5)]]  # 6 containers a token
            for position, token in enumerate(token_ids)
        ]
        self.retained.append((request_id, finish_time, per_token))
        self.num_objects += 6 * len(per_token) + 2

    def on_step_end(self) -> None:
        gc.collect()


class OutputBuffer:
    """The output-buffer mechanism, a hook the engine calls where it is on: each step's logits are
    written into one buffer cleared whole first (llama.cpp's output buffer, ggml-org/llama.cpp#9200).
    The buffer starts at one step's size; the `after`-th finished request grows it to `rows` rows
    (a request that asked for every position's logits), and it never shrinks."""

    def __init__(self, vocab_size: int, rows: int, after: int) -> None:
        import torch

        self.vocab_size = vocab_size
        self.rows = rows
        self.after = after
        self.buffer = torch.zeros((1, vocab_size))

    @property
    def num_bytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def on_finish(self, num_finished: int) -> None:
        """A request finished, the `num_finished`-th of the engine's life: the `after`-th grows the buffer."""
        if num_finished == self.after and self.buffer.shape[0] < self.rows:
            self.buffer = self.buffer.new_zeros((self.rows, self.vocab_size))

    def write(self, logits: torch.Tensor) -> torch.Tensor:
        """The step's logits [B, V], through the buffer: cleared whole, then written."""
        rows = logits.shape[0]
        if rows > self.buffer.shape[0]:
            self.buffer = self.buffer.new_zeros((rows, self.vocab_size))
        self.buffer.zero_()
        self.buffer[:rows].copy_(logits)
        return self.buffer[:rows]
