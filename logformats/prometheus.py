"""Saved Prometheus scrapes -> steps and events.

The saved form (docs/diagnostics.md, "Prometheus scrape series"): text exposition blocks,
each preceded by one line `# scrape_time: T` where T is ISO-8601 (the server's clock, no time
zone invented) or Unix seconds. Either one file holding many blocks, or a directory of
`*.prom` files holding one or more blocks each. Each block is parsed with
prometheus_client's own parser; one unparsable block is warned about and skipped.

Metric names of vLLM, SGLang, FreeToken, llama.cpp's server and tokdrift's engine are all
read; a scrape becomes one steps row whose rates are deltas against the previous scrape. A
counter that goes down means the engine restarted: an `engine_start` event.

vLLM (V1 `PrometheusStatLogger`, the same names in 0.27.1 and 0.32.0, checked against both sources
and a scrape of each on CPU): `num_requests_running` / `num_requests_waiting`, `kv_cache_usage_perc`
(V0: `gpu_cache_usage_perc`, the device's KV cache also on the CPU backend; V0's
`cpu_cache_usage_perc` is its swap space: `swap_usage`, with `num_requests_swapped`),
`prefix_cache_queries` / `prefix_cache_hits` (the window's hit rate; 0.8's `gpu_prefix_cache_*`,
V0's `gpu_prefix_cache_hit_rate` gauge), `num_preemptions`, the
`inter_token_latency_seconds` histogram (until late 2025 `time_per_output_token_seconds`, the same
per-token figure: the window's step time), `request_time_per_output_token_seconds` (a request's
mean, observed when it ends: `request_tpot_s`) and `iteration_tokens_total` (tokens per engine
step: `iteration_tokens`).

llama.cpp (`llamacpp:`, llama-server `--metrics`) adds its generated tokens and their decode
time to its counters when a request ends, not token by token: a window's rate is the
per-request decode rate of the requests that finished in it (Δtokens_predicted_total /
Δtokens_predicted_seconds_total), and a window where none finished has no rate. Its prompt
counter excludes the tokens reused from its cache, which it counts apart
(`prompt_tokens_cached_total`): the window's hit rate is cached over cached + processed.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from logformats.errors import LogFormatError
from logformats.frames import EVENT_FRAME_COLUMNS, STEP_FRAME_COLUMNS, assign_engine_lives, empty_events
from logformats.text import Readable, Text
from rundir.schema import StepPhase

logger = logging.getLogger(__name__)

HEADER = "# scrape_time:"
PREFIXES = ("vllm:", "sglang:", "freetoken:", "llamacpp:", "tokdrift:")

# Canonical name -> metric names (without engine prefix) that carry it, first found wins.
GAUGES = {
    "num_running_reqs": ("num_requests_running", "num_running_reqs", "requests_processing"),
    "num_queue_reqs": ("num_requests_waiting", "num_queue_reqs", "requests_deferred"),
    # llama.cpp's kv_cache_* gauges: releases before mid-2025 only (the pinned one has none)
    "num_tokens": ("num_used_tokens", "kv_cache_tokens"),
    "token_usage": ("kv_cache_usage_perc", "gpu_cache_usage_perc", "token_usage", "kv_cache_usage_ratio"),
    "mamba_usage": ("mamba_usage",),
    "swap_usage": ("cpu_cache_usage_perc",),  # vLLM V0: its CPU swap space, not the KV cache
    "num_swapped_reqs": ("num_requests_swapped",),
    "cache_hit_rate_gauge": ("cache_hit_rate", "gpu_prefix_cache_hit_rate"),
}
COUNTERS = {
    "generation_tokens": ("generation_tokens_total", "generation_tokens", "tokens_predicted_total"),
    "prompt_tokens": ("prompt_tokens_total", "prompt_tokens"),
    "prompt_cached_tokens": ("prompt_tokens_cached_total",),  # llama.cpp: not in prompt_tokens_total
    "preemptions": ("num_preemptions_total", "num_preemptions", "num_retracted_requests_total"),
    "prefix_queries": ("prefix_cache_queries_total", "prefix_cache_queries", "gpu_prefix_cache_queries_total"),
    "prefix_hits": ("prefix_cache_hits_total", "prefix_cache_hits", "gpu_prefix_cache_hits_total"),
    "itl_sum": ("inter_token_latency_seconds_sum", "time_per_output_token_seconds_sum"),
    "itl_count": ("inter_token_latency_seconds_count", "time_per_output_token_seconds_count"),
    "decode_time_sum": ("request_decode_time_seconds_sum", "tokens_predicted_seconds_total"),
    "request_gen_sum": ("request_generation_tokens_sum", "tokens_predicted_total"),
    "tpot_sum": ("request_time_per_output_token_seconds_sum",),
    "tpot_count": ("request_time_per_output_token_seconds_count",),
    "iteration_tokens_sum": ("iteration_tokens_total_sum",),
    "iteration_tokens_count": ("iteration_tokens_total_count",),
}


class Scrape(NamedTuple):
    t: np.datetime64
    values: dict[str, float]  # sample name without engine prefix -> value summed over labels
    engine: str


def looks_like_scrapes(path: Path) -> bool:
    if path.is_dir():
        return any(path.glob("*.prom"))
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                return line.startswith(HEADER)
    return False


def read_scrapes(path: Readable) -> list[Scrape]:
    """Every scrape under `path` (a file, a folder of *.prom files, or the text itself), in time order."""
    path = path if isinstance(path, Text) else Path(path)
    files = [path] if isinstance(path, Text) or not path.is_dir() else sorted(path.glob("*.prom"))
    scrapes: list[Scrape] = []
    for file in files:
        scrapes.extend(_read_file(file))
    if not scrapes:
        raise LogFormatError(f"{path}: expected Prometheus scrapes each headed '{HEADER} T', found none")
    scrapes.sort(key=lambda s: s.t)
    return scrapes


def parse_scrapes(path: Readable) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Steps and events from a scrape series, and the engine the metric names belong to."""
    scrapes = read_scrapes(path)
    engine = max({s.engine for s in scrapes}, key=lambda e: sum(s.engine == e for s in scrapes))
    t = np.array([s.t for s in scrapes], dtype="datetime64[ns]")
    n = len(scrapes)
    raw = {name: np.array([_first(s.values, names) for s in scrapes]) for name, names in {**GAUGES, **COUNTERS}.items()}
    dt_s = np.concatenate([[np.nan], np.diff(t) / np.timedelta64(1, "s")])

    def delta(name: str) -> np.ndarray:
        return np.concatenate([[np.nan], np.diff(raw[name])])

    # Any cumulative counter going down: the engine process restarted.
    restarted = np.zeros(n, dtype=bool)
    for name in ("generation_tokens", "prompt_tokens", "itl_count"):
        d = delta(name)
        restarted |= np.nan_to_num(d, nan=0.0) < 0
    d_gen, d_prompt = delta("generation_tokens"), delta("prompt_tokens")
    with np.errstate(divide="ignore", invalid="ignore"):
        itl = delta("itl_sum") / delta("itl_count")
        per_req_rate = delta("request_gen_sum") / delta("decode_time_sum")
        request_tpot = delta("tpot_sum") / delta("tpot_count")  # requests that ended in the window
        iteration_tokens = delta("iteration_tokens_sum") / delta("iteration_tokens_count")
        step_time = np.where(np.isfinite(itl) & (itl > 0), itl, 1.0 / per_req_rate)
        step_time = np.where(np.isfinite(step_time) & (step_time > 0), step_time, np.nan)
        gen_tps = d_gen / dt_s
        # A gauge is one moment; a row is the window since the previous scrape. The window decoded
        # with the requests the scrapes at its ends saw running (a request that finished inside it
        # leaves 0 at its end): the mean of the ends that saw any.
        running = _window_state(raw["num_running_reqs"], raw["num_running_reqs"])
        num_tokens = _window_state(raw["num_tokens"], raw["num_running_reqs"])
        usage = _window_state(raw["token_usage"], raw["num_running_reqs"])
        # Where the engine reports its per-token time, throughput follows from it and the batch.
        gen_tps = np.where(np.isfinite(step_time) & (running > 0), running / step_time, gen_tps)
        d_cached = delta("prompt_cached_tokens")
        hit_rate = np.where(
            np.isfinite(delta("prefix_queries")),
            delta("prefix_hits") / delta("prefix_queries"),
            np.where(np.isfinite(d_cached), d_cached / (d_cached + d_prompt), raw["cache_hit_rate_gauge"]),
        )
    busy = np.nan_to_num(d_gen) > 0
    if engine == "llamacpp":
        # Tokens are credited when their request ends: a window in which none ended decoded all the
        # same while requests ran, at a rate its counters cannot tell.
        gen_tps = np.where(np.isfinite(step_time), gen_tps, np.nan)
        busy |= np.nan_to_num(running) > 0
    for arr in (d_gen, d_prompt, step_time, gen_tps, request_tpot, iteration_tokens):
        arr[restarted] = np.nan
    phase = np.where(busy, np.where(np.nan_to_num(d_prompt) > 0, StepPhase.MIXED, StepPhase.DECODE), StepPhase.IDLE)
    phase[0] = StepPhase.IDLE  # no window before the first scrape
    lives, ages, _ = assign_engine_lives(t, restarted, np.ones(n, dtype=bool))
    steps = pd.DataFrame(
        {
            "t": t,
            "engine_life": lives,
            "engine_age_s": ages,
            "phase": phase.astype(object),
            "num_running_reqs": running,
            "num_queue_reqs": raw["num_queue_reqs"],
            "num_tokens": num_tokens,
            "gen_tps": gen_tps,
            "input_tps": d_prompt / dt_s,
            "step_time_s": step_time,
            "token_usage": usage,
            "mamba_usage": raw["mamba_usage"],
            "swap_usage": raw["swap_usage"],
            "num_swapped_reqs": raw["num_swapped_reqs"],
            "cache_hit_rate": hit_rate,
            "num_preemptions": np.where(restarted, np.nan, delta("preemptions")),
            "request_tpot_s": np.where(np.isfinite(request_tpot), request_tpot, np.nan),
            "iteration_tokens": np.where(np.isfinite(iteration_tokens), iteration_tokens, np.nan),
            "line": np.arange(1, n + 1),
        }
    ).reindex(columns=STEP_FRAME_COLUMNS)
    ev_rows = [
        {
            "t": t[i],
            "engine_life": lives[i],
            "engine_age_s": 0.0,
            "kind": "engine_start",
            "detail": "counters reset",
            "line": i + 1,
        }
        for i in np.flatnonzero(restarted)
    ]
    pre = steps["num_preemptions"].to_numpy()
    ev_rows += [
        {
            "t": t[i],
            "engine_life": lives[i],
            "engine_age_s": ages[i],
            "kind": "preemption",
            "count": pre[i],
            "detail": f"{pre[i]:.0f} preempted or retracted",
            "line": i + 1,
        }
        for i in np.flatnonzero(np.nan_to_num(pre) > 0)
    ]
    if not ev_rows:  # typed columns: an empty frame of objects cannot be compared with a time
        return steps, empty_events(), engine
    events = (
        pd.DataFrame(ev_rows).reindex(columns=EVENT_FRAME_COLUMNS).sort_values("t", kind="stable", ignore_index=True)
    )
    return steps, events, engine


