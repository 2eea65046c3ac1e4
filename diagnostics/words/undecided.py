"""Line two and three of a verdict that cannot tell: what to do now, and why it is not sure, with
the sizes that would settle it.

A fourth reader found two can't-tell reports that read the same at the top while one held an
engine figure that rose 1 KB -> 71 MB: the reason says first what moved a lot, then what the
measures read (`beside a fresh engine it read 0.86x ... over 5 test-request cycles a side`), then
what would settle it; the next step leads with what a restart did, where it did something.
"""

from __future__ import annotations

from typing import NamedTuple

from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.labels import Basis
from diagnostics.result import Analysis, Check
from diagnostics.source.source import Source
from diagnostics.words import rerun
from diagnostics.words.details import HOST_MOVED, MEASURE_NAMES, decisive, grew, host_moved
from diagnostics.words.line_one import figure
from diagnostics.words.next_steps import cycles, lasted, log_next, restart_gain, run_longer
from diagnostics.words.said import NO_CHANGE, capitalized, moved_by, percent_change, span

# How the measure a verdict could not decide on is said, in line three (`within the run, beside a
# fresh engine it read 0.86x`).
WITHIN = {
    "paired_control": "against a fresh copy run alongside it was",
    "probes": "on its own test requests it was",
    "bins": "at the same batch size and context length it was",
    "step_series": "step by step against its early speed it was",
    "combined": "all its measures of decode speed together, it was",
}
# Every one of them compares late with early (the pairs too: the engine over the fresh copy, late over
# early; a reader of the eighteenth version took `12% slower than a fresh copy` for the gap in tok/s).
LATE_EARLY = "late than early"
# The same after "the comparison" (`the comparison beside a fresh copy did not show the loss`): each
# measure's name below the break (details.MEASURE_NAMES), the probes' with the preposition it needs
# there, and the joined one's, which that list has no line for.
WHERE = {
    **{b: MEASURE_NAMES[b] for b in (Basis.PAIRED_CONTROL, Basis.BINS, Basis.STEP_SERIES)},
    Basis.PROBES: f"on {MEASURE_NAMES[Basis.PROBES]}",
    Basis.COMBINED: "all measures together",
}


class Undecided(NamedTuple):
    size: str | None  # line one's figure
    action: str  # line two
    why: str  # line three


def undecided(a: Analysis, source: Source | None, log: bool) -> Undecided:
    """Why the data cannot tell, in terms of the check that failed, and what would settle it."""
    failed = [c for c in a.checks if c.status == "fail"]
    names = [c.name for c in failed]
    comps = {c.basis: c for c in a.comparisons}
    d = decisive(a)
    figure_said = figure(a)
    longer = run_longer(a, source) if not log else log_next(source)
    moved = _moved(a)
    if "control_youth" in names:
        p = comps.get(Basis.PAIRED_CONTROL, d)
        return Undecided(
            figure(a, p) if p is not None else None,
            "Restart the fresh copy run alongside more often, and measure both before the traffic starts: "
            f"`{rerun.soak_command(source, '--control-restart-after 8', '--baseline 8', '--until-decided')}`.",
            "The fresh copy run alongside as a yardstick slowed with its own age, so it measures nothing.",
        )
    if "ratio_sanity" in names:
        return Undecided(
            "no figure here measures the engine",
            f"Soak it with identical test requests: `{rerun.soak_command(source, '--until-decided')}`.",
            "Measurements of different work were compared, so no figure here is of the engine.",
        )
    if "restart_slower" in names and Basis.RESTART in comps:
        # What to do today first, whatever the cause (a sixth reader: "restart it if it is slow now"
        # is no instruction), then what settles the cause.
        r = _reading(a, next(c for c in failed if c.name == "restart_slower"))
        gain = restart_gain(a)
        settle = (
            "To confirm it is engine age before filing a bug"
            if r.grew is not None
            else "To tell whether the cause is engine age"
        )
        now = f"Restart it: in this run {gain}, whatever the cause. {settle}, s" if gain else f"{settle}, s"
        unsteady = r.drift is not None or r.at is not None
        quieter = " on a quieter host" if r.grew is None and unsteady else ""
        return Undecided(
            _restart_against_within(a, r),
            f"{now}oak again{quieter}, measuring the engine before the traffic starts{lasted(source)}: "
            f"`{rerun.soak_command(source, '--baseline 8', '--until-decided')}`.",
            _restart_not_age(r, log),
        )
    if "paired_slower" in names or "decode_agreement" in names:
        p = comps.get(Basis.PAIRED_CONTROL, d)
        if p is not None:
            why = (
                "Beside a fresh copy run alongside it ran slower, though against itself earlier it did not; the fresh "
                "copy is the one to trust, as it cancels a change of the host, but the loss beside it is not settled yet"
                if "decode_agreement" in names
                else f"It ran slower beside a fresh copy run alongside, but whether by the {1 - p.material:.0%} slowdown "
                "tokdrift counts as engine age is not settled"
            )
            # How the host moved is line two's (run_longer), said there once.
            return Undecided(figure(a, p), longer, moved + why + cycles(p) + ".")
    if "prefill_drift" in names:
        return Undecided(
            figure_said,
            longer,
            moved + "Prompts took longer to process, but the host's own speed moved too much to tell the host from "
            "the engine.",
        )
    if "data_span" in names:
        said = next((c.detail for c in failed if c.name == "data_span"), "")
        seconds = said.split(" cover ", 1)[-1].split(" of engine time", 1)[0] if " cover " in said else "too little"
        return Undecided(
            figure_said,
            longer,
            moved + f"The usable measurements of decode speed cover {seconds} of the engine's time, too short to rule "
            "engine age out.",
        )
    if "confidence" in names and figure_said is not None:
        detail = next(c.detail for c in failed if c.name == "confidence")
        if detail.startswith("a loss without a cause"):
            why = (
                f"It ran slower late in the run, but with no fresh engine to compare with{_why_no_fresh(a)}, a slower "
                "host or a heavier load looks the same as engine age."
            )
        else:
            why = f"Too few or too noisy measurements{cycles(d) if d else ''} to tell a {1 - DECODE_MATERIAL:.0%} loss from none."
        return Undecided(figure_said, longer, moved + why)
    if "data" in names or d is None:
        return Undecided(
            None, longer, moved + "No two stretches at the same conditions have enough measurements of decode speed."
        )
    return Undecided(figure_said, longer, moved + "The data cannot yet say whether that is engine age.")


