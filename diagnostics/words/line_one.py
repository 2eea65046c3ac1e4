"""Line one of every verdict: one of three words, how sure in the parentheses, one change in percent.

`Aged (medium confidence), from a 2.7-min soak of the built-in engine: decode is 28% slower late in
the run than early, against a fresh copy run alongside (90% interval 18-37% slower). Medium, not high: a longer run would narrow
the range enough for high.`

Readers asked, one after another, for fewer ways to say the same thing. The fourth found line one
said four ways; the sixth and seventh mapped five verdict words onto yes, no and can't tell
themselves, and converted `0.68x` into `1.5x faster` and back. So the answer is one of three words
(`Answer`): Aged, Not aged, Can't tell, the confidence always in the parentheses after it. Low
confidence either way is can't tell, leaning the verdict's way: an age at low confidence is `Can't
tell (leaning aged)`, with a next step that asks to confirm it; no age at low confidence, where a
material loss is not ruled out, is `Can't tell (leaning not aged)`, not the absence of a loss; so is
an undecided verdict beside both signs of age unproven `Can't tell (leaning aged)`. The figure is always `decode <is|was> <N% slower|faster> <than the reference>`
with its interval in percent (diagnostics.words.said.size), and the sentence after it says what the
confidence rests on: the check that capped it, or, for the interval, what more data would do.
"""

from __future__ import annotations

from diagnostics.evidence.comparison import DECODE_MATERIAL, Comparison
from diagnostics.evidence.gathered import MARGIN
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import Basis, CheckStatus, Confidence, Verdict
from diagnostics.result import Analysis
from diagnostics.words.details import cap_checks, cap_reason, decisive, grew, wider
from diagnostics.words.said import NO_CHANGE, SOAK_RESTART, duration, percent_change, size, span
from ground import Label


class Answer(Label):
    """The verdict as line one says it: one of three words."""

    AGED = "Aged"  # engine age at medium or high confidence
    NOT_AGED = "Not aged"  # no age, its interval ruling out a material loss (medium or high)
    CANT_TELL = "Can't tell"  # undecided, or either verdict at low confidence (leaning its way)


UNDECIDED = "undecided"  # in the parentheses where a verdict has no confidence
LEANING = "leaning not aged"  # in the parentheses of no age at low confidence
LEANING_AGED = "leaning aged"  # in the parentheses of can't tell where two signs of age stand unconfirmed
# A measure within one engine life, after "it ran N% faster" (line one's `_slow_at_start`).
WITHIN_RUN = {
    Basis.PROBES: "late than early on identical test requests",
    Basis.BINS: "late than early at the same batch size and context length",
    Basis.STEP_SERIES: "late than early, step by step against its early speed",
    Basis.COMBINED: "late than early, all measures together",
}


def answer(a: Analysis) -> Answer:
    """The one word for the verdict: low confidence either way is can't tell, leaning one way (no age
    at low confidence is not the absence of a loss; engine age at low confidence is not yet a bug to
    file: four readers of the thirteenth and fourteenth versions read `Aged` beside `confirm it before
    filing`, on 2 early measurements, as the tool contradicting itself)."""
    if a.verdict == Verdict.INSUFFICIENT or a.confidence in (Confidence.LOW, None):
        return Answer.CANT_TELL
    if a.verdict == Verdict.AGE:
        return Answer.AGED
    return Answer.NOT_AGED


def sureness(a: Analysis) -> str:
    """What the parentheses after the word say: `medium confidence`, `undecided`, `leaning aged`,
    `leaning not aged`."""
    if a.verdict == Verdict.INSUFFICIENT or a.confidence is None:
        return LEANING_AGED if leaning_aged(a) else UNDECIDED
    if a.confidence == Confidence.LOW:
        return LEANING_AGED if a.verdict == Verdict.AGE else LEANING
    return f"{a.confidence} confidence"


def headline(a: Analysis) -> str:
    """`Aged (medium confidence)`, `Can't tell (undecided)`, `Can't tell (leaning not aged)`."""
    return f"{answer(a)} ({sureness(a)})"


def leaning_aged(a: Analysis) -> bool:
    """Can't tell, with both signs of engine age the data hold and only the proof missing (an engine age
    at low confidence leans aged too, by its verdict: `sureness`): a restart
    that made the engine materially faster (`restart_slower`, the comparisons within the run not
    showing it) and an engine figure that grew a lot where decode slowed. Two readers of the twelfth
    version asked for "probably aged, not proven" there; the verdict stays `insufficient_data`, and
    its next step asks for the soak that would prove it."""
    if a.verdict != Verdict.INSUFFICIENT:
        return False
    restart = any(c.name == "restart_slower" and c.status == CheckStatus.FAIL for c in a.checks)
    return restart and grew(a) is not None


