"""The first three lines a reader reads, then a details break.

Every page opens with them (the summary, the report's verdict box, `diag analyze` on the
terminal), for an operator deciding whether to restart and an engine developer reading a bug,
each giving it half a minute:

1. **the answer** in one of three words with how sure in the parentheses after it, what it stands
   on, then **one change** in percent with its direction (`Aged (medium confidence), from a 2.7-min
   soak of the built-in engine: decode is 28% slower late than early, against a fresh copy run
   alongside (90% interval 18-37% slower)`), and what the confidence rests on (`Medium, not high: only 6 early measurements
   were there to compare with`): diagnostics.words.line_one.
2. **what to do now**, with the fact that makes it worth doing (`Restart it: in this run a restart
   brought the speed back`; a KV cache that ran out of room, first, whatever the verdict) and a command complete
   where the run knows its values (diagnostics.words.rerun); a line of its own for each further problem.
3. **why**: when it began, right after what, whether a restart brought the speed back and the
   top suspect (engine age); how it was measured (no age); or why it cannot tell, with the sizes
   that would settle it (diagnostics.words.undecided).

Everything else (the other, less direct measures, what else held the confidence back, why an
interval is wider, the engine and host) goes below the break (diagnostics.words.details). Above it, every
term is one a first-time reader knows: decode speed, the engine and a fresh one, test requests (not
probes), early and late, the host; the engine's own figures only as a suspect's name, with what it
is. Times to the second, in the source's own clock.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.evidence import suspects as suspects_mod
from diagnostics.evidence.comparison import Comparison
from diagnostics.labels import Basis, Cause, Confidence, Verdict
from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words import line_one, rerun
from diagnostics.words.details import (
    Detail,
    decisive,
    figure,
    held_back,
    host_moved,
    identity,
    lists_suspects,
    measure,
    names_top_suspect,
    others,
)
from diagnostics.words.grounds import grounds
from diagnostics.words.next_steps import log_next, log_options, restart_gain, run_longer
from diagnostics.words.said import NO_CHANGE, capitalized, duration, stamp
from diagnostics.words.side_actions import side_actions
from diagnostics.words.undecided import undecided

__all__ = ["FaultSet", "Opening", "fault_set", "lists_suspects", "names_top_suspect", "opening", "when"]

FROM_START_S = 5.0  # a fault set this close to the engine's start was set with it
LABEL_NEXT = "Next"
LABEL_ALSO = "Also"
LABEL_WHY = "Why"
LABEL_MEASURED = "How measured"
OTHERS = "other measures (less direct)"


class Opening(NamedTuple):
    headline: str  # the answer in one fixed word, how sure in parentheses: `Aged (medium confidence)`
    grounds: str | None  # what it stands on: `from a 16.7-min soak of vLLM 0.27.1` (diagnostics.words.grounds)
    size: str | None  # the one ratio, with its interval: `decode speed is 0.72x a fresh engine's ...`
    confidence: str | None  # `Medium, not high: ...`: what the confidence rests on; None where it says nothing
    action: str  # line two: what to do now, with a complete command
    also: tuple[str, ...]  # a line each, action first, for a further problem or step
    why_label: str  # Why, or How measured
    why: str  # line three
    details: tuple[Detail, ...]  # below the break
    answer: str = ""  # the word alone (line_one.Answer), for a page that colours it

    @property
    def tone(self) -> str:
        """`aged`, `not-aged`, `cant-tell`: the word as a page's style class, so that a box's colour
        says what its word says (an age at low confidence is can't tell, whatever its verdict)."""
        return self.answer.lower().replace("'", "").replace(" ", "-")

    @property
    def verdict_line(self) -> str:
        """Line one: the answer, how sure, what it stands on, the figure and what the confidence rests on."""
        return self.headline + self.after_headline

    @property
    def after_headline(self) -> str:
        """Line one after its word, for a page that sets the word apart: `, from a 16.7-min soak of
        vLLM 0.27.1: decode speed is 0.68x ... Medium, not high: ...`."""
        said = f", {self.grounds}" if self.grounds else ""
        said += f": {self.size}." if self.size else "."
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
    if a.verdict == Verdict.AGE:
        figure_said, action, why, label = line_one.figure(a), _age_next(a, path, source), _age_why(a), LABEL_WHY
    elif a.verdict == Verdict.INSUFFICIENT:
        figure_said, action, why = undecided(a, source, log)
        label = LABEL_WHY
    else:
        figure_said, action, why = line_one.figure(a), *_no_age(a, source, log)
        label = LABEL_MEASURED
    also = side_actions(a, source)
    if also and a.verdict != Verdict.AGE:  # a problem of today leads where age asks nothing of the reader
        action, also = also[0], (*also[1:], action)
    confidence, reason = line_one.confidence(a, rerun.run_seconds(source) if not log else None)
    rest = held_back(a, source, said=reason)
    other = others(a)
    details = [
        *figure(a, said=label == LABEL_MEASURED),
        *(log_options(source) if log else []),
        *([Detail("also holding the confidence back", "; ".join(rest))] if rest and a.confidence else []),
        Detail("engine", identity(a, source)),
        *([Detail(OTHERS, other)] if other else []),
    ]
    return Opening(
        line_one.headline(a),
        grounds(a, source),
        figure_said,
        confidence,
        action,
        also,
        label,
        why,
        tuple(details),
        str(line_one.answer(a)),
    )


def when(a: Analysis, t: np.datetime64 | pd.Timestamp | None) -> str | None:
    """A time to the second in the source's clock (diagnostics.words.said.stamp)."""
    return stamp(t, a.source_kind)


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


def _age_next(a: Analysis, path: str, source: Source | None) -> str:
    """Restart and file, with what a restart did to the speed; too little to file on: make sure first."""
    if a.confidence == Confidence.LOW:
        # Whether to restart now, too (two readers of the thirteenth version asked, beside a 90% loss).
        return (
            "Restart it if it is slow now; confirm it is engine age with a soak before filing a bug: "
            f"`{rerun.soak_command(source, '--until-decided')}`."
        )
    bundle = f"file a bug with `diag bundle {path}`"
    gain = restart_gain(a)
    if a.recovered_by_restart is True:
        return (
            f"Restart it: in this run {gain}; then {bundle}."
            if gain
            else f"Restart it to get the speed back, and {bundle}."
        )
    if a.recovered_by_restart is False:
        return f"A restart will not help; {bundle}."
    return f"Restart it to see whether the speed comes back, and {bundle}."


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
    # Where line two said what a restart did, line three does not say it again.
    said = a.recovered_by_restart is True and a.confidence != Confidence.LOW and restart_gain(a) is not None
    out = f"{began}{_trigger(a)}{_like_contexts(a)}{'' if said else '; ' + _restart(a)}.{_host_moved(a)}"
    if a.age_basis in (Basis.PREFILL, Basis.PREFIX_REUSE):
        out += " Decode speed itself held."
    if names_top_suspect(a):
        out += f" Top suspect: {suspects_mod.in_a_clause(a.suspects[0])}."
    return out


def _host_moved(a: Analysis) -> str:
    """` Meanwhile the host got faster: the fresh copy went from 48.2 to 64.5 tok/s, this engine from
    40.0 to 36.6; comparing the two at the same moments cancels the host.`: where the figure is the
    pairs, the host moved by a tenth or more and the engine's own test requests do not show the loss
    by themselves, how the two engines' own speeds went (a reader took such a verdict for resting on
    the fresh engine getting faster, which is what the pairs take out)."""
    d = decisive(a)
    drift = host_moved(a)
    own = next((c for c in a.comparisons if c.basis == Basis.PROBES and c.interval.bounded), None)
    if d is None or d.basis != Basis.PAIRED_CONTROL or drift is None:
        return ""
    if own is None or own.interval.hi < own.material:  # its own test requests show the loss by themselves
        return ""
    went = "got faster" if drift.ratio > 1 else "got slower"
    # The two engines' own speeds, where both were measured (three readers of the twelfth and thirteenth
    # versions looked for them under Details to believe the figure).
    if drift.levels is not None and own.levels is not None:
        (f0, f1), (e0, e1) = drift.levels, own.levels
        # To a tenth, as the table's paired row says them.
        both = f"the fresh copy went from {f0:.1f} to {f1:.1f} tok/s, this engine from {e0:.1f} to {e1:.1f}"
    elif drift.ratio > 1:
        both = "the fresh copy sped up while this engine slowed" if own.ratio < 1 else "the fresh copy sped up more"
    else:
        both = "the fresh copy slowed, and this engine more" if own.ratio < drift.ratio else "both slowed"
    return f" Meanwhile the host {went}: {both}; comparing the two at the same moments cancels the host."


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


def _like_contexts(a: Analysis) -> str:
    """`, yet the figure allows for the context length, so the longer prompt alone does not explain it`:
    where the slowdown began right after a prompt and the figure is the engine at the same batch size
    and context length (a thirteenth reader, given `right after 5,792 new tokens were added to a
    121,712-token prompt`, took the slowdown for the long context's)."""
    # The bins compare like batch and context; the step series decides age only where context cannot
    # explain what it shows (diagnostics.decision.verdict, rule 1).
    d = decisive(a)
    tr = a.onset.trigger if a.onset is not None else None
    if d is None or d.basis not in (Basis.BINS, Basis.STEP_SERIES) or tr is None:
        return ""
    if tr.kind not in ("prefill_append", "prefill") or tr.new_tokens is None:
        return ""
    return ", yet the figure allows for the context length, so the longer prompt alone does not explain it"


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


def _no_age(a: Analysis, source: Source | None, log: bool) -> tuple[str, str]:
    """Line two and how it was measured: nothing to do for age where a material loss is ruled out,
    else the soak that would settle it."""
    c = decisive(a)
    # Raw speed, not the figure: a sixth reader read `decode speed fell` against measures at the
    # same context length that rose, and three of the sixteenth version `Raw decode speed fell` beside
    # line one's `34% faster late than early`: said as the raw measure, and left out beside a figure
    # whose whole interval is a gain (four readers of the nineteenth and twentieth versions still read
    # it as contradicting line one there).
    grew = (
        " Raw decode speed, unmatched, fell as the conversations grew longer, which a longer context does to any "
        "engine; the figure above leaves that out."
        if a.verdict == Verdict.CONTEXT_ONLY and not (c is not None and c.interval.bounded and c.interval.lo >= 1)
        else ""
    )
    shared = (
        " A fresh copy run alongside slowed as much: the host or the load changed."
        if a.cause == Cause.HOST_DRIFT
        else ""
    )
    if c is None or not c.interval.bounded:
        return (
            log_next(source) if log else run_longer(a, source),
            "No two stretches at the same conditions had enough measurements to put a figure on engine age." + grew,
        )
    how = capitalized(measure(c) or c.basis.replace("_", " ")) + "." + _gained(c) + grew + shared
    if line_one.answer(a) == line_one.Answer.NOT_AGED:
        return _nothing_to_do(a, source, log), how
    return log_next(source) if log else run_longer(a, source), how


def _gained(c: Comparison) -> str:
    """` It ran faster late in the run than early.`: where the engine gained speed for certain, which
    way the comparison went (a reader took `Not aged` beside a restart that left the engine slower for
    a contradiction; a restart's is said in line one, diagnostics.words.line_one._slow_at_start)."""
    if not c.interval.bounded or c.interval.lo <= 1 + NO_CHANGE:
        return ""
    if c.basis == Basis.RESTART:
        # Said as the oddity it is in line one itself (diagnostics.words.line_one._slow_at_start).
        return ""
    if c.basis == Basis.PAIRED_CONTROL:
        return " It ran faster than a fresh copy run alongside."
    return " It ran faster late in the run than early."


def _nothing_to_do(a: Analysis, source: Source | None, log: bool) -> str:
    """A decided no: nothing to restart or file for age (a side problem has its own line); a short
    run says that hours need hours."""
    nothing = "Nothing to restart or file" + (" for engine age" if side_actions(a, source) else "")
    if not log and rerun.is_short(source):
        return (
            f"{nothing}. This run lasted {duration(rerun.run_seconds(source))}; a slowdown that builds over hours "
            f"needs a soak of hours: `{rerun.soak_command(source, rerun.LONG_SOAK)}`."
        )
    if log:
        return f"{nothing}; to watch for a slower drift, soak it for hours: `{rerun.soak_command(source, rerun.LONG_SOAK)}`."
    return f"{nothing}; a longer soak would catch a slower drift."
