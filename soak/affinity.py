"""CPU affinity: the soak driver on one CPU, the engines it starts on the others.

On a small host the driver (streaming, timing, sampling, writing parts) and the engine share
cores, and the driver's bursts become the engine's noise. Where the process may use at least
two CPUs, the driver takes the first and every engine process the rest:

    allowed  {0, 1, 2, 3}
    driver   {0}
    engines  {1, 2, 3}      (set in the child before exec; its model threads follow)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)


class Affinity(NamedTuple):
    driver: tuple[int, ...] | None  # None: left as it is
    engine: tuple[int, ...] | None
    why_off: str | None

    @property
    def enabled(self) -> bool:
        return self.why_off is None

    def to_json(self) -> dict[str, Any]:
        if self.why_off is not None:
            return {"why_off": self.why_off}
        return {"driver": list(self.driver or ()), "engine": list(self.engine or ())}


def plan(wanted: bool | None, starts_engines: bool = True) -> Affinity:
    """Where the driver and the engines go. `wanted`: True/False from --affinity/--no-affinity,
    None for the default (on where the machine allows)."""
    if wanted is False:
        return _off("--no-affinity")
    if not starts_engines:
        return _off("the engine is not started by the soak (URL target)")
    if not hasattr(os, "sched_setaffinity"):
        return _off("this OS has no sched_setaffinity")
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return _off(f"the soak may use {len(allowed)} CPU; separate cores need at least 2")
    return Affinity((allowed[0],), tuple(allowed[1:]), None)


def pin_driver(affinity: Affinity) -> set[int] | None:
    """Put this process on the driver's CPUs; the CPUs it had, to give back with `restore`."""
    if not affinity.enabled or not affinity.driver:
        return None
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, affinity.driver)
    except OSError as exc:
        logger.warning("driver not pinned to CPU %s: %s", _cpus(affinity.driver), exc)
        return None
    logger.info("driver on CPU %s, engines on CPU %s", _cpus(affinity.driver), _cpus(affinity.engine))
    return before


def restore(before: set[int] | None) -> None:
    """Give this process back the CPUs it had (a soak run inside a longer-lived process)."""
    if before is not None:
        os.sched_setaffinity(0, before)


def in_child(cpus: tuple[int, ...] | None) -> Callable[[], None] | None:
    """A preexec step that moves the child onto `cpus` before it execs; None when there are none."""
    if not cpus:
        return None

    def pin() -> None:
        try:
            os.sched_setaffinity(0, cpus)
        except OSError:  # a cgroup that forbids it: the engine runs where it may
            pass

    return pin


def _off(why: str) -> Affinity:
    return Affinity(None, None, why)


def _cpus(cpus: tuple[int, ...] | None) -> str:
    return ",".join(str(c) for c in cpus or ())
