"""The soak's serving time: how long it has replayed, across `soak resume`.

    clock = ServingClock(duration_s, before_s)   # before_s: earlier segments' (the manifest's)
    deadline = clock.start()                     # the replay begins
    clock.elapsed_s(now), clock.remaining_s(now)

Only the replay is serving time: the engines' start, the start probe cycle and the baseline spend
none of it, so the clock stands still until start().
"""

from __future__ import annotations

import math
import time


class ServingClock:
    def __init__(self, duration_s: float, before_s: float = 0.0) -> None:
        self.duration_s = duration_s
        self.before_s = before_s  # served by the run's earlier segments
        self.started = math.inf  # this segment's replay start (Unix s)
        self.deadline = time.time() + self.left_s

    @property
    def left_s(self) -> float:
        """Serving time this segment may still take."""
        return max(0.0, self.duration_s - self.before_s)

    def start(self) -> float:
        """The replay begins: the clock runs from now. Returns the deadline."""
        self.started = time.time()
        self.deadline = self.started + self.left_s
        return self.deadline

    def elapsed_s(self, now: float) -> float:
        return self.before_s + max(0.0, now - self.started)

    def remaining_s(self, now: float) -> float:
        return max(0.0, self.deadline - now)
