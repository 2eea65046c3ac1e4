"""The first three lines a reader reads, then a details break.

Every page opens with them (the summary, the report's verdict box, `diag analyze` on the
terminal), for an operator deciding whether to restart and an engine developer reading a bug,
each giving it half a minute:

1. **the answer** in words, **its size** in the reader's units (`decode speed 79% slower than
   early in the run, at the same batch size and context length (90% interval 73-84% slower)`; in
   tok/s only where two measured speeds stand for the figure, diagnostics.said; `no slower` where
   the estimate is at or above 1), and **how sure**, with the one thing that keeps it from surer
   (`Low confidence, because only 2 early measurements were there to compare with`). One interval,
   at one level, no other statistics.
2. **one thing to do**, with a command complete where the run knows its values
   (diagnostics.rerun); and a line of its own, action first, for each problem beside the verdict
   (requests that failed, a KV cache that ran out of room).
3. **why**: when it began, right after what, whether a restart brought the speed back and the
   top suspect (engine age); how it was measured (no age); or the one reason it cannot tell, said
   in terms of the measure that backs it, and what would settle it.

Everything else (the other measures, what else held the confidence back, why an interval is
wider, the engine and host) goes below the break (diagnostics.details). Above it, every term is
one a first-time reader knows: decode speed, the soaked engine and a fresh one (a control, or the
soaked engine just restarted), test requests (not probes), early and late, the host; the engine's
own figures only as a suspect's name, with what it is. Times to the second, in the source's own
clock.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics import rerun
from diagnostics import suspects as suspects_mod
from diagnostics.comparison import DECODE_MATERIAL
from diagnostics.details import (
    Detail,
    cap_checks,
    cap_reason,
    decisive,
    figure,
    held_back,
    identity,
    measure,
)
from diagnostics.intervals import Interval
from diagnostics.labels import Basis, Cause, CheckStatus, Confidence, Verdict
from diagnostics.result import Analysis, Check
from diagnostics.said import amount, change, duration, size, stamp
from diagnostics.side_actions import side_actions
from diagnostics.source import Source
from logformats.figures import Missing

HEADLINES = {
    Verdict.AGE: "The engine slowed down with age",
    Verdict.CONTEXT_ONLY: "Slower only as the context grew, not with engine age",
    Verdict.NO_DEGRADATION: "No slowdown with engine age",
    Verdict.INSUFFICIENT: "Cannot tell yet whether the engine slowed with age",
}
BELOW_MATERIAL = "Slightly slower, below what tokdrift calls engine age"
NOT_SHOWN = "Not shown to slow with age"
CONTEXT_NOT_SHOWN = "Slower as the context grew, not shown to be engine age"
NO_LOSS_MEASURED = "No slowdown measured"
HOST_DRIFT = "Slower, but the host or the load changed, not the engine"
NO_SLOWER = 0.995  # an interval's lower end from here up is said as no slower (it rounds to 0 %)
MOVED_A_LOT = 2.0  # a suspect whose medians moved this many times over is said beside an undecided verdict
FROM_START_S = 5.0  # a fault set this close to the engine's start was set with it
# How the measure a verdict could not decide on is said, in line three (`within the run, its probes
# beside a fresh engine did not show a clear loss`).
WITHIN = {
    Basis.PAIRED_CONTROL: "its test requests beside a fresh engine",
    Basis.PROBES: "its own test requests",
    Basis.BINS: "its decode speed at the same batch size and context length",
    Basis.STEP_SERIES: "its decode speed at the same batch size and context length",
    Basis.COMBINED: "its measures of decode speed together",
}
LABEL_NEXT = "Next"
LABEL_ALSO = "Also"
LABEL_WHY = "Why"
LABEL_MEASURED = "How measured"


class Opening(NamedTuple):
    headline: str  # the answer in words
    size: str | None  # the figure in the reader's units, with its interval
    confidence: str | None  # `Medium confidence, because ...`; None where there is no verdict to be sure of
    action: str  # line two: what to do, with a complete command
    also: tuple[str, ...]  # a line each, action first, for a problem beside the verdict
    why_label: str  # Why, or How measured
    why: str  # line three
    details: tuple[Detail, ...]  # below the break

    @property
    def verdict_line(self) -> str:
        """Line one: the answer, its size and how sure."""
        said = f"{self.headline}: {self.size}." if self.size else f"{self.headline}."
        return f"{said} {self.confidence}" if self.confidence else said

    @property
    def lines(self) -> tuple[tuple[str, str], ...]:
        """The lines after the first, each with its label: what to do, each side problem, why."""
        return ((LABEL_NEXT, self.action), *((LABEL_ALSO, x) for x in self.also), (self.why_label, self.why))

    @property
    def paragraph(self) -> str:
        """The three lines as one text, for a page with room for no more (diag compare)."""
        return " ".join((self.verdict_line, self.action, *self.also, self.why))


def opening(a: Analysis, source: Source | None = None) -> Opening:
    """The verdict's first lines and what goes below the break. `source`, where the caller has it,
    adds what only it holds: the requests that failed, a log's missing figures, the run's command,
    the path to name in a command."""
    path = source.path if source is not None else a.source_path
    log = a.source_kind == "log"
    extra: list[Detail] = []
    if a.verdict == Verdict.AGE:
        headline, figure_said, action, why = _age(a, path, source)
        label = LABEL_WHY
    elif a.verdict == Verdict.INSUFFICIENT:
        headline, figure_said, action, why = _undecided(a, source, log)
        label = LABEL_WHY
    else:
        headline, figure_said, action, why = _no_age(a, source, log)
        label = LABEL_MEASURED
    if log:
        extra += _log_options(source)
    confidence, reason = _confidence(a)
    rest = held_back(a, source, said=reason)
    details = [
        *figure(a, said=label == LABEL_MEASURED),
        *extra,
        *([Detail("also holding the confidence back", "; ".join(rest))] if rest and a.confidence else []),
        Detail("engine", identity(a, source)),
    ]
    return Opening(headline, figure_said, confidence, action, side_actions(a, source), label, why, tuple(details))


def when(a: Analysis, t: np.datetime64 | pd.Timestamp | None) -> str | None:
    """A time to the second in the source's clock (diagnostics.said.stamp)."""
    return stamp(t, a.source_kind)


