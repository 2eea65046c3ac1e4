"""Prometheus metrics of the server, in its own CollectorRegistry, all named `tokdrift:*`.

Names follow vLLM's where one fits (`tokdrift:num_requests_running` is what
`vllm:num_requests_running` is), so dashboards and `diag ingest` read both the same way.
Request timings are observed on the engine thread as tokens arrive; the engine's hook
figures are read from an `EngineSnapshot` taken just before each scrape.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engine.runtime.stats import StepStats
from engine.server.runner import RequestObserver
from engine.server.status import EngineSnapshot

P = "tokdrift:"

# vLLM's buckets, so a dashboard's quantiles compare across engines.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
REQUEST_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ServerMetrics(RequestObserver):
    def __init__(self, model_name: str) -> None:
        # no `*_created` series: they double the scrape for nothing
        disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated
        self.registry = CollectorRegistry(auto_describe=True)
        self._snapshot: EngineSnapshot | None = None
        self._lock = threading.Lock()
        self.model_name = model_name
        r, labels = self.registry, {"model_name": model_name}
        self.prompt_tokens = Counter(
            P + "prompt_tokens",
            "Prompt tokens of requests that got their first token.",
            labelnames=["model_name"],
            registry=r,
        ).labels(**labels)
        self.generation_tokens = Counter(
            P + "generation_tokens", "Tokens generated.", labelnames=["model_name"], registry=r
        ).labels(**labels)
        self.prefill_tokens = Counter(
            P + "prefill_tokens",
            "Prompt tokens the engine computed (a retracted request's are computed again).",
            labelnames=["model_name"],
            registry=r,
        ).labels(**labels)
        self.steps = Counter(
            P + "engine_steps", "Engine steps (one batched forward each).", labelnames=["model_name"], registry=r
        ).labels(**labels)
        self.request_success = Counter(
            P + "request_success",
            "Finished requests by finish reason.",
            labelnames=["model_name", "finished_reason"],
            registry=r,
        )
        self.ttft = self._histogram(
            P + "time_to_first_token_seconds", "Request arrival to its first generated token.", TTFT_BUCKETS, labels
        )
        self.itl = self._histogram(
            P + "inter_token_latency_seconds", "Time between two generated tokens of a request.", ITL_BUCKETS, labels
        )
        self.decode_time = self._histogram(
            P + "request_decode_time_seconds", "First token to finish, per request.", REQUEST_BUCKETS, labels
        )
        self.e2e = self._histogram(
            P + "e2e_request_latency_seconds", "Arrival to finish, per request.", REQUEST_BUCKETS, labels
        )
        self.request_prompt = self._histogram(
            P + "request_prompt_tokens", "Prompt tokens per finished request.", TOKEN_BUCKETS, labels
        )
        self.request_generation = self._histogram(
            P + "request_generation_tokens", "Generated tokens per finished request.", TOKEN_BUCKETS, labels
        )
        self.step_time = self._histogram(
            P + "step_duration_seconds", "Engine step: schedule + forward + sample.", STEP_BUCKETS, labels
        )
        self.registry.register(_HookCollector(self, model_name))

    def _histogram(self, name: str, doc: str, buckets: Sequence[float], labels: dict[str, str]) -> Histogram:
        return Histogram(name, doc, labelnames=list(labels), buckets=buckets, registry=self.registry).labels(**labels)

    # --- engine thread ----------------------------------------------------------------------

    def on_tokens(
        self,
        now: float,
        arrival: float,
        first_token: float | None,
        last_token: float | None,
        num_new: int,
        num_prompt: int,
    ) -> None:
        self.generation_tokens.inc(num_new)
        if first_token is None:
            self.ttft.observe(now - arrival)
            self.prompt_tokens.inc(num_prompt)
            num_new -= 1  # the first token has no gap before it
        if last_token is not None and num_new > 0:
            gap = (now - last_token) / num_new
            for _ in range(num_new):
                self.itl.observe(gap)

    def on_finish(
        self,
        now: float,
        arrival: float,
        first_token: float | None,
        reason: str | None,
        num_prompt: int,
        num_output: int,
    ) -> None:
        self.request_success.labels(self.model_name, reason or "unknown").inc()
        self.e2e.observe(now - arrival)
        if first_token is not None:
            self.decode_time.observe(now - first_token)
        self.request_prompt.observe(num_prompt)
        self.request_generation.observe(num_output)

    def on_step(self, stats: StepStats) -> None:
        self.steps.inc()
        self.prefill_tokens.inc(stats.num_prefill_tokens)
        self.step_time.observe(stats.duration_s)

    # --- scrape -----------------------------------------------------------------------------

    def render(self, snapshot: EngineSnapshot) -> bytes:
        """The exposition text, with the hook figures of `snapshot`."""
        with self._lock:
            self._snapshot = snapshot
            return generate_latest(self.registry)


class _HookCollector(Collector):
    """Gauges and counters read from the engine's hooks at scrape time."""

    def __init__(self, metrics: ServerMetrics, model_name: str) -> None:
        self._metrics = metrics
        self._model_name = model_name

    def describe(self) -> list[Metric]:
        return []  # names are fixed below; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        snap = self._metrics._snapshot
        if snap is None:
            return
        c, m, a, x = snap.cache, snap.mamba, snap.allocator, snap.experts
        gauges = [
            ("num_requests_running", "Requests holding memory (running).", snap.num_running),
            ("num_requests_waiting", "Requests queued.", snap.num_waiting),
            ("kv_cache_usage_perc", "KV pool used by requests, 0..1 (evictable cache counts as free).", snap.kv_usage),
            ("num_used_tokens", "KV slots held by requests and the prefix cache.", snap.kv_used_tokens),
            ("kv_total_tokens", "KV slots in the pool.", snap.kv_total_tokens),
            ("max_context_tokens", "Longest prompt + output the engine accepts.", snap.max_context),
            ("mamba_usage", "State slots used, 0..1.", (m.num_slots - m.num_free) / m.num_slots),
            ("mamba_slots_used", "Linear-attention state slots in use (live + snapshots).", m.num_slots - m.num_free),
            ("mamba_slots_total", "Linear-attention state slots in the pool.", m.num_slots),
            ("mamba_slots_live", "State slots held by running requests.", m.num_live),
            ("mamba_snapshots", "State snapshots the prefix cache holds.", m.num_snapshots),
            ("radix_nodes", "Prefix cache tree nodes (root excluded).", c.num_nodes),
            ("radix_leaves", "Prefix cache tree leaves.", c.num_leaves),
            ("radix_max_depth", "Nodes on the longest root-to-leaf path.", c.max_depth),
            ("cached_tokens", "Tokens the prefix cache holds.", c.cached_tokens),
            ("evictable_tokens", "Cached tokens no running request locks.", c.evictable_tokens),
            ("locked_tokens", "Cached tokens locked by running requests.", c.locked_tokens),
            ("kv_free_runs", "Runs of contiguous free KV slots.", a.num_free_runs),
            ("kv_largest_free_run", "Longest run of contiguous free KV slots.", a.largest_free_run),
            ("kv_fragmentation", "1 - largest free run / free slots.", a.fragmentation),
            ("engine_age_seconds", "Seconds since the engine started.", snap.engine_age_s),
        ]
        counters = [
            ("prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", c.queried_tokens),
            ("prefix_cache_hits", "Prompt tokens served from the prefix cache.", c.matched_tokens),
            ("evicted_tokens", "Tokens evicted from the prefix cache.", c.evicted_tokens),
            (
                "num_preemptions",
                "Requests retracted for lack of KV (SGLang: retracted requests).",
                snap.num_retractions,
            ),
            ("num_dropped_requests", "Requests refused as longer than the context.", snap.num_dropped),
            ("mamba_snapshots_anchored", "State snapshots the prefix cache accepted.", m.num_anchored),
            ("mamba_snapshots_evicted", "State snapshots evicted.", m.num_evicted),
        ]
        if x is not None:
            gauges += [
                ("expert_cache_slots_used", "Expert slots holding an expert.", x.num_used),
                ("expert_cache_slots_total", "Expert slots on the device.", x.num_slots),
            ]
            counters += [
                ("expert_cache_hits", "Expert lookups served from a device slot.", x.hits),
                ("expert_cache_misses", "Expert lookups copied from the host tier.", x.misses),
                ("expert_cache_evictions", "Experts pushed out of a device slot.", x.evictions),
                ("expert_cache_bytes_copied", "Bytes copied host -> device slots.", x.bytes_copied),
            ]
        for name, doc, value in gauges:
            family = GaugeMetricFamily(P + name, doc, labels=["model_name"])
            family.add_metric([self._model_name], float(value))
            yield family
        for name, doc, value in counters:
            counter = CounterMetricFamily(P + name, doc, labels=["model_name"])
            counter.add_metric([self._model_name], float(value))
            yield counter