def figure(a: Analysis, c: Comparison | None = None) -> str | None:
    """The figure in line one's form: the comparison `c` (else the one the verdict rests on), or, for
    age on the prefill side, prompt processing or the prompt cache; None where no interval bounds it."""
    s = a.slowdown
    if a.verdict == Verdict.AGE and a.age_basis == "prefill" and s is not None:
        i = interval(a)
        bound = f" ({span(i)})" if i is not None and i.bounded else ""
        return f"prompt processing is {percent_change(s.ratio)} late in the run than early, at the same prompt sizes{bound}"
    if a.verdict == Verdict.AGE and a.age_basis == "prefix_reuse" and a.prefix_reuse is not None:
        r = a.prefix_reuse
        return (
            f"its prompt cache stopped reusing: an agent's next turn took {r.late_share:.0%} of its prompt from the "
            f"cache, against {r.healthy_share:.0%} early{_ratio(a)}"
        )
    c = c if c is not None else decisive(a)
    if c is None or not c.interval.bounded:
        return "decode fell with engine age" if a.verdict == Verdict.AGE else None
    # A soak's restart is the soak's own (its restart control): said as such, since a reader asked
    # which restart, having made none.
    soak = a.source_kind == "run_dir"
    # An interval wider than the others is said as such where it stands (four readers in turn found
    # the 99% only under Details): the soak looked at it after every round, so it must be wider.
    note = ", wider as the soak checked it after every round of test requests" if soak and c in wider(a) else ""
    lead, tail = _slow_at_start(a, c)
    said = size(c, _below_material(a, c), restart=SOAK_RESTART if soak else None, note=note, bare=bool(lead))
    return f"{lead}{said}{tail}"


def _slow_at_start(a: Analysis, c: Comparison) -> tuple[str, str]:
    """What goes before and after the restart's figure (`decode ran 34% faster late than early at the same
    batch size and context length, and ` and `: the engine was slow just after a start (...), not after
    long serving`; a lead where there is one puts the figure without its `decode was`): a restart
    that left the engine slower for certain, said where the figure stands as the oddity it is (three
    readers of the twelfth version, who found it a paragraph below, read `67% faster than the same engine
    freshly restarted` as a fault of the tool), after the measure within the run that shows the same where
    one does (nine readers of the fourteenth to seventeenth versions asked to lead with a figure that was
    no warm-up's). The interval is the restart's: the verdict rests on it (the run's own samples span
    too little engine time to rule age out alone)."""
    if a.verdict in (Verdict.AGE, Verdict.INSUFFICIENT) or c.basis != Basis.RESTART:
        return "", ""
    if not c.interval.bounded or c.interval.lo <= 1 + NO_CHANGE:
        return "", ""
    slow = ": the engine was slow just after a start (a warm-up, or other load then), not after long serving"
    within = [
        x for x in a.comparisons if x.basis in WITHIN_RUN and x.interval.bounded and x.interval.lo > 1 + NO_CHANGE
    ]
    if not within:
        return "", slow
    w = min(within, key=lambda x: x.interval.hi / x.interval.lo)
    return f"decode ran {percent_change(w.ratio)} {WITHIN_RUN[w.basis]}, and ", slow


def confidence(a: Analysis, seconds: float | None = None) -> tuple[str | None, str | None]:
    """`Medium, not high: only 6 early measurements were there to compare with.`: what the confidence
    rests on, and that reason alone (for the details not to say it twice). A check that capped it
    (diagnostics.decision.caps) first; else what the interval rules out or in, in percent; `seconds`,
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
        reason = f"even at the interval's end the loss is {1 - i.hi:.0%}"
    elif a.verdict == Verdict.AGE:
        # What more data would do, not the bar itself (a sixth and a seventh reader: `high needs a
        # loss of 19% or more for certain, and this one could be as small as 18%` splits hairs).
        d = decisive(a)
        high = (d.material if d is not None else DECODE_MATERIAL) * MARGIN  # diagnostics.decision.claims.age_confidence
        if i.hi <= high:  # the interval clears the bar: what held it back is no check line one can name
            return None, None
        reason = "more measurements would narrow the range enough for high"
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
    """`below the 10% tokdrift counts as age`: a loss a no-age verdict measured and found too small, or,
    at low confidence, whose estimate is under the bar while its interval reaches past it (an eighth
    reader read `Can't tell (leaning not aged)` beside `7% slower` as leaning aged)."""
    material = c.material if c.unit == "tok/s" else DECODE_MATERIAL
    if a.verdict in (Verdict.AGE, Verdict.INSUFFICIENT) or c.ratio >= 1 - NO_CHANGE or c.ratio <= material:
        return ""
    if c.interval.lo <= material and a.confidence != Confidence.LOW:
        return ""
    return f"below the {1 - material:.0%} tokdrift counts as age"


def _ratio(a: Analysis) -> str:
    i = interval(a)
    return f" (decode {percent_change(i.estimate)} than early; {span(i)})" if i is not None and i.bounded else ""