def names_top_suspect(a: Analysis) -> bool:
    """Whether a page names a top suspect beside the verdict: only beside engine age. Under any
    other verdict the figures that track a slowdown are evidence below, not a cause."""
    return a.verdict == Verdict.AGE and bool(a.suspects)


def lists_suspects(a: Analysis) -> bool:
    """Whether a page lists suspects: only beside a slowdown the verdict found (engine age), or one
    it measured but could not pin on a cause. On a run where nothing slowed, a figure that tracks
    the residual tracks noise or load, not a slowdown."""
    if a.verdict == Verdict.AGE:
        return True
    d = decisive(a)
    return a.verdict == Verdict.INSUFFICIENT and d is not None and d.clears


class FaultSet(NamedTuple):
    """A fault an onset's trigger names, set before the onset: how long before, and whether with
    the engine's start."""

    name: str  # `the output-buffer fault`
    before_s: float
    with_start: bool


def fault_set(a: Analysis) -> FaultSet | None:
    """Where an onset's trigger is a fault set before the onset: when. None where it is no fault,
    or was switched on at the onset itself. A fault the soak sets at the engine's start may act
    only later (after so many requests): its event is the start's, not the onset's."""
    if a.onset is None or a.onset.trigger is None or a.onset.trigger.kind != "fault_on":
        return None
    tr = a.onset.trigger
    gap = (pd.Timestamp(a.onset.t) - pd.Timestamp(tr.t)).total_seconds()
    if gap < 1:
        return None
    fault = tr.detail.split("fault=", 1)[-1].split(",")[0].strip() if tr.detail else ""
    name = f"the {fault} fault" if fault else "a fault"
    return FaultSet(name, gap, a.onset.engine_age_s - gap <= FROM_START_S)


def _age(a: Analysis, path: str, source: Source | None) -> tuple[str, str | None, str, str]:
    s = a.slowdown
    if a.age_basis == Basis.PREFILL and s is not None:
        figure_said = f"prompt processing {change(s.ratio)} than early, at the same prompt sizes" + _slowdown_span(a)
    elif a.age_basis == Basis.PREFIX_REUSE and a.prefix_reuse is not None:
        r = a.prefix_reuse
        figure_said = (
            f"its prompt cache stopped reusing: an agent's next turn took {r.late_share:.0%} of its prompt from "
            f"the cache, against {r.healthy_share:.0%} early{_slowdown_ratio(a)}"
        )
    else:
        c = decisive(a)
        figure_said = size(c) if c is not None else "decode speed fell with engine age"
    if a.confidence == Confidence.LOW:  # too little to file on: make sure first
        act = f"Confirm it with a soak before filing a bug: `{rerun.soak_command(source, '--until-decided')}`."
    elif a.recovered_by_restart is True:
        act = f"Restart it to get the speed back, and file a bug with `diag bundle {path}`."
    elif a.recovered_by_restart is False:
        act = f"A restart will not help; file a bug with `diag bundle {path}`."
    else:
        act = f"Restart it to see whether the speed comes back, and file a bug with `diag bundle {path}`."
    return HEADLINES[Verdict.AGE], figure_said, act, _age_why(a)


