"""The bodies of the built-in server's own routes, typed, torch-free: what the server writes and
what the soak reads (`GET /v1/cache/status`, `GET /v1/engine/steps`).

`from_json` takes a decoded body and raises ValueError when it is not one (a wrong server, a
proxy's error page); a part the body lacks reads as None or empty, a field the reader does not
know is kept in `raw`. A step travels as the engine's own record (engine.runtime.stats.StepStats),
each figure under its field's name; the steps table's names for the few that differ are declared in
rundir.schema.STEP_FROM_ENGINE.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from engine.runtime.faults import FaultStats
from engine.runtime.gcstats import GcStats
from engine.runtime.hostmalloc import HeapStats
from engine.runtime.stats import StepStats

_T = TypeVar("_T")


class CacheTree(NamedTuple):
    """The prefix cache's index (engine.cache.base.CacheReport, the fields the soak records)."""

    num_nodes: int | None
    cached_tokens: int | None
    evictable_tokens: int | None
    locked_tokens: int | None


class StateSlots(NamedTuple):
    """Linear-attention state slots (engine.runtime.hooks.MambaStats)."""

    num_slots: int | None
    num_free: int | None
    num_snapshots: int | None

    @property
    def num_used(self) -> int | None:
        return None if self.num_slots is None or self.num_free is None else self.num_slots - self.num_free


class KvFreeList(NamedTuple):
    """The KV allocator's free list (engine.memory.allocator.AllocatorSummary)."""

    num_free: int | None
    num_free_runs: int | None
    largest_free_run: int | None
    fragmentation: float | None


class ExpertCache(NamedTuple):
    """The offloaded MoE expert cache's counters (engine.moe.expert_cache.ExpertCacheStats)."""

    hits: int | None
    misses: int | None
    evictions: int | None


class CacheStatus(NamedTuple):
    """`GET /v1/cache/status`."""

    engine_age_s: float
    last_step: int
    num_running: int
    num_waiting: int
    max_context: int | None
    cache: CacheTree
    state_slots: StateSlots
    kv_free_list: KvFreeList
    experts: ExpertCache | None  # None with the resident MoE backend
    gc: GcStats | None
    faults: FaultStats | None
    heap: HeapStats | None  # None where the engine cannot read its malloc (not glibc)
    config: dict[str, Any]
    raw: dict[str, Any]  # the whole body, as sent

    @classmethod
    def from_json(cls, body: Any) -> CacheStatus:
        if not isinstance(body, dict) or not isinstance(body.get("engine_age_s"), (int, float)):
            raise ValueError(f"expected the cache-status object with engine_age_s, found {_kind(body)}")
        experts = body.get("expert_cache_stats")
        faults = body.get("fault_stats")
        config = body.get("config")
        return cls(
            engine_age_s=float(body["engine_age_s"]),
            last_step=int(body.get("last_step") or 0),
            num_running=int(body.get("num_running") or 0),
            num_waiting=int(body.get("num_waiting") or 0),
            max_context=body.get("max_context"),
            cache=_pick(CacheTree, body.get("cache_report")),
            state_slots=_pick(StateSlots, body.get("mamba_stats")),
            kv_free_list=_pick(KvFreeList, body.get("allocator_summary")),
            experts=_pick(ExpertCache, experts) if isinstance(experts, dict) else None,
            gc=_pick(GcStats, body["gc"]) if isinstance(body.get("gc"), dict) else None,
            faults=_pick(FaultStats, faults | {"faults": tuple(faults.get("faults") or ())})
            if isinstance(faults, dict)
            else None,
            heap=_pick(HeapStats, body["heap"]) if isinstance(body.get("heap"), dict) else None,
            config=config if isinstance(config, dict) else {},
            raw=body,
        )


class StepsPage(NamedTuple):
    """`GET /v1/engine/steps?after=N`: the recorded steps numbered above N, oldest first. Pages
    until `next_after` reaches `last_step`; `num_missed` steps fell out of the history unread."""

    first_step: int | None  # the oldest step the history still holds
    last_step: int  # the newest step the engine has run
    next_after: int  # ask with after= this for the next page
    num_missed: int
    steps: list[StepStats]
    unreadable: tuple[str, ...] = ()  # why each step of the body that is not a step was left out (reader side)

    def to_json(self) -> dict[str, Any]:
        body = self._asdict() | {"steps": [s.to_json() for s in self.steps]}
        del body["unreadable"]
        return body

    @classmethod
    def from_json(cls, body: Any) -> StepsPage:
        if (
            not isinstance(body, dict)
            or not isinstance(body.get("last_step"), int)
            or not isinstance(body.get("steps"), list)
        ):
            raise ValueError(f"expected the steps page object with last_step and steps, found {_kind(body)}")
        steps, unreadable = [], []
        for item in body["steps"]:
            try:
                steps.append(StepStats.from_json(item))
            except ValueError as exc:
                unreadable.append(str(exc))
        nxt = body.get("next_after")
        return cls(
            first_step=body.get("first_step"),
            last_step=body["last_step"],
            next_after=nxt if isinstance(nxt, int) else max([0, *(s.step for s in steps)]),
            num_missed=int(body.get("num_missed") or 0),
            steps=steps,
            unreadable=tuple(unreadable),
        )


def _pick(cls: Callable[..., _T], d: Any) -> _T:
    """The NamedTuple `cls` from the fields of `d` it knows; missing ones None. Its fields are its
    constructor's parameters, the names of its `_fields` (which a Callable's type does not have)."""
    d = d if isinstance(d, dict) else {}
    return cls(**{name: d.get(name) for name in inspect.signature(cls).parameters})


def _kind(body: Any) -> str:
    if isinstance(body, dict):
        return f"an object with keys {sorted(body)[:8]}"
    return type(body).__name__
