"""The sentences of line two that more than one verdict shares: run longer, how long this run was,
a log's soak and the engine option that would let its log tell, and what a restart did to the speed.

Line two carries the fact that makes its action worth doing (a fourth reader asked for it even when
the verdict is no or can't tell): a restart that made the engine faster says so (`in this run a
restart brought the speed back`); how much is below the break, with the other measures: a sixth and a
seventh reader, given `1.5x faster` beside line one's `0.68x`, turned one into the other, and an eighth
found four percentages in five lines too many.
"""

from __future__ import annotations

from diagnostics.evidence.comparison import Comparison
from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words import rerun
from diagnostics.words.details import Detail, host_moved
from diagnostics.words.said import duration, moved_by
from logformats.figures import Missing

CYCLES = ("paired_control", "probes", "restart")  # comparisons whose sides count test-request cycles


def restart_gain(a: Analysis) -> str | None:
    """`a restart brought the speed back`, where a restart comparison shows the fresh engine faster
    (its size is below the break: an eighth reader found four percentages in five lines too many)."""
    r = next((c for c in a.comparisons if c.basis == "restart" and c.interval.bounded), None)
    if r is None or not 0 < r.ratio < 1:
        return None
    return "a restart brought the speed back"


def cycles(c: Comparison) -> str:
    """` over 5 rounds of test requests a side`: what a comparison of test requests rests on; '' for others."""
    if c.basis not in CYCLES:
        return ""
    if c.num_early == c.num_late:
        return f" over {c.num_early} rounds of test requests a side"
    return f" over {c.num_early} and {c.num_late} rounds of test requests"


def run_longer(a: Analysis, source: Source | None) -> str:
    """`Run longer on a quieter host (this run lasted 66 s, and a fresh copy run alongside slowed by
    47% meanwhile): ...`: with what makes the host suspect, where the fresh copy says it (a thirteenth
    reader: "on a quieter host" with no reason given at the top)."""
    drift = host_moved(a)
    quieter = drift is not None or any(
        c.name in ("host_contention", "control_drift") and c.status == "warn" for c in a.checks
    )
    where = " on a quieter host" if quieter else ""
    why = [x for x in (_lasted(source),) if x]
    if drift is not None:
        why.append(f"a fresh copy run alongside {moved_by(drift.ratio, 'slowed', 'sped up')} meanwhile")
    said = f" ({', and '.join(why)})" if why else ""
    return f"Run longer{where}{said}: `{rerun.soak_command(source, '--until-decided')}`."


def lasted(source: Source | None) -> str:
    """` (this run lasted 2.6 min)` where the run was short, for a next step that asks for a longer one."""
    said = _lasted(source)
    return f" ({said})" if said else ""


def _lasted(source: Source | None) -> str | None:
    """`this run lasted 2.6 min`, where the run was short."""
    return f"this run lasted {duration(rerun.run_seconds(source))}" if rerun.is_short(source) else None


def log_next(source: Source | None) -> str:
    """A log's next step: a soak with probes, which can tell."""
    # The engine option that lets its next log tell is under Details (log_options): a seventh reader
    # took it, beside a reason about no fresh engine, for a fix of that.
    return f"To tell, soak it with test requests: `{rerun.soak_command(source, '--until-decided')}`."


def log_options(source: Source | None) -> list[Detail]:
    """The engine options that print what a log lacks, for a log that could then tell."""
    options = [m.option for m in _switched(source)]
    return [Detail("so that its log can tell", f"restart it with {' '.join(options)}")] if options else []


def _switched(source: Source | None) -> list[Missing]:
    """The figures a log lacks that an engine option turns on (logformats.figures)."""
    info = getattr(source, "log_info", None)
    return [m for m in info.missing if m.switch] if info is not None else []
