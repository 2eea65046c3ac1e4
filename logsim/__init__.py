"""A simulated engine serving agent sessions, and its log in every format diag reads.

`simulate(workload, spec)` runs the engine (engine.py) under the agents' load (workload.py)
and returns every forward, prefill, idle spell and restart with its time; `write(trace, fmt,
path)` prints it as that engine prints its log (batchlog.py, vllm.py, llamacpp.py), so a test or
benchmark can check what `diag` recovers against the truth the simulation knows (corpus.py).
synthetic.py is the older, smaller scenario generator the analysis tests are written against.

For tests and benchmarks only: not one of the installed packages, and it imports none of them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from logsim import batchlog, llamacpp, vllm
from logsim.engine import Costs, EngineSpec, Fault, Trace, simulate
from logsim.workload import Workload

FORMATS = (*batchlog.FORMATS, "vllm", "prometheus", *llamacpp.FORMATS)
START = dt.datetime(2026, 9, 23, 9, 0, 0)

__all__ = ["Costs", "EngineSpec", "FORMATS", "Fault", "START", "Trace", "Workload", "simulate", "write"]


def write(trace: Trace, fmt: str, path: Path, start: dt.datetime = START, head_steps: int | None = None) -> Path:
    """Print `trace` as `fmt` (FORMATS) into `path`. `head_steps`: keep only the lines up to the
    one carrying that many throughput figures, as a short excerpt pasted into an issue."""
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt in batchlog.FORMATS:
        text = batchlog.lines(trace, fmt, start)
    elif fmt == "vllm":
        text = vllm.log_lines(trace, start)
    elif fmt == "prometheus":
        text = vllm.scrape_blocks(trace, start)
    else:
        text = llamacpp.lines(trace, fmt, start)
    path = Path(path)
    with open(path, "w", encoding="utf-8") as f:
        seen = 0
        for chunk in text:
            f.write(chunk)
            if head_steps is not None:
                seen += _num_rates(chunk)
                if seen >= head_steps:
                    break
    return path


def _num_rates(chunk: str) -> int:
    """Throughput figures a chunk carries: decode lines, stats lines, scrapes, a request's timings."""
    return sum(
        (
            "gen throughput" in chunk,
            "generation throughput" in chunk,
            chunk.startswith("# scrape_time"),
            "n_decoded =" in chunk,
            " eval time =" in chunk and "prompt" not in chunk.split("eval time")[0][-8:],
        )
    )
