"""How a figure is said to a reader: one change in percent, in one form, its interval, a time.

Every ratio diag computes is the soaked engine's speed over the reference's, below 1 slower. Above
the break it is said one way every time, whatever the reference, in percent with its direction in
words and the reference after it: `decode is 28% slower late than early, against a fresh copy run
alongside (90% interval 18-37% slower)`, `decode was 52% slower than the same engine freshly restarted by the soak`,
`decode is 79% slower late in the run than early, at the same batch size and context length`. Two
readers in turn (the sixth and the seventh) asked for that one form: a ratio (`0.68x`) beside a gain
said otherwise (`1.5x faster`) left them converting one into the other. The subject is always the
engine as it was served, the reference always the fresher one (three readers of the twelfth version
had to turn `7% faster just before the soak restarted it than just after` round in their heads). The ratios themselves stay in
the tables below the break. Speed in tok/s only where two measured speeds stand for the figure (a
comparison's `levels`: identical probes of one engine, early and late, which its row in the table
below says too); a speed the figure only implies (a fresh engine's level times a ratio of ratios) is
never said as if measured.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.intervals import Interval, level_text
from diagnostics.labels import Basis

NO_CHANGE = 0.005  # a ratio this close to 1 rounds to 0 %: said as no slower
AS_FAST = 2.0  # from here up a gain is said as "N times as fast", not "+250%"
# Whose speed a ratio is over, by the comparison it comes from: (after "at 0.83 of", after "slower than").
# Two engines (the soaked engine, a fresh one) and two times (early, late), nothing else.
REFERENCE = {
    Basis.PAIRED_CONTROL: ("a fresh engine's speed", "a fresh engine beside it"),
    Basis.RESTART: ("its own speed just after a restart", "just after a restart"),  # said in time order (size)
    Basis.PROBES: ("its own early speed on an identical request", "early in the run, on identical test requests"),
    Basis.BINS: (
        "its early speed at the same batch and context",
        "early in the run, at the same batch size and context length",
    ),
    Basis.STEP_SERIES: (
        "its early speed at the same batch and context",
        "early in the run, at the same batch size and context length",
    ),
    Basis.COMBINED: ("its early speed, all measures together", "early in the run, all measures together"),
}
# `decode <verb> <change> <reference>`, by the comparison a ratio comes from: (the verb, the reference).
AGAINST = {
    # Late over early, both against the fresh copy (a ratio of ratios): not the gap between the two
    # engines' speeds now, which a reader of the eighteenth version worked out from the tok/s.
    "paired_control": ("is", "late than early, against a fresh copy run alongside"),
    "restart": ("was", "than the same engine freshly restarted"),
    "probes": ("is", "late in the run than early, on identical test requests"),
    "bins": ("is", "late in the run than early, at the same batch size and context length"),
    "step_series": ("is", "late in the run than early, at the same batch size and context length"),
    "combined": ("is", "late in the run than early, all measures together"),
}
SOAK_RESTART = "than the same engine freshly restarted by the soak"  # a soak's restart is its own
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?")


def span(i: Interval) -> str:
    """`90% interval 73-84% slower`, `90% interval 4% slower to 19% faster`: an interval of a
    ratio in percent, each end's direction in words."""
    if not i.bounded:
        return "too few samples for an interval"
    level = f"{level_text(i.level)} interval"
    if i.hi < 1 + NO_CHANGE:
        return f"{level} {_percent(1 - i.hi, unit=False)}-{_percent(1 - i.lo)} slower"
    if i.lo > 1 - NO_CHANGE:
        return f"{level} {_percent(i.lo - 1, unit=False)}-{_percent(i.hi - 1)} faster"
    return f"{level} {_percent(1 - i.lo)} slower to {_percent(i.hi - 1)} faster"


def size(c: Comparison, aside: str = "", restart: str | None = None, note: str = "", bare: bool = False) -> str:
    """The figure as line one says it, one way whatever the reference: `decode is 28% slower late than
    early, against a fresh copy run alongside (90% interval 18-37% slower)`; in the parentheses, before
    the interval, the two measured speeds where they stand for it (`(218 against 138 tok/s; ...)`) and
    `aside`, after it `note`. `restart`, where given, says which restart (`than the same engine freshly
    restarted by the soak`). `bare` leaves out `decode <verb>`, for a figure said after another."""
    verb, against = AGAINST.get(c.basis, ("is", "late in the run than early"))
    against = restart if restart is not None and c.basis == "restart" else against
    before = ", ".join(x for x in (_measured(c), aside) if x)
    inside = f"{before}; {span(c.interval)}" if before else span(c.interval)
    said = f"{percent_change(c.ratio)} {against} ({inside}{note})"
    return said if bare else f"decode {verb} {said}"


