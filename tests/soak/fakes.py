"""The one stand-in for a soak target (soak.targets.Target) in the soak's tests."""

from __future__ import annotations

from typing import Any

from engine.runtime.stats import Phase, StepStats
from soak.targets import Target


class FakeTarget(Target):
    """A target with no engine behind it: an engine life, when it started, and the events it was
    told of (counting and announcing a start are the real Target's); `age_s` fixes the age it
    reports."""

    def __init__(
        self,
        *,
        life: int = 0,
        started_at: float | None = None,
        pid: int | None = None,
        url: str = "http://x",
        is_builtin: bool = False,
        age_s: float | None = None,
    ) -> None:
        self.life, self.started_at, self.pid, self.url = life, started_at, pid, url
        self.is_builtin, self.age_s = is_builtin, age_s
        self.headers: dict[str, str] = {}
        self.events: list[tuple[str, dict[str, Any]]] = []

    def age(self, now: float | None = None) -> float | None:
        return self.age_s if self.age_s is not None else super().age(now)

    def on_event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))


def engine_step(**fields: Any) -> StepStats:
    """One built-in engine step (a decode of one request unless `fields` say otherwise)."""
    base: dict[str, Any] = dict.fromkeys(StepStats._fields, 0) | {
        "step": 1,
        "t": 1.0,
        "engine_age_s": 1.0,
        "phase": Phase.DECODE,
        "batch_size": 1,
        "num_decode_tokens": 1,
        "kv_usage": 0.0,
        "schedule_s": 0.0,
        "forward_s": 0.01,
        "sample_s": 0.0,
        "expert_misses": None,
        "evict_s": None,
    }
    return StepStats(**(base | fields))