def _age_why(a: Analysis) -> str:
    """When it began, right after what, whether a restart brought the speed back, the top suspect."""
    age = duration(a.onset.engine_age_s) if a.onset is not None else ""
    # The engine's age in a first-time reader's words: since it started, or, where the log's clock
    # leaves idle time out, its time at work.
    after = f"once the engine had been busy for {age}" if a.clock == "busy" else f"{age} after the engine started"
    gradual = a.slowdown is not None and a.slowdown.shape == "gradual"
    if a.onset is None:
        began = "It showed late in the run"
    elif gradual:
        began = f"It crept down gradually and stood out {after}"
    else:
        began = f"It began {after}"
    out = f"{began}{_trigger(a)}; {_restart(a)}."
    if a.age_basis in (Basis.PREFILL, Basis.PREFIX_REUSE):
        out += " Decode speed itself held."
    if names_top_suspect(a):
        out += f" Top suspect: {suspects_mod.in_a_clause(a.suspects[0])}."
    return out


def _trigger(a: Analysis) -> str:
    """`, right after a 2,973-token prompt`: what came just before the onset, briefly."""
    if a.onset is None or a.onset.trigger is None:
        return ""
    tr = a.onset.trigger
    if tr.kind in ("prefill_append", "prefill") and tr.new_tokens is not None:
        if tr.cached_tokens:
            return f", right after {tr.new_tokens:,} new tokens were added to a {tr.cached_tokens:,}-token prompt in its cache"
        return f", right after a {tr.new_tokens:,}-token prompt"
    if tr.kind == "fault_on":
        f = fault_set(a)
        if f is None:
            fault = tr.detail.split("fault=", 1)[-1].split(",")[0].strip() if tr.detail else ""
            return f", when the {fault} fault was switched on" if fault else ", when a fault was switched on"
        return f"; {f.name} had been set {'in the engine from its start' if f.with_start else 'before it'}"
    return f", right after a {tr.kind.replace('_', ' ')}"


def _restart(a: Analysis) -> str:
    """Whether a restart brought the speed back: said of the speed, never `it` (a reader took `a
    restart brought it back` for the slowdown coming back)."""
    if a.recovered_by_restart is True:
        return "a restart brought the speed back"
    if a.recovered_by_restart is False:
        return "a restart did not bring the speed back"
    if any(c.basis == Basis.RESTART for c in a.comparisons):
        return "a restart did not settle whether the speed comes back"
    if len(a.lives) > 1:
        return "the restart in the data could not be compared"
    return "the data hold no restart to show whether one brings the speed back"


def _no_age(a: Analysis, source: Source | None, log: bool) -> tuple[str, str | None, str, str]:
    c = decisive(a)
    context = a.verdict == Verdict.CONTEXT_ONLY
    host = a.cause == Cause.HOST_DRIFT
    grew = " Decode speed fell as the conversations grew longer, which their length explains." if context else ""
    shared = " A fresh engine beside it slowed as much: the host or the load changed." if host else ""
    if c is None or not c.interval.bounded:
        return (
            HEADLINES[a.verdict],
            None,
            _log_next(source) if log else _run_longer(a, source),
            ("No two stretches at the same conditions had enough measurements to put a figure on engine age." + grew),
        )
    lo, est, hi = c.interval.lo, c.ratio, c.interval.hi
    material = c.material if c.unit == "tok/s" else DECODE_MATERIAL
    how = _cap(measure(c) or c.basis.replace("_", " ")) + "." + grew + shared
    if lo > material:  # decided: no material loss
        if est >= 1.0:
            plain = HEADLINES[a.verdict] if lo >= NO_SLOWER else NO_LOSS_MEASURED
        else:
            plain = NO_LOSS_MEASURED if hi >= 1.0 else BELOW_MATERIAL
        if context and plain != HEADLINES[a.verdict]:
            plain = "Slower as the context grew; " + plain[:1].lower() + plain[1:]
        return HOST_DRIFT if host else plain, size(c), _nothing_to_do(a, source, log), how
    plain = CONTEXT_NOT_SHOWN if context else NOT_SHOWN
    return HOST_DRIFT if host else plain, size(c), _log_next(source) if log else _run_longer(a, source), how


