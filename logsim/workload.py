"""Agent sessions, the load a coding agent puts on an engine.

An agent works in turns: its request appends a tool's output onto everything the session
said before (cached in the engine's prefix cache), the engine decodes the reply, the agent
runs the tool (think time), and comes back with the next append. A session ends once its
context passes a limit drawn per session; the next one starts from a fresh prompt of which
only the shared system prompt is cached. How many agents work at once may change over the
run (a batch walk), and every agent may pause at once (the engine idles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Workload:
    hours: float = 3.0
    agents: tuple[tuple[float, int], ...] = ((0.0, 2),)  # (from hour, number of agents at work)
    system_tokens: tuple[int, int] = (8_000, 20_000)  # a new session's first prompt
    shared_tokens: int = 6_000  # ...of which every session shares this much (cached once served)
    append_tokens: tuple[int, int] = (200, 4_000)  # a tool's output appended per turn (log-uniform)
    output_tokens: tuple[int, int] = (40, 600)  # tokens the engine generates per turn (log-uniform)
    think_s: tuple[float, float] = (2.0, 40.0)  # a tool's run between turns (log-uniform)
    session_tokens: tuple[int, int] = (40_000, 100_000)  # a session ends past a limit drawn from here
    first_context: tuple[int, int] | None = None  # sessions already this long when the log starts
    pauses: tuple[tuple[float, float], ...] = ()  # (at hour, minutes): every agent stops; the engine idles
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hours <= 0:
            raise ValueError(f"hours must be > 0, got {self.hours}")
        if not self.agents or self.agents[0][0] != 0.0 or any(n < 0 for _, n in self.agents):
            raise ValueError(f"agents must start at hour 0.0 with counts >= 0, got {self.agents}")
        for name in ("system_tokens", "append_tokens", "output_tokens", "think_s", "session_tokens"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi:
                raise ValueError(f"{name} must be (lo, hi) with 0 < lo <= hi, got {(lo, hi)}")
        if self.shared_tokens >= self.system_tokens[0]:
            raise ValueError(
                f"shared_tokens must be below system_tokens' low end {self.system_tokens[0]}, got {self.shared_tokens}"
            )

    @property
    def max_agents(self) -> int:
        return max(n for _, n in self.agents)

    def num_agents(self, t_s: float) -> int:
        """Agents at work `t_s` seconds into the run."""
        n = self.agents[0][1]
        for at_h, count in self.agents:
            if t_s >= at_h * 3600:
                n = count
        return n

    def paused_until(self, t_s: float) -> float | None:
        """The end (s) of a pause `t_s` falls in, or None."""
        for at_h, minutes in self.pauses:
            if at_h * 3600 <= t_s < at_h * 3600 + minutes * 60:
                return at_h * 3600 + minutes * 60
        return None


class Turn:
    """One request an agent sends: `new` tokens appended onto `cached` ones, `out` to generate."""

    __slots__ = ("agent", "new", "cached", "out")

    def __init__(self, agent: int, new: int, cached: int, out: int) -> None:
        self.agent, self.new, self.cached, self.out = agent, new, cached, out


class Agents:
    """Every agent's session and when it sends its next turn; the engine asks and reports back."""

    def __init__(self, workload: Workload, rng: np.random.Generator) -> None:
        self.w = workload
        self.rng = rng
        n = workload.max_agents
        self.context = [0] * n  # tokens of the session so far (0: no session)
        self.limit = [self._session_limit() for _ in range(n)]
        self.next_t = [float(rng.uniform(20.0, 40.0)) for _ in range(n)]  # once the model has loaded
        self.busy = [False] * n  # a turn in the engine
        self.cold = [True] * n  # the engine holds nothing of this session (start, restart)
        if workload.first_context is not None:
            for i in range(n):
                self.context[i] = int(rng.integers(*workload.first_context))

    def add(self, context: int, next_t: float) -> int:
        """An agent that joins with a session of `context` tokens already cached (a branch resumed)."""
        self.context.append(context)
        self.limit.append(context + self._session_limit() // 4)
        self.next_t.append(next_t)
        self.busy.append(False)
        self.cold.append(False)
        return len(self.context) - 1

    def due(self, t: float, extra: int = 0) -> list[int]:
        """Agents whose next turn is due at `t` (at work, not paused, nothing in the engine)."""
        if self.w.paused_until(t) is not None:
            return []
        at_work = self.w.num_agents(t) + extra
        return [
            i
            for i in range(len(self.context))
            if not self.busy[i] and self.next_t[i] <= t and (i < at_work or i >= self.w.max_agents)
        ]

    def next_due(self, t: float) -> float:
        """The next time (s) any agent may send a turn: a pause's end, a schedule change, a turn."""
        pause_end = self.w.paused_until(t)
        if pause_end is not None:
            return pause_end
        times = [x for i, x in enumerate(self.next_t) if not self.busy[i]]
        changes = [h * 3600 for h, _ in self.w.agents if h * 3600 > t]
        pauses = [h * 3600 for h, _ in self.w.pauses if h * 3600 > t]
        candidates = [x for x in times if x > t] + changes + pauses
        return max(t, min(candidates)) if candidates else math.inf

    def turn(self, i: int) -> Turn:
        self.busy[i] = True
        if self.context[i] == 0 or self.context[i] > self.limit[i]:
            self.limit[i] = self._session_limit()
            prompt = int(self.rng.integers(*self.w.system_tokens))
            shared = 0 if self.cold[i] else self.w.shared_tokens
            self.context[i] = prompt
            self.cold[i] = False
            return Turn(i, prompt - shared, shared, self._output())
        new = self._log_uniform(self.w.append_tokens)
        cached = 0 if self.cold[i] else self.context[i]
        new_total = new if cached else self.context[i] + new
        self.context[i] += new
        self.cold[i] = False
        return Turn(i, new_total, cached, self._output())

    def done(self, i: int, t: float, generated: int) -> None:
        """The turn finished at `t` with `generated` tokens: the agent runs its tool."""
        self.busy[i] = False
        self.context[i] += generated
        self.next_t[i] = t + self._log_uniform(self.w.think_s)

    def failed(self, i: int, t: float) -> None:
        """The engine lost the turn (a restart, a drop): the agent retries with its whole session."""
        self.busy[i] = False
        self.cold[i] = True
        self.next_t[i] = t + float(self.rng.uniform(5.0, 20.0))

    def restart(self) -> None:
        self.cold = [True] * len(self.cold)

    def _session_limit(self) -> int:
        return int(self.rng.integers(*self.w.session_tokens))

    def _output(self) -> int:
        return int(self._log_uniform(self.w.output_tokens))

    def _log_uniform(self, bounds: tuple[float, float]) -> float:
        lo, hi = bounds
        value = math.exp(self.rng.uniform(math.log(lo), math.log(hi)))
        return int(round(value)) if isinstance(lo, int) else value