def _within(a: Analysis, check: Check) -> Comparison | None:
    """The measure within the engine's first life that did not show what the restart did: the one
    the failed `restart_slower` check names."""
    return next(
        (
            c
            for c in a.comparisons
            if c.basis in WITHIN and c.interval.bounded and f"({c.interval.describe()})" in check.detail
        ),
        None,
    )


class _Reading(NamedTuple):
    """What a restart the run does not bear out is read beside, gathered once for its three lines."""

    restart: Comparison
    within: Comparison | None  # the measure within the first life that did not show the loss
    grew: str | None  # an engine figure that grew a lot (details.grew)
    at: Comparison | None  # the host's change right at the restart (_host_at_restart)
    drift: Comparison | None  # the host's change over the run (details.host_moved)


def _reading(a: Analysis, check: Check) -> _Reading:
    restart = next(c for c in a.comparisons if c.basis == Basis.RESTART)
    return _Reading(restart, _within(a, check), grew(a), _host_at_restart(a), host_moved(a))


def _restart_against_within(a: Analysis, r: _Reading) -> str | None:
    """Line one of a restart the run does not bear out: the restart's figure, then whether engine age is
    likely and why the measure within the run did not show it, in words (its size is line three's).
    Nine readers over three versions marked these 3 out of 5, asking in turn for the reason in line one
    (the twelfth version), for its size (the thirteenth), for one number there (the fourteenth) and,
    each time, for which way the data lean instead of two hedges; so line one now leans where the data
    do: an engine figure that grew a lot makes age likely."""
    restart = figure(a, r.restart)
    if restart is None:
        return None
    within = r.within
    where = f"the comparison {WHERE[within.basis]}" if within is not None else "the measures within the run"
    # A loss within the run for certain, but not of the size tokdrift calls age, is said as such: "did
    # not show the loss" would be false there.
    loss = (
        f"a loss of {1 - within.material:.0%} or more for certain"
        if within is not None and within.interval.bounded and within.interval.hi < 1
        else "the loss"
    )
    if r.grew is not None:
        return (
            f"{restart}; engine age is likely but not proven: {where} probably began when the engine was already slow"
        )
    # The host that moved, said as a fact beside the figure, leaning no way: which way a host's change
    # at the restart moves the comparison depends on how unevenly it met the two engines, so it makes
    # the restart unreliable, not age unlikely (a reader of the twentieth version saw a host that slowed
    # after the restart argue for age, not against it: "more likely the host" was wrong there).
    said = f"{restart}; engine age is not proven: {where} did not show {loss}"
    if r.at is not None:
        return f"{said}, and the host changed right at the restart (the fresh copy's own speed {moved_by(r.at.ratio)} across it)"
    if r.drift is not None:
        return (
            f"{said}, and the host was not steady (the fresh copy's own speed {moved_by(r.drift.ratio)} during the run)"
        )
    return said