def _nothing_to_do(a: Analysis, source: Source | None, log: bool) -> str:
    """A decided no: nothing to restart or file for age (a side problem has its own line); a short
    run says that hours need hours."""
    nothing = "Nothing to restart or file" + (" for engine age" if side_actions(a, source) else "")
    if not log and rerun.is_short(source):
        return (
            f"{nothing}. This run lasted {duration(rerun.run_seconds(source))}; a slowdown that builds over hours "
            f"needs a soak of hours: `{rerun.soak_command(source, rerun.LONG_SOAK)}`."
        )
    return f"{nothing}; a longer soak would catch a slower drift."


def _undecided(a: Analysis, source: Source | None, log: bool) -> tuple[str, str | None, str, str]:
    failed = [c for c in a.checks if c.status == CheckStatus.FAIL]
    names = [c.name for c in failed]
    comps = {c.basis: c for c in a.comparisons}
    d = decisive(a)
    figure_said = size(d) if d is not None and d.interval.bounded else None
    longer = _run_longer(a, source) if not log else _log_next(source)
    headline = HEADLINES[Verdict.INSUFFICIENT]
    if "control_youth" in names:
        p = comps.get(Basis.PAIRED_CONTROL, d)
        return (
            headline,
            size(p) if p is not None and p.interval.bounded else None,
            "Restart the fresh engine beside it more often, and measure both before the traffic starts: "
            f"`{rerun.soak_command(source, '--control-restart-after 8', '--baseline 8', '--until-decided')}`.",
            "The fresh engine run beside it as a yardstick slowed with its own age, so it measures nothing.",
        )
    if "ratio_sanity" in names:
        return (
            headline,
            "no figure here measures the engine",
            f"Soak it with identical test requests: `{rerun.soak_command(source, '--until-decided')}`.",
            "Measurements of different work were compared, so no figure here is of the engine.",
        )
    if "restart_slower" in names and Basis.RESTART in comps:
        return (
            headline,
            size(comps[Basis.RESTART]),
            f"Soak again, measuring the engine before the traffic starts{_lasted(source)}: "
            f"`{rerun.soak_command(source, '--baseline 8', '--until-decided')}`.",
            _restart_not_age(a, next(c for c in failed if c.name == "restart_slower")),
        )
    if "paired_slower" in names or "decode_agreement" in names:
        p = comps.get(Basis.PAIRED_CONTROL, d)
        if p is not None:
            why = (
                "Beside a fresh engine it ran slower, though against itself earlier it did not; the fresh engine is "
                "the one to trust, as it cancels a change of the host, but the loss beside it is not settled yet."
                if "decode_agreement" in names
                else f"It ran slower beside a fresh engine, but whether by the {1 - p.material:.0%} tokdrift calls "
                "engine age is not settled."
            )
            return headline, size(p) if p.interval.bounded else None, longer, why + _host_moved(a)
    if "prefill_drift" in names:
        return (
            headline,
            figure_said,
            longer,
            "Prompts took longer to process, but the host's own speed moved too much to tell the host from the engine.",
        )
    if "data_span" in names:
        said = next((c.detail for c in failed if c.name == "data_span"), "")
        seconds = said.split(" cover ", 1)[-1].split(" of engine time", 1)[0] if " cover " in said else "too little"
        return (
            headline,
            figure_said,
            longer,
            f"The usable measurements of decode speed cover {seconds} of the engine's time, too short to rule engine "
            "age out.",
        )
    if "confidence" in names and figure_said is not None:
        detail = next(c.detail for c in failed if c.name == "confidence")
        if detail.startswith("a loss without a cause"):
            why = f"With no fresh engine to compare with{_why_no_fresh(a)}, a longer context and engine age look alike."
        else:
            why = f"Too few or too noisy measurements to tell a {1 - DECODE_MATERIAL:.0%} loss from none."
        return headline, figure_said, longer, why + _settle(a)
    if "data" in names or d is None:
        return (
            headline,
            None,
            longer,
            "No two stretches at the same conditions have enough measurements of decode speed.",
        )
    return headline, figure_said, longer, "The data cannot yet say whether that is engine age." + _settle(a)


def _restart_not_age(a: Analysis, check: Check) -> str:
    """A restart made it faster, but within the run the measure the verdict weighed did not show
    the loss: said in that measure's terms, and what would settle it."""
    within = next(
        (
            c
            for c in a.comparisons
            if c.basis in WITHIN and c.interval.bounded and f"({c.interval.describe()})" in check.detail
        ),
        None,
    )
    if within is None:
        out = "A restart made it faster, but the measures within the run did not show the loss"
    else:
        out = f"Within the run, {WITHIN[within.basis]} did not show a loss for certain ({amount(within.interval)})"
    out += ": it was already slow at the start of the run, or the host changed at the restart."
    return out + _settle(a, "a soak that measures the engine before its traffic (the command above) settles it")


