"""Which engine each life was: the facts its start-up lines state (logformats.identity), per life.

A restart is the control for engine age only between lives of one engine: a log whose second
life runs another build, backend, thread count or model compares two engines, and what it shows
is the change, not age. Lives whose facts differ in any fact both state are different engines;
a fact only one of them states (a preamble cut from an excerpt) tells nothing either way.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

# The order facts are said in, most telling first; others follow in their own order.
ORDER = (
    "version",
    "build",
    "model",
    "backend",
    "device",
    "gpu_layers",
    "threads",
    "n_ctx",
    "slots",
    "tp",
    "dp",
    "dtype",
    "kv_cache_dtype",
    "flash_attn",
)


class LifeIdentity(NamedTuple):
    life: int
    start: np.datetime64 | None  # the life's first step
    facts: dict[str, str]

    def describe(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in _ordered(self.facts)) or "nothing said at start-up"


class Change(NamedTuple):
    """Two consecutive lives that were different engines, and how."""

    before: int
    after: int
    at: np.datetime64 | None
    diffs: tuple[tuple[str, str, str], ...]  # (fact, before, after)

    def describe(self) -> str:
        said = ", ".join(f"{k} {a} -> {b}" for k, a, b in self.diffs)
        return f"life {self.before} -> {self.after}: {said}"


def lives(steps: pd.DataFrame, events: pd.DataFrame) -> tuple[LifeIdentity, ...]:
    """Each engine life with steps, and the facts its start-up lines stated.

    A fact belongs to the life whose first step follows it in the file (start-up lines come
    before the work they describe, and some, the devices, before the line that starts the life);
    without line numbers (a run directory), to the life it was recorded in."""
    if steps.empty:
        return ()
    first = steps.groupby("engine_life")[["t", "line"]].min().sort_index()
    config = events[events["kind"] == "engine_config"] if not events.empty else events
    facts: dict[int, dict[str, str]] = {int(life): {} for life in first.index}
    if len(config):
        lines = first["line"].to_numpy(dtype=float)
        with_lines = np.isfinite(lines).all() and config["line"].notna().all()
        for row in config.itertuples(index=False):
            key, sep, value = str(row.detail).partition("=")
            if not sep:
                continue
            if with_lines:
                pos = int(np.searchsorted(lines, float(row.line), side="left"))
                if pos >= len(lines):
                    continue  # a start that never served
                life = int(first.index[pos])
            else:
                life = int(row.engine_life)
            if life not in facts:
                continue
            got = facts[life]
            # Several devices: all of them; anything else stated twice: the last word.
            if key == "device" and key in got:
                if value not in got[key].split(" + "):
                    got[key] += " + " + value
            else:
                got[key] = value
    return tuple(LifeIdentity(life, first.loc[life, "t"], facts[life]) for life in first.index)


def same_engine(a: LifeIdentity, b: LifeIdentity) -> bool:
    return not _diffs(a, b)


def changes(identities: tuple[LifeIdentity, ...]) -> tuple[Change, ...]:
    """Each life that ran a different engine from the life before it."""
    out = []
    for a, b in zip(identities, identities[1:]):
        diffs = _diffs(a, b)
        if diffs:
            out.append(Change(a.life, b.life, b.start, diffs))
    return tuple(out)


def engine_of(identities: tuple[LifeIdentity, ...]) -> dict[int, int]:
    """Each life's engine, numbered from 0 in order of first appearance: lives with the same number
    were the same engine, as far as their start-up lines say."""
    out: dict[int, int] = {}
    seen: list[LifeIdentity] = []
    for ident in identities:
        k = next((j for j, other in enumerate(seen) if same_engine(other, ident)), None)
        if k is None:
            seen.append(ident)
            k = len(seen) - 1
        out[ident.life] = k
    return out


def _diffs(a: LifeIdentity, b: LifeIdentity) -> tuple[tuple[str, str, str], ...]:
    return tuple((k, a.facts[k], b.facts[k]) for k, _ in _ordered(a.facts) if k in b.facts and a.facts[k] != b.facts[k])


def _ordered(facts: dict[str, str]) -> list[tuple[str, str]]:
    rank = {k: i for i, k in enumerate(ORDER)}
    return sorted(facts.items(), key=lambda kv: rank.get(kv[0], len(ORDER)))