def _restart_not_age(r: _Reading, log: bool) -> str:
    """Why a restart that made the engine faster is not yet engine age: the signs of it first, then
    the measure within the run with its size, then the likelier of what else reads the same."""
    # The signs of age first, then what is missing (a seventh reader, given a figure that grew 1 KB
    # -> 71 MB beside "may have been slow from the start", read the verdict as contradicting itself).
    signs = (
        f"An engine figure grew a lot ({r.grew}) and a restart made it faster: both signs of engine age"
        if r.grew
        else "A restart made it faster, a sign of engine age"
    )
    within = r.within
    if within is None:
        measured = "the measures within this run did not show it slowing"
    else:
        how = f"{percent_change(within.ratio)} {LATE_EARLY}"
        if within.ratio < 1 - NO_CHANGE:
            only = "only " if within.ratio > r.restart.ratio else ""
            # Slower for certain, but not by the size tokdrift calls age, is said as such, not as
            # "not for certain" (an interval wholly below 1).
            sure = (
                f", not by the {1 - within.material:.0%} tokdrift counts as age for certain"
                if within.interval.bounded and within.interval.hi < 1
                else ", not for certain"
            )
            how = f"{only}{how}{sure}"
        measured = f"{WITHIN[within.basis]} {how} ({span(within.interval)})"
    # A thirteenth reader: "slow from the start" reads as contradicted by a fresh engine that was fast;
    # what is meant is a slowdown older than the first measurements, which then measured it already there.
    first = "the log's first measurements" if log else "the soak's first test requests"
    older = f"the slowdown had set in before {first}, so that they measured an engine already slow"
    if r.grew:
        return f"{signs}. {capitalized(measured)}: most likely {older}."
    if r.drift is not None or r.at is not None:
        # The restart's rounds are few: a host that moved can still move the two engines unevenly there
        # (said as how the comparison works, not against it: readers of the sixteenth and seventeenth
        # versions read "may not have cancelled it" as contradicting "so that a change of the host cancels").
        return (
            f"{signs}. But {measured}. Comparing the two engines at the same moments cancels a steady change of "
            "the host, but over a few rounds either side of a restart not every short spell of it."
        )
    return f"{signs}. But {measured}: either {older}, or the host changed right at the restart."


def _host_at_restart(a: Analysis) -> Comparison | None:
    """The fresh copy's own change across the restart (controls.host_at_restart), where it moved by a
    tenth or more: a host that changed right at the restart, which three readers of the eighteenth
    and nineteenth versions asked to be named ("a short host hiccup around the restart")."""
    c = next((c for c in a.comparisons if c.basis == Basis.HOST_AT_RESTART), None)
    r = next((c for c in a.comparisons if c.basis == Basis.RESTART), None)
    if c is None or r is None or not c.interval.bounded or abs(c.ratio - 1) < HOST_MOVED:
        return None
    # A move its interval leaves in doubt is no fact to state; and it says something of the restart
    # figure only where that figure is the same cycles' (the restart control on the pairs: the fresh
    # life's first cycles over the aged life's last), not the log's own steps.
    if c.interval.lo <= 1 <= c.interval.hi or (c.num_early, c.num_late) != (r.num_late, r.num_early):
        return None
    return c


def _moved(a: Analysis) -> str:
    """`An engine figure moved a lot: `output_buffer_bytes` was 1.1 KB where decode slowed least and 71
    MB where it slowed most. `: a listed suspect that moved a lot, said first: what sets two can't-tell
    reports apart."""
    said = grew(a)
    return f"An engine figure moved a lot: {said}. " if said is not None else ""


def _why_no_fresh(a: Analysis) -> str:
    """Why a source holds no fresh engine to compare with: its restarts ran another engine, or it has none."""
    if any(c.name == "engine_identity" and c.status == "warn" for c in a.checks):
        return " (its restarts ran another engine)"
    return " (no restart in the data, no control beside it)" if len(a.lives) <= 1 else ""
