"""Per-step figures the engine returns from `step()` and the soak records as `steps/` rows, and the
fixed-size history of them the server keeps (`StepHistory`)."""

from __future__ import annotations

import typing
from typing import Any, NamedTuple

import numpy as np

from ground import Label


class Phase(Label):
    """What a step's forward computed (the steps table's `phase`, rundir.schema.StepPhase)."""

    PREFILL = "prefill"  # prompt tokens only
    DECODE = "decode"  # one new token for each request in the batch
    MIXED = "mixed"  # both in one forward


class StepStats(NamedTuple):
    step: int  # engine step counter since start
    t: float  # wall clock (time.time()) at the end of the step
    engine_age_s: float  # seconds since the engine started
    phase: Phase
    batch_size: int  # requests in the forward
    num_prefill_tokens: int  # new prompt tokens computed this step
    num_decode_tokens: int  # requests that decoded one token this step
    num_cached_tokens: int  # prompt tokens newly admitted from the prefix cache this step
    num_context_tokens: int  # sum over the batch of each request's context after the step
    max_context_tokens: int  # longest context in the batch
    num_running: int  # requests holding memory after the step
    num_waiting: int  # requests queued after the step
    kv_used_tokens: int  # KV slots held by requests and the cache
    kv_total_tokens: int
    kv_usage: float  # (total - free - evictable) / total, as FreeToken's `token usage`
    mamba_slots_used: int
    mamba_slots_total: int
    schedule_s: float  # choosing the batch, matching prefixes, allocating
    forward_s: float  # the model forward
    sample_s: float  # sampling and bookkeeping of new tokens
    num_retracted: int  # requests retracted this step for lack of KV
    num_finished: int
    expert_misses: int | None = None  # expert cache misses this step (offload backend)
    evict_s: float | None = None  # of schedule_s (and sample_s), time inside prefix-cache eviction

    @property
    def duration_s(self) -> float:
        return self.schedule_s + self.forward_s + self.sample_s

    def to_json(self) -> dict[str, Any]:
        """The step as the server sends it: every field by its name, and duration_s."""
        return self._asdict() | {"duration_s": self.duration_s}

    @classmethod
    def from_json(cls, body: Any) -> StepStats:
        """A step from what `to_json` wrote (a newer server's extra fields ignored); ValueError when
        a field without a default is missing or a value is not of its kind."""
        if not isinstance(body, dict):
            raise ValueError(f"a step is an object, found {type(body).__name__}")
        missing = [name for name in cls._fields if name not in body and name not in cls._field_defaults]
        if missing:
            raise ValueError(f"a step without {', '.join(missing)}")
        values = {name: body[name] for name in cls._fields if name in body}
        for name, value in values.items():
            kind = _KINDS[name]
            if value is None and name in cls._field_defaults:
                continue
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"a step's {name} is {value!r}, not a whole number")
            if kind is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"a step's {name} is {value!r}, not a number")
            if kind is float:
                values[name] = float(value)
        try:
            values["phase"] = Phase(values["phase"])
        except ValueError:
            raise ValueError(f"a step's phase is {values['phase']!r}, not one of {[p.value for p in Phase]}") from None
        return cls(**values)


def _base(hint: Any) -> type:
    """int for `int | None`, and the type itself otherwise."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base: type = args[0] if args else hint
    return base


# Each field's kind, read from StepStats' own annotations (a float field may arrive as a whole number).
_KINDS: dict[str, type] = {name: _base(hint) for name, hint in typing.get_type_hints(StepStats).items()}


_PHASES = tuple(Phase)
_OPTIONAL = frozenset(StepStats._field_defaults)  # None is kept as NaN
_DTYPE = np.dtype(
    [
        (name, np.uint8 if kind is Phase else np.float64 if kind is float or name in _OPTIONAL else np.int64)
        for name, kind in _KINDS.items()
    ]
)


class StepHistory:
    """The last `capacity` steps in one array taken and written at start, so that the history costs
    the same memory from the first step to the millionth (a deque of StepStats grew by about 544
    bytes a step until full: 34 MB over the first two hours of a soak, a slope in the server's RSS).
    A step is 185 bytes here. Steps are numbered 1, 2, 3, ... with no gaps, as the engine counts
    them. Not thread-safe: the runner holds a lock around it."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a step history holds at least one step, not {capacity}")
        self.capacity = capacity
        self._rows = np.empty(capacity, dtype=_DTYPE)
        self._rows.view(np.uint8)[:] = 0  # touch every page now, not as the history fills
        self._count = 0  # steps appended so far
        self._last = 0  # the step number of the newest held

    def __len__(self) -> int:
        return min(self._count, self.capacity)

    @property
    def first_step(self) -> int | None:
        return self._last - len(self) + 1 if self._count else None

    def append(self, stats: StepStats) -> None:
        if self._count and stats.step != self._last + 1:
            raise ValueError(f"step {stats.step} after {self._last}: steps are numbered without gaps")
        row = list(stats)
        row[_PHASE_AT] = _PHASES.index(stats.phase)
        for i in _OPTIONAL_AT:
            if row[i] is None:
                row[i] = np.nan
        self._rows[self._count % self.capacity] = tuple(row)
        self._count += 1
        self._last = stats.step

    def after(self, after: int, limit: int) -> list[StepStats]:
        """Up to `limit` held steps numbered above `after`, oldest first."""
        held = len(self)
        skip = max(0, after + 1 - (self._last - held + 1)) if held else 0
        n = max(0, min(limit, held - skip))
        start = (self._count - held + skip) % self.capacity
        idx = (start + np.arange(n)) % self.capacity
        out = []
        for row in self._rows[idx].tolist():
            row = list(row)
            row[_PHASE_AT] = _PHASES[row[_PHASE_AT]]
            for i in _OPTIONAL_AT:
                if row[i] != row[i]:  # NaN
                    row[i] = None
                elif i in _OPTIONAL_INT_AT:
                    row[i] = int(row[i])
            out.append(StepStats._make(row))  # rows are kept in field order
        return out


_PHASE_AT = StepStats._fields.index("phase")
_OPTIONAL_AT = tuple(StepStats._fields.index(name) for name in StepStats._fields if name in _OPTIONAL)
_OPTIONAL_INT_AT = frozenset(i for i in _OPTIONAL_AT if _KINDS[StepStats._fields[i]] is int)  # stored as float64
