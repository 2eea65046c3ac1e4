"""The sentences of line two that more than one verdict shares: run longer, how long this run was,
a log's soak and the engine option that would let its log tell, and what a restart did to the speed.

Line two carries the fact that makes its action worth doing (a fourth reader asked for it even when
the verdict is no or can't tell): a restart that made the engine faster says by how much, in percent
as line one says a change (`a restart made decode 47% faster`; from twice as fast up, `9.0 times as
fast`): a sixth reader, given `1.5x faster` beside line one's `0.68x`, had to turn one into the other.
"""

from __future__ import annotations

from diagnostics.evidence.comparison import Comparison
from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words import rerun
from diagnostics.words.details import Detail
from diagnostics.words.said import duration, faster
from logformats.figures import Missing

CYCLES = ("paired_control", "probes", "restart")  # comparisons whose sides count test-request cycles


def restart_gain(a: Analysis) -> str | None:
    """`a restart made decode 47% faster`, where a restart comparison shows the fresh engine faster."""
    r = next((c for c in a.comparisons if c.basis == "restart" and c.interval.bounded), None)
    if r is None or not 0 < r.ratio < 1:
        return None
    return f"a restart made decode {faster(1 / r.ratio)}"


def cycles(c: Comparison) -> str:
    """` over 5 test-request cycles a side`: what a comparison of test requests rests on; '' for others."""
    if c.basis not in CYCLES:
        return ""
    if c.num_early == c.num_late:
        return f" over {c.num_early} test-request cycles a side"
    return f" over {c.num_early} and {c.num_late} test-request cycles"


def run_longer(a: Analysis, source: Source | None) -> str:
    quieter = any(c.name in ("host_contention", "control_drift") and c.status == "warn" for c in a.checks)
    where = " on a quieter host" if quieter else ""
    return f"Run longer{where}{lasted(source)}: `{rerun.soak_command(source, '--until-decided')}`."


def lasted(source: Source | None) -> str:
    """` (this run lasted 2.6 min)` where the run was short, for a next step that asks for a longer one."""
    return f" (this run lasted {duration(rerun.run_seconds(source))})" if rerun.is_short(source) else ""


def log_next(source: Source | None) -> str:
    """A log's next step: a soak with probes, which can tell, or where the log lacks a figure an
    engine option prints, that option (what each gives is in the details)."""
    soak = f"To tell, soak it with test requests: `{rerun.soak_command(source, '--until-decided')}`"
    switched = _switched(source)
    if not switched:
        return soak + "."
    return f"{soak}; or restart {switched[0].engine} with {switched[0].switch}, so that its next log can tell."


def log_options(source: Source | None) -> list[Detail]:
    """The engine options that print what a log lacks, for a log that could then tell."""
    options = [m.option for m in _switched(source)]
    return [Detail("so that its log can tell", f"restart it with {' '.join(options)}")] if options else []


def _switched(source: Source | None) -> list[Missing]:
    """The figures a log lacks that an engine option turns on (logformats.figures)."""
    info = getattr(source, "log_info", None)
    return [m for m in info.missing if m.switch] if info is not None else []
