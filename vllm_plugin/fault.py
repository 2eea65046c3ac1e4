"""A degradation switched on in a real vLLM through its own plugin mechanism: a test instrument.

vLLM calls every `vllm.general_plugins` entry point in each of its processes (the API server, the
engine core, each worker: vllm/plugins/__init__.py, `load_general_plugins`, called from
EngineCore.__init__ and WorkerWrapperBase.init_worker in 0.27.1 and 0.32.0). `register` is that
entry point. With `TOKDRIFT_VLLM_FAULT` unset it returns at once; with

    TOKDRIFT_VLLM_FAULT=step-cost                       # or step-cost:after=20,entries=8192

it wraps `WorkerWrapperBase.execute_model` (vllm/v1/worker/worker_base.py, the method every
executor calls once per engine step in the process that runs the model) so that each step first
pays a cost that grows with the requests served: each finished request, from the `after`-th on,
leaves `entries` references to its id in a list that is never pruned, and every step walks the
whole list, checking each id against the requests the step schedules (a cleanup that remembers
everything it ever cleaned). No sleep: the cost is the walk, 13-18 ns an entry in CPython 3.11 on
the development machine's CPU (more where the CPU is shared), so the default 2,048 entries a request
add about 30 us a step per request served (+30 ms a step after 1,000). Nothing on disk changes: the
wrap lives in the process's memory and goes with it.

Once on, the fault says what it holds and what it has cost, every REPORT_S seconds, as an engine
figure would: a line in vLLM's log (`tokdrift fault step-cost: 151552 entries held, 3.215 s spent
walking them (pid 123)`) and, where a step record is kept (TOKDRIFT_VLLM_STEPS), a `figures` line
in it (record.py). `fault_walk_s_total` is a time counter: diag's suspects rank it by the share of
the engine's wall time it took (diagnostics.evidence.suspects).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass
from typing import Any

from ground import TokdriftError
from vllm_plugin import figures
from vllm_plugin.record import FAULT_ENV, STEPS_ENV

# vLLM configures the `vllm` logger (its handler, its prefix); a child of it lands in vLLM's log.
logger = logging.getLogger("vllm.tokdrift_fault")

FAULTS = {"step-cost": "each finished request leaves entries in a list every step walks whole"}
MARK = "_tokdrift_fault"  # attribute of the wrapped method: what is on, and that it is wrapped
REPORT_S = 10.0  # seconds between the fault's state lines once it is on (vLLM's own stats period)
STATE_LINE = "tokdrift fault %s: %d entries held, %.3f s spent walking them (pid %d)"  # logformats.vllm reads it


class FaultSpecError(TokdriftError, ValueError):
    """TOKDRIFT_VLLM_FAULT names no fault, or a setting of it does not read."""


@dataclass(frozen=True)
class StepCostSpec:
    after: int = 1  # the finished request (1 = the first) from which each one leaves its entries
    entries: int = 2048  # entries each finished request leaves: ~30 us a step per request served
    limit: int = 20_000_000  # entries at most (160 MB of references, ~0.3 s a step): the growth stops there

    def __post_init__(self) -> None:
        for name, low in (("after", 1), ("entries", 1), ("limit", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise FaultSpecError(f"{FAULT_ENV}: step-cost's {name} must be an integer >= {low}, got {value!r}")

    def describe(self) -> str:
        return f"step-cost:after={self.after},entries={self.entries},limit={self.limit}"


def parse(text: str) -> StepCostSpec:
    """`step-cost` or `step-cost:after=N,entries=N,limit=N` as a spec."""
    name, _, settings = text.strip().partition(":")
    if name not in FAULTS:
        raise FaultSpecError(f"{FAULT_ENV}={text!r}: expected one of {', '.join(FAULTS)}, found {name!r}")
    values: dict[str, int] = {}
    known = StepCostSpec.__dataclass_fields__
    for part in filter(None, (p.strip() for p in settings.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in known:
            raise FaultSpecError(
                f"{FAULT_ENV}={text!r}: expected settings {', '.join(f'{k}=N' for k in known)}, found {part!r}"
            )
        try:
            values[key] = int(value)
        except ValueError:
            raise FaultSpecError(f"{FAULT_ENV}={text!r}: {key} must be an integer, got {value!r}") from None
    return StepCostSpec(**values)


def from_env() -> StepCostSpec | None:
    text = os.environ.get(FAULT_ENV)
    return parse(text) if text else None


class StepCost:
    """The mechanism, apart from vLLM: `on_step` with a step's finished request ids and the ids it
    schedules. Returns how many retained entries the step found scheduled (none: they finished)."""

    def __init__(self, spec: StepCostSpec) -> None:
        self.spec = spec
        self.retained: list[str] = []
        self.num_finished = 0
        self.walk_s_total = 0.0  # the time the walks took: the cost itself, measured

    @property
    def switched_on(self) -> bool:
        return self.num_finished >= self.spec.after

    def on_step(self, finished_ids: Iterable[str], scheduled: Container[str]) -> int:
        for request_id in finished_ids:
            self.num_finished += 1
            if self.num_finished == self.spec.after:
                logger.warning("tokdrift fault %s: on from this request (pid %d)", self.spec.describe(), os.getpid())
            room = self.spec.limit - len(self.retained)
            if self.switched_on and room > 0:
                self.retained.extend([request_id] * min(self.spec.entries, room))
        return self._walk(scheduled)

    def _walk(self, scheduled: Container[str]) -> int:
        start = time.perf_counter()
        found = 0
        for request_id in self.retained:
            if request_id in scheduled:
                found += 1
        self.walk_s_total += time.perf_counter() - start
        return found


class StateReport:
    """What the fault holds and has cost, every `every_s` seconds once it is on: a line in vLLM's
    log, and a `figures` line appended to the step record at `steps_path` where one is kept (one
    write a line, O_APPEND: figures.py)."""

    def __init__(self, cost: StepCost, steps_path: str | None, every_s: float = REPORT_S) -> None:
        self.cost = cost
        self.steps_path = steps_path
        self.every_s = every_s
        self._due = 0.0

    def maybe(self, now: float) -> None:
        if not self.cost.switched_on or now < self._due:
            return
        self._due = now + self.every_s
        self.report()

    def report(self) -> None:
        cost, pid = self.cost, os.getpid()
        logger.warning(STATE_LINE, cost.spec.describe(), len(cost.retained), cost.walk_s_total, pid)
        if not self.steps_path:
            return
        state = {"fault_entries": len(cost.retained), "fault_walk_s_total": round(cost.walk_s_total, 6)}
        try:
            figures.append(self.steps_path, state)
        except OSError as exc:  # the record's trouble must not stop the engine
            logger.warning("tokdrift fault: the step record %s cannot be appended to: %s", self.steps_path, exc)


def register() -> None:
    """The `vllm.general_plugins` entry point: wraps the worker's per-step method where asked to."""
    spec = from_env()
    if spec is None:
        return
    from vllm.v1.worker.worker_base import WorkerWrapperBase  # in a vLLM process: it is there

    wrap(WorkerWrapperBase, spec)


def wrap(cls: Any, spec: StepCostSpec) -> StepCost:
    """Wrap `cls.execute_model(scheduler_output)` with the cost, once per class (a process forked
    from one that wrapped it inherits the wrap, and its plugins are not loaded again)."""
    original: Callable[..., Any] = cls.execute_model
    cost: StepCost | None = getattr(original, MARK, None)
    if cost is not None:
        return cost
    cost = StepCost(spec)
    report = StateReport(cost, os.environ.get(STEPS_ENV) or None)

    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        cost.on_step(
            getattr(scheduler_output, "finished_req_ids", None) or (),
            getattr(scheduler_output, "num_scheduled_tokens", None) or {},
        )
        report.maybe(time.monotonic())
        return original(self, scheduler_output, *args, **kwargs)

    setattr(execute_model, MARK, cost)
    execute_model.__wrapped__ = original  # type: ignore[attr-defined]
    cls.execute_model = execute_model
    logger.warning(
        "tokdrift fault %s armed in pid %d: %s (a test instrument, docs/faults.md)",
        spec.describe(),
        os.getpid(),
        FAULTS["step-cost"],
    )
    return cost
