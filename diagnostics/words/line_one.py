"""Line one of every verdict: one fixed word, how sure in the same parentheses, one ratio.

`Aged (medium confidence): decode speed is 0.72x a fresh engine's beside it (28% slower; 90%
interval 0.63-0.82). Medium, not high: its interval reaches 0.82x; high needs it all below 0.81x.`

A fourth reader compared ten reports and found line one said four ways ("N% slower than just
after", "no slower than", a ratio, "15-45% slower"): here the answer is one of five words
(`Answer`), the confidence always in the parentheses after it, the figure always `<speed now> is
<ratio>x <reference>` with its interval in the same direction (diagnostics.words.said.size), and the
sentence after it says what the confidence rests on in terms of the interval or the check that
capped it, never a loss as small as a material one as the reason for doubt.
"""

from __future__ import annotations

from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.gathered import MARGIN
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import Basis, Confidence, Verdict
from diagnostics.result import Analysis
from diagnostics.words.details import cap_checks, cap_reason, decisive
from diagnostics.words.said import NO_CHANGE, change, duration, size, times_x, x_span
from ground import Label


class Answer(Label):
    """The verdict as line one says it, by the verdict and how sure it is."""

    AGED = "Aged"
    PROBABLY_AGED = "Probably aged"  # engine age at low confidence: confirm before filing
    NOT_AGED = "Not aged"  # no age, its interval ruling out a material loss (medium or high)
    NOT_SHOWN = "Not shown to be aged"  # no age at low confidence: a material loss is not ruled out
    CANT_TELL = "Can't tell"


UNDECIDED = "undecided"  # in the parentheses where a verdict has no confidence
SOAK_RESTART = "decode speed just before the soak restarted it"


def answer(a: Analysis) -> Answer:
    """The one word for the verdict: no age at low confidence is not shown to be aged, not its absence."""
    if a.verdict == Verdict.AGE:
        return Answer.PROBABLY_AGED if a.confidence == Confidence.LOW else Answer.AGED
    if a.verdict == Verdict.INSUFFICIENT:
        return Answer.CANT_TELL
    return Answer.NOT_SHOWN if a.confidence in (Confidence.LOW, None) else Answer.NOT_AGED


def headline(a: Analysis) -> str:
    """`Aged (medium confidence)`, `Can't tell (undecided)`."""
    sure = f"{a.confidence} confidence" if a.confidence is not None else UNDECIDED
    return f"{answer(a)} ({sure})"


def figure(a: Analysis, c: Comparison | None = None) -> str | None:
    """The figure in line one's form: the comparison `c` (else the one the verdict rests on), or, for
    age on the prefill side, prompt processing or the prompt cache; None where no interval bounds it."""
    s = a.slowdown
    if a.verdict == Verdict.AGE and a.age_basis == "prefill" and s is not None:
        i = interval(a)
        bound = f"; {x_span(i)}" if i is not None and i.bounded else ""
        return (
            f"prompt processing late in the run is {times_x(s.ratio)} its early speed at the same prompt sizes "
            f"({change(s.ratio)}{bound})"
        )
    if a.verdict == Verdict.AGE and a.age_basis == "prefix_reuse" and a.prefix_reuse is not None:
        r = a.prefix_reuse
        return (
            f"its prompt cache stopped reusing: an agent's next turn took {r.late_share:.0%} of its prompt from the "
            f"cache, against {r.healthy_share:.0%} early{_ratio(a)}"
        )
    c = c if c is not None else decisive(a)
    if c is None or not c.interval.bounded:
        return "decode speed fell with engine age" if a.verdict == Verdict.AGE else None
    # A soak's restart is the soak's own (its restart control): said as such, since a reader asked
    # which restart, having made none.
    now = SOAK_RESTART if a.source_kind == "run_dir" and c.basis == Basis.RESTART else None
    return size(c, _below_material(a, c), now=now)


def confidence(a: Analysis, seconds: float | None = None) -> tuple[str | None, str | None]:
    """`Medium, not high: only 6 early measurements were there to compare with.`: what the confidence
    rests on, and that reason alone (for the details not to say it twice). A check that capped it
    (diagnostics.decision.caps) first; else what the interval rules out or in, in line one's `x`; `seconds`,
    the run's length, where a high no-age rests on a short run."""
    if a.confidence is None:
        return None, None
    level = str(a.confidence).capitalize()
    said = f"{level}, not high" if a.confidence == Confidence.MEDIUM else level
    capped = cap_checks(a)
    if capped:
        reason = cap_reason(a, capped[0])
        return f"{said}: {reason}.", reason
    i = interval(a)
    if i is None or not i.bounded:
        return None, None
    if a.verdict == Verdict.AGE and a.confidence == Confidence.HIGH:
        reason = f"even the interval's upper end, {times_x(i.hi)}, is a loss of {1 - i.hi:.0%} or more"
    elif a.verdict == Verdict.AGE:
        # The bar in the reader's terms, a loss in percent (a sixth reader: `high needs it all below
        # 0.81x` splits hairs over a cutoff never heard of).
        d = decisive(a)
        high = (d.material if d is not None else DECODE_MATERIAL) * MARGIN  # diagnostics.decision.claims.age_confidence
        if i.hi <= high:  # the interval clears the bar: what held it back is no check line one can name
            return None, None
        reason = (
            f"high needs a loss of {1 - high:.0%} or more for certain, and this one could be as small as {1 - i.hi:.0%}"
        )
    elif i.lo >= 1.0:
        reason = "the interval holds no loss at all"
    else:
        reason = f"a loss of more than {1 - i.lo:.0%} is ruled out"
        if a.confidence != Confidence.HIGH:
            reason = f"a loss of up to {1 - i.lo:.0%} is not ruled out"
        elif seconds is not None:
            reason += f" for these {duration(seconds)}"
    return f"{said}: {reason}.", reason


def interval(a: Analysis) -> Interval | None:
    """The interval the verdict rests on: its decisive comparison's, else the slowdown's."""
    d = decisive(a)
    if d is not None:
        return d.interval
    s = a.slowdown
    return Interval(s.ratio, s.lo, s.hi, s.level) if s is not None and s.lo is not None and s.hi is not None else None


def _below_material(a: Analysis, c: Comparison) -> str:
    """`, under the 10% tokdrift calls age`: a loss a no-age verdict measured and found too small."""
    material = c.material if c.unit == "tok/s" else DECODE_MATERIAL
    if a.verdict in (Verdict.AGE, Verdict.INSUFFICIENT) or c.ratio >= 1 - NO_CHANGE or c.interval.lo <= material:
        return ""
    return f", under the {1 - material:.0%} tokdrift calls age"


def _ratio(a: Analysis) -> str:
    i = interval(a)
    return f" ({times_x(i.estimate)} its early speed; {x_span(i)})" if i is not None and i.bounded else ""
