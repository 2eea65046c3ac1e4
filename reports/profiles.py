"""Profile comparison: where the engine's time goes while healthy and while degraded.

Reads speedscope JSON (what `py-spy record --format speedscope` writes), both its `sampled`
and `evented` profiles, and sums each frame's self time (the frame on top of the stack) and
total time (the frame anywhere in the stack) over every thread. A profile is filed as
healthy or degraded by its name (`...-healthy`, `...-degraded`, as the soak names them), else
by when it was taken against the onset, else the first is healthy and the last degraded.
"""

from __future__ import annotations

import json
import logging
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

logger = logging.getLogger(__name__)

HEALTHY_NAMES = re.compile(r"(?i)healthy|baseline|early|before|fresh")
DEGRADED_NAMES = re.compile(r"(?i)degraded|slow|drop|after|late")
STAMP = re.compile(r"(\d{8}T\d{6})")
TOP = 12


class FrameTimes(NamedTuple):
    self_s: dict[str, float]  # frame label -> time on top of the stack
    total_s: dict[str, float]  # frame label -> time anywhere in the stack
    num_profiles: int

    @property
    def total(self) -> float:
        return sum(self.self_s.values())


class FrameRow(NamedTuple):
    frame: str
    healthy_share: float | None  # share of all self time, 0..1
    degraded_share: float | None
    healthy_total_share: float | None
    degraded_total_share: float | None


class ProfileComparison(NamedTuple):
    healthy: list[str]  # file names
    degraded: list[str]
    rows: list[FrameRow]
    skipped: list[str]  # files that could not be read, with why


def read_speedscope(path: Path) -> FrameTimes:
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    frames = [_label(f) for f in doc.get("shared", {}).get("frames", [])]
    self_s: dict[str, float] = defaultdict(float)
    total_s: dict[str, float] = defaultdict(float)
    profiles = doc.get("profiles", [])
    for prof in profiles:
        for stack, weight in _stacks(prof):
            if not stack:
                continue
            self_s[frames[stack[-1]]] += weight
            for name in {frames[i] for i in stack}:
                total_s[name] += weight
    return FrameTimes(dict(self_s), dict(total_s), len(profiles))


def compare(paths: Sequence[Path], onset_stamp: str | None = None) -> ProfileComparison | None:
    """Healthy against degraded; None when there is nothing on one of the two sides."""
    healthy, degraded = classify(paths, onset_stamp)
    if not healthy or not degraded:
        return None
    skipped: list[str] = []
    h, d = _merge(healthy, skipped), _merge(degraded, skipped)
    if h is None or d is None:
        return None
    ht, dt = h.total or 1.0, d.total or 1.0
    names = set(h.self_s) | set(d.self_s)
    key = lambda n: max(h.self_s.get(n, 0.0) / ht, d.self_s.get(n, 0.0) / dt)  # noqa: E731
    rows = []
    for name in sorted(names, key=key, reverse=True)[:TOP]:
        rows.append(
            FrameRow(
                frame=name,
                healthy_share=h.self_s.get(name, 0.0) / ht,
                degraded_share=d.self_s.get(name, 0.0) / dt,
                healthy_total_share=h.total_s.get(name, 0.0) / ht,
                degraded_total_share=d.total_s.get(name, 0.0) / dt,
            )
        )
    return ProfileComparison([p.name for p in healthy], [p.name for p in degraded], rows, skipped)


def classify(paths: Sequence[Path], onset_stamp: str | None) -> tuple[list[Path], list[Path]]:
    healthy = [p for p in paths if HEALTHY_NAMES.search(p.name)]
    degraded = [p for p in paths if DEGRADED_NAMES.search(p.name) and p not in healthy]
    if healthy or degraded:
        return healthy, degraded
    if onset_stamp is not None:
        stamped = [(m.group(1), p) for p in paths if (m := STAMP.search(p.name))]
        before = [p for s, p in stamped if s < onset_stamp]
        after = [p for s, p in stamped if s >= onset_stamp]
        if before and after:
            return before, after
    ordered = sorted(paths)
    return (ordered[:1], ordered[-1:]) if len(ordered) >= 2 else ([], [])


def _merge(paths: Sequence[Path], skipped: list[str]) -> FrameTimes | None:
    self_s: dict[str, float] = defaultdict(float)
    total_s: dict[str, float] = defaultdict(float)
    n = 0
    for path in paths:
        try:
            ft = read_speedscope(path)
        except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            logger.warning("%s: not a readable speedscope profile (%s); skipped", path, exc)
            skipped.append(f"{path.name}: {exc}")
            continue
        for k, v in ft.self_s.items():
            self_s[k] += v
        for k, v in ft.total_s.items():
            total_s[k] += v
        n += ft.num_profiles
    return FrameTimes(dict(self_s), dict(total_s), n) if n else None


def _stacks(prof: dict[str, Any]) -> Iterator[tuple[list[int], float]]:
    """(stack of frame indices, weight) pairs of one speedscope profile."""
    if prof.get("type") == "sampled":
        samples = prof.get("samples", [])
        weights = prof.get("weights") or [1.0] * len(samples)
        yield from zip(samples, (float(w) for w in weights))
    elif prof.get("type") == "evented":
        stack: list[int] = []
        last = float(prof.get("startValue", 0.0))
        for ev in prof.get("events", []):
            at = float(ev["at"])
            if stack and at > last:
                yield list(stack), at - last
            last = at
            if ev["type"] == "O":
                stack.append(int(ev["frame"]))
            elif ev["type"] == "C" and stack:
                stack.pop()


def _label(frame: dict[str, Any]) -> str:
    name = str(frame.get("name", "?"))
    file = frame.get("file")
    if not file:
        return name
    parts = re.split(r"[\\/]", str(file))
    if "site-packages" in parts:  # the import path: engine/memory/allocator.py
        short = "/".join(parts[len(parts) - parts[::-1].index("site-packages") :])
    else:
        short = "/".join(parts[-3:])
    line = frame.get("line")
    return f"{name} ({short}:{line})" if line is not None else f"{name} ({short})"


def fmt_share(x: float | None) -> str:
    return "" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"
