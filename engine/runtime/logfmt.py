"""The engine's log, written the way FreeToken writes its own (shared/formats/README.md).

The same parser that reads a FreeToken log reads tokdrift's, so the line prefix and the
batch lines keep FreeToken's exact field names and number formats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TextIO

GIB = 1024**3


class FreeTokenFormatter(logging.Formatter):
    """`[%Y-%m-%d|%H:%M:%S] LEVEL    message`: level padded to 8, no milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d|%H:%M:%S", time.localtime(record.created))
        return f"[{stamp}] {record.levelname:<8} {record.getMessage()}"


def attach_log(logger: logging.Logger, stream: TextIO) -> logging.Handler:
    """Write `logger`'s INFO and above to `stream` in FreeToken's format."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(FreeTokenFormatter())
    handler.setLevel(logging.INFO)
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler


def cache_geometry_line(
    num_kv_pages: int,
    page_size: int,
    kv_bytes: int,
    num_state_slots: int,
    state_bytes: int,
    moe_slots: int | None,
    moe_total: int | None,
    moe_bytes: int,
) -> str:
    line = (
        f"Cache rebuilt: KV {num_kv_pages} pages ({num_kv_pages * page_size} tokens, "
        f"{kv_bytes / GIB:.2f} GiB), mamba {num_state_slots} slots ({state_bytes / GIB:.2f} GiB)"
    )
    if moe_total:
        line += f", MoE cache {moe_slots}/{moe_total} ({moe_bytes / GIB:.2f} GiB)"
    return line


def prefill_line(
    num_new_seqs: int,
    num_new_tokens: int,
    num_cached_tokens: int,
    token_usage: float,
    slots_used: int,
    slots_total: int,
    num_running: int,
    num_queued: int,
    input_tps: float,
) -> str:
    return (
        f"Prefill batch, #new-seq: {num_new_seqs}, #new-token: {num_new_tokens}, "
        f"#cached-token: {num_cached_tokens}, token usage: {token_usage:.2f}, "
        f"#mamba-slot: {slots_used}/{slots_total}, mamba usage: {slots_used / slots_total:.2f}, "
        f"#running-req: {num_running}, #queue-req: {num_queued}, "
        f"input throughput (token/s): {input_tps:.2f}"
    )


def decode_line(
    num_running: int,
    num_tokens: int,
    token_usage: float,
    slots_used: int,
    slots_total: int,
    gen_tps: float,
    num_queued: int,
) -> str:
    return (
        f"Decode batch, #running-req: {num_running}, #token: {num_tokens}, "
        f"token usage: {token_usage:.2f}, #mamba-slot: {slots_used}/{slots_total}, "
        f"mamba usage: {slots_used / slots_total:.2f}, gen throughput (token/s): {gen_tps:.2f}, "
        f"#queue-req: {num_queued}"
    )


def dropped_line(prompt_len: int, limit: int, request_id: str) -> str:
    return f"Input sequence length {prompt_len} exceeds {limit}, request {request_id} is dropped."


def retract_line(num_retracted: int) -> str:
    """SGLang's line when decode finds the KV pool full and sends requests back to the queue."""
    return f"KV cache pool is full. Retract requests. #retracted_reqs: {num_retracted}"


IDLE_LINE = "Scheduler is idle, waiting for new reqs..."


class GenThroughputMeter:
    """FreeToken's `gen throughput`: tokens generated since the previous decode line over the
    wall time since that line. Prefill and idle time in between count, as they do there."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._since = clock()
        self._num_tokens = 0

    def add(self, num_tokens: int) -> None:
        self._num_tokens += num_tokens

    def take(self) -> float:
        now = self._clock()
        elapsed = now - self._since
        rate = self._num_tokens / elapsed if elapsed > 0 else 0.0
        self._since, self._num_tokens = now, 0
        return rate
