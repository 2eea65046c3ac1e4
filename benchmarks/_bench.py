"""Helpers the engine benchmarks share: the machine line, medians, timed engine decodes.

Each benchmark runs its variants side by side in one process and interleaves their
repetitions (A B A B ...), so a neighbour's load lands on every variant alike; figures are
medians of those repetitions and the headline is a ratio measured in the same run.

Time is read from `clock()`: with one torch thread (the benchmarks' default) it is the
process's CPU time, which on a shared machine leaves out the time spent waiting for a core
(a memory stall still counts: the core is held); with more threads it is wall time, and on a
GPU wall time after the device has finished what was queued.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

_cpu_clock = True
_cuda_clock = False


def set_threads(num_threads: int, device: str = "cpu") -> None:
    """Use `num_threads` torch threads, and the clock that fits: CPU time for one thread on the
    CPU; wall time with more, or on a CUDA device (synchronised before each reading)."""
    global _cpu_clock, _cuda_clock
    torch.set_num_threads(num_threads)
    _cuda_clock = torch.device(device).type == "cuda"
    _cpu_clock = num_threads == 1 and not _cuda_clock


def clock() -> float:
    if _cuda_clock:
        torch.cuda.synchronize()
    return time.process_time() if _cpu_clock else time.perf_counter()


def clock_name() -> str:
    return "process CPU time" if _cpu_clock else "wall time, CUDA synchronised" if _cuda_clock else "wall time"


class DecodeRun(NamedTuple):
    num_tokens: int  # tokens decoded after the first (which comes from the prefill)
    seconds: float  # wall time from the end of the prefill to the last token
    num_steps: int  # decode steps run

    @property
    def tokens_per_s(self) -> float:
        return self.num_tokens / self.seconds

    @property
    def step_s(self) -> float:
        return self.seconds / self.num_steps


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    return (
        f"machine: {cpu}, {os.cpu_count()} cores{load}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; timed in {clock_name()}"
    )


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def engine_decode(
    engine,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    on_step: Callable[[object], None] | None = None,
    outputs: list | None = None,
) -> DecodeRun:
    """Run `prompts` as one batch through `engine` (greedy, `max_tokens` each, eos ignored) and
    time the decode: from the step that gave every request its first token to the last step.
    `on_step(stats)` runs after each decode step, inside the timed span; `outputs`, when given,
    receives each request's token ids."""
    from engine import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True)
    requests = [engine.add_request(list(p), params) for p in prompts]
    while any(not r.output_ids for r in requests):
        engine.step()
    engine.take_updates()
    first = sum(len(r.output_ids) for r in requests)
    num_steps = 0
    t0 = clock()
    while engine.has_work():
        stats = engine.step()
        num_steps += 1
        if on_step is not None:
            on_step(stats)
        engine.take_updates()
    seconds = clock() - t0
    if outputs is not None:
        outputs.extend(list(r.output_ids) for r in requests)
    return DecodeRun(sum(len(r.output_ids) for r in requests) - first, seconds, num_steps)


def prompt_ids(length: int, seed: int, vocab: int = 256) -> list[int]:
    """A deterministic prompt of byte-range token ids; different seeds share no prefix."""
    return [(seed * 131 + 7 * i + (i * i) % 11) % vocab for i in range(length)]