def _settle(a: Analysis, how: str = "the command above would settle whether that is engine age") -> str:
    """Where a listed suspect moved a lot under an undecided verdict, that it did and what would
    settle it; else what settles it alone, where `how` is given."""
    top = a.suspects[0] if a.suspects and lists_suspects(a) else None
    m = suspects_mod.moved(top) if top is not None else None
    moved = suspects_mod.plainly(top) if top is not None and m is not None and m.factor >= MOVED_A_LOT else None
    if moved is not None:
        return f" {_cap(moved)}; {how}."
    return f" {_cap(how)}." if how.startswith("a soak") else ""


def _confidence(a: Analysis) -> tuple[str | None, str | None]:
    """`Medium confidence, because ...`: how sure, and the one thing that keeps it from surer: the
    check that capped it (diagnostics.caps), else its interval (diagnostics.verdict); and that reason."""
    if a.confidence is None:
        return None, None
    said = _cap(str(a.confidence)) + " confidence"
    if a.confidence == "high":
        return f"{said}.", None
    capped = cap_checks(a)
    if capped:
        reason = cap_reason(a, capped[0])
        return f"{said}, because {reason}.", reason
    i = _interval(a)
    if i is None or not i.bounded:
        return f"{said}.", None
    if a.verdict == Verdict.AGE:
        reason = f"the loss could be as small as {max(0.0, 1 - i.hi):.0%}"
    else:
        reason = f"a loss of up to {max(0.0, 1 - i.lo):.0%} is not ruled out"
    return f"{said}, because {reason}.", reason


def _interval(a: Analysis) -> Interval | None:
    d = decisive(a)
    if d is not None:
        return d.interval
    s = a.slowdown
    return Interval(s.ratio, s.lo, s.hi, s.level) if s is not None and s.lo is not None and s.hi is not None else None


def _slowdown_span(a: Analysis) -> str:
    i = _interval(a)
    return f" ({amount(i)})" if i is not None and i.bounded else ""


def _slowdown_ratio(a: Analysis) -> str:
    i = _interval(a)
    return f" ({i.describe()} of early)" if i is not None and i.bounded else ""


def _host_moved(a: Analysis) -> str:
    """The fresh control's own change over the run, where it moved more than 10 %: the host was not steady."""
    drift = next((c for c in a.comparisons if c.basis == Basis.CONTROL_DRIFT), None)
    if drift is None or abs(drift.ratio - 1) < 0.1:
        return ""
    return f" The fresh engine's own speed changed {drift.ratio - 1:+.0%} meanwhile: the host was not steady."


def _run_longer(a: Analysis, source: Source | None) -> str:
    quieter = any(c.name in ("host_contention", "control_drift") and c.status == CheckStatus.WARN for c in a.checks)
    where = " on a quieter host" if quieter else ""
    return f"Run longer{where}{_lasted(source)}: `{rerun.soak_command(source, '--until-decided')}`."


def _lasted(source: Source | None) -> str:
    """` (this run lasted 2.6 min)` where the run was short, for a next step that asks for a longer one."""
    return f" (this run lasted {duration(rerun.run_seconds(source))})" if rerun.is_short(source) else ""


def _log_next(source: Source | None) -> str:
    """A log's next step: a soak with probes, which can tell, or where the log lacks a figure an
    engine option prints, that option (what each gives is in the details)."""
    soak = f"Soak it with test requests: `{rerun.soak_command(source, '--until-decided')}`"
    switched = _switched(source)
    if not switched:
        return soak + "."
    return f"{soak}; or, for a log that can tell, restart {switched[0].engine} with {switched[0].switch}."


def _log_options(source: Source | None) -> list[Detail]:
    """The engine options that print what a log lacks, for a log that could then tell."""
    options = [m.option for m in _switched(source)]
    return [Detail("so that its log can tell", f"restart it with {' '.join(options)}")] if options else []


def _switched(source: Source | None) -> list[Missing]:
    """The figures a log lacks that an engine option turns on (logformats.figures)."""
    info = getattr(source, "log_info", None)
    return [m for m in info.missing if m.switch] if info is not None else []


def _why_no_fresh(a: Analysis) -> str:
    """Why a source holds no fresh engine to compare with: its restarts ran another engine, or it has none."""
    if any(c.name == "engine_identity" and c.status == CheckStatus.WARN for c in a.checks):
        return " (its restarts ran another engine)"
    return " (no restart in the data, no control beside it)" if len(a.lives) <= 1 else ""


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]