def _window_state(gauge: np.ndarray, running: np.ndarray) -> np.ndarray:
    """Per scrape, a gauge over the window since the previous one: the mean of its values at the
    window's ends where requests were running there; its own value where neither end saw any."""
    prev_gauge = np.concatenate([[np.nan], gauge[:-1]])
    busy = np.nan_to_num(running) > 0  # [n]
    prev_busy = np.concatenate([[False], busy[:-1]])
    num = np.where(busy, gauge, 0.0) + np.where(prev_busy, prev_gauge, 0.0)
    den = busy.astype(float) + prev_busy
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), gauge)


def _first(values: dict[str, float], names: tuple[str, ...]) -> float:
    for name in names:
        if name in values:
            return values[name]
    return np.nan


def _read_file(path: Path | Text) -> list[Scrape]:
    from prometheus_client.parser import text_string_to_metric_families

    if isinstance(path, Text):
        text = path.data if isinstance(path.data, str) else path.data.decode("utf-8", errors="replace")
    else:
        text = path.read_text(encoding="utf-8", errors="replace")
    blocks = re.split(r"^" + re.escape(HEADER), text, flags=re.M)
    out: list[Scrape] = []
    lineno = 1 + blocks[0].count("\n")
    for block in blocks[1:]:
        stamp, _, body = block.partition("\n")
        where = f"{path}:{lineno}"
        lineno += 1 + body.count("\n")
        t = _parse_time(stamp.strip(), where)
        if t is None:
            continue
        values: dict[str, float] = {}
        engines: dict[str, int] = {}
        try:
            for family in text_string_to_metric_families(body):
                for sample in family.samples:
                    for prefix in PREFIXES:
                        if sample.name.startswith(prefix):
                            name = sample.name[len(prefix) :]
                            values[name] = values.get(name, 0.0) + float(sample.value)
                            engines[prefix[:-1]] = engines.get(prefix[:-1], 0) + 1
                            break
        except ValueError as exc:
            logger.warning("%s: scrape does not parse as Prometheus text (%s); skipped", where, exc)
            continue
        engine = max(engines, key=lambda name: engines[name]) if engines else "unknown"
        out.append(Scrape(t, values, engine))
    return out


def _parse_time(stamp: str, where: str) -> np.datetime64 | None:
    try:
        if re.fullmatch(r"\d+(\.\d+)?", stamp):
            return np.datetime64(int(float(stamp) * 1e9), "ns")
        stamp_ns: np.datetime64 = np.datetime64(pd.Timestamp(stamp).tz_localize(None), "ns")
        return stamp_ns
    except (ValueError, TypeError):
        logger.warning(
            "%s: expected an ISO-8601 time or Unix seconds after '%s', found %r; scrape skipped", where, HEADER, stamp
        )
        return None
