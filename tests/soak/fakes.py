"""The one stand-in for a soak target (soak.targets.Target) in the soak's tests."""

from __future__ import annotations

import time
from typing import Any


class FakeTarget:
    """An engine life, when it started, and the events it was told of; `age_s` fixes the age it
    reports (otherwise the time since `started_at`, None before a start)."""

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
        self.events: list[tuple[str, dict[str, Any]]] = []

    def age(self, now: float | None = None) -> float | None:
        if self.age_s is not None:
            return self.age_s
        if self.started_at is None:
            return None
        return (time.time() if now is None else now) - self.started_at

    def on_event(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def next_life(self) -> int:
        self.life += 1
        return self.life