def percent_change(ratio: float) -> str:
    """`28% slower`, `67% faster`, `130% faster`, `no faster or slower`: a ratio in percent, its
    direction in words, never a multiple (line one's one form)."""
    if abs(ratio - 1) < NO_CHANGE:
        return "no faster or slower"
    return f"{_percent(1 - ratio)} slower" if ratio < 1 else f"{_percent(ratio - 1)} faster"


def moved_by(ratio: float, down: str = "fell", up: str = "rose") -> str:
    """`fell by 17%`, `rose by 20%`: how a speed moved, as a ratio of its later to its earlier self."""
    return f"{down if ratio < 1 else up} by {abs(1 - ratio):.0%}"


def capitalized(text: str) -> str:
    """A clause as the start of a sentence: its first letter upper case, the rest as it is."""
    return text[:1].upper() + text[1:]


def times_x(ratio: float) -> str:
    """`0.72x`: a ratio as line one says it, below 1 slower."""
    return f"{ratio:.2f}x"


def _measured(c: Comparison) -> str | None:
    """`218 against 138 tok/s`: the two measured speeds a figure is the ratio of, now first."""
    if c.unit != "tok/s" or c.levels is None or not all(np.isfinite(x) and x > 0 for x in c.levels):
        return None
    early, late = c.levels
    return f"{tps(late)} against {tps(early)} tok/s"


def tps(x: float) -> str:
    """A speed as a reader reads it: 153, 4.7."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}"


def ratio_words(c: Comparison, aside: str = "") -> str:
    """`0.83 of a fresh engine's speed (90% interval 0.68-1.00)`: the ratio as the evidence says
    it, the soaked engine's over the reference's; `aside` goes inside the parentheses."""
    of, _ = REFERENCE.get(c.basis, ("its early speed", "early in the run"))
    i = c.interval
    said = i.span() if i.bounded else "too few samples for an interval"
    return f"{c.ratio:.2f} of {of} ({said}{aside})"


def ratio_change(ratio: float) -> str:
    """`1.58x (58% faster)`, `0.50x (50% slower)`: a measure in the details, in line one's form."""
    if abs(ratio - 1) < NO_CHANGE:
        return f"{times_x(ratio)} (unchanged)"
    word = _faster(ratio) if ratio > 1 else f"{_percent(1 - ratio)} slower"
    return f"{times_x(ratio)} ({word})"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "an unknown time"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def stamp(t: np.datetime64 | pd.Timestamp | None, source_kind: str) -> str | None:
    """A time to the second in the source's clock: `2026-12-02 14:16:05 UTC` for a run directory
    or a scrape series (Unix time), the log's own clock without a zone for a log."""
    if t is None or pd.isna(t):
        return None
    text = pd.Timestamp(t).floor("s").strftime("%Y-%m-%d %H:%M:%S")
    return text if source_kind == "log" else f"{text} UTC"


def between(first: str | None, last: str | None) -> str:
    """`2026-12-02 17:05:33 to 17:20:07 UTC`: two stamps of one day with the day and zone once."""
    if first is None or last is None:
        return first or last or ""
    day, rest = first.split(" ", 1)
    if last.startswith(day + " "):
        clock = rest.removesuffix(" UTC")
        return f"{day} {clock} to {last[len(day) + 1 :]}"
    return f"{first} to {last}"


def to_the_second(text: str) -> str:
    """ISO times in a text (a check's detail) to the second: `2026-12-02 17:05:33`, not
    `2026-12-02T17:05:33.223594189`."""
    return _ISO.sub(r"\1 \2", text)


def times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n:,} times")


def _percent(x: float, unit: bool = True) -> str:
    """A share as a whole percentage, never below 0 (an interval end at 1.00 is `0%`); `unit`
    False leaves out the sign, for the first end of a range (`73-84%`)."""
    return f"{max(0.0, x):.0%}" if unit else f"{max(0.0, x) * 100:.0f}"


def _faster(ratio: float) -> str:
    """`19% faster`, or `3.4 times as fast` from AS_FAST up."""
    return f"{_percent(ratio - 1)} faster" if ratio < AS_FAST else f"{ratio:.1f} times as fast"
