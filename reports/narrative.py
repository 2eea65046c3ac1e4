"""The verdict in words and numbers: the opening every page starts with (diagnostics.words.opening), the
account in full behind it, and the key figures."""

from __future__ import annotations

from typing import NamedTuple

from diagnostics.evidence import suspects as suspects_mod
from diagnostics.labels import BASIS_WORDS, Basis, Cause, CheckStatus, Verdict
from diagnostics.result import Analysis, Slowdown
from diagnostics.words import line_one
from diagnostics.words.details import check_note, check_title, identity, status_shown
from diagnostics.words.opening import Opening, fault_set, lists_suspects, names_top_suspect, opening, when
from diagnostics.words.said import REFERENCE, ratio_words, times_x, to_the_second
from diagnostics.words.said import duration as said_duration

__all__ = [
    "Opening",
    "check_note",
    "check_title",
    "identity",
    "lists_suspects",
    "names_top_suspect",
    "opening",
    "status_shown",
    "to_the_second",
]

HEADLINES = {
    Verdict.AGE: "The engine slowed down with age, beyond what longer context explains",
    Verdict.CONTEXT_ONLY: "Throughput fell, but only as much as the longer context explains",
    Verdict.NO_DEGRADATION: "No slowdown at matched conditions",
    Verdict.INSUFFICIENT: "The data cannot tell",
}


DECIDED_BY = "decided by"  # the key figure that names the comparison the verdict rests on


class KeyNumber(NamedTuple):
    label: str
    value: str
    code: str | None = None  # the internal name behind the words, said after them in code font


def verdict_words(a: Analysis) -> str:
    """`Aged, medium confidence`, `Can't tell, leaning not aged`: the verdict in line one's words (two
    readers of the thirteenth and fourteenth versions found `Can't tell, low confidence` beside
    `Can't tell (leaning not aged)` a second verdict)."""
    return f"{line_one.answer(a)}, {line_one.sureness(a)}"


# What a verdict code means where line one's word reads otherwise (readers of the twelfth to eighteenth
# versions, given `Can't tell` beside `engine_age_degradation`, or `Not aged` beside
# `context_growth_only`, took the table for a second verdict).
CODE_GLOSS = {
    Verdict.AGE: "engine age, at low confidence",
    Verdict.CONTEXT_ONLY: "a longer context slowed decode, which is not age",
}


def verdict_row(a: Analysis) -> str:
    """The table's verdict row: line one's words, and what the code after them means where it reads
    otherwise (`Can't tell, leaning aged; its code says engine age, at low confidence`)."""
    said = verdict_words(a)
    gloss = CODE_GLOSS.get(a.verdict) if line_one.answer(a) != line_one.Answer.AGED else None
    return f"{said}; its code says {gloss}" if gloss else said


def headline(a: Analysis) -> str:
    if a.verdict == Verdict.AGE and a.age_basis == Basis.PREFIX_REUSE:
        return "The engine slowed down with age: its prefix cache stopped reusing, so every turn recomputes"
    if a.verdict == Verdict.AGE and a.age_basis == Basis.PREFILL:
        return "The engine slowed down with age: admitting a prompt takes longer and longer"
    return HEADLINES[a.verdict]


def duration(seconds: float | None) -> str:
    """diagnostics.words.said.duration, with `unknown` for a length no one measured (a table cell)."""
    return "unknown" if seconds is None else said_duration(seconds)


def _life_words(a: Analysis) -> str:
    """What engine age counts: life (wall time since the start) or busy time (a log without stamps)."""
    return "of engine busy time" if a.clock == "busy" else "of engine life"


def onset_when(a: Analysis) -> str:
    """The onset in the source's clock: a time of day, or engine time where the log has none (never a 1970 date)."""
    if a.onset is None:
        return "no onset"
    if a.dated:
        return when(a, a.onset.t) or "no onset"
    return f"{duration(a.onset.engine_age_s)} {_life_words(a)}"


def trigger_text(a: Analysis) -> str | None:
    if a.onset is None or a.onset.trigger is None:
        return None
    tr = a.onset.trigger
    at = (when(a, tr.t) or "the onset") if a.dated else "the onset"
    if tr.kind in ("prefill_append", "prefill") and tr.new_tokens is not None:
        cached = tr.cached_tokens or 0
        what = (
            f"a prefill appending {tr.new_tokens:,} new tokens onto {cached:,} cached tokens"
            if cached
            else f"a prefill of {tr.new_tokens:,} new tokens with nothing cached"
        )
        return f"{what} (at {at})"
    if tr.kind == "fault_on":
        f = fault_set(a)
        if f is None:
            return f"a fault switched on at {at}" + (f" ({tr.detail})" if tr.detail else "")
        where = "set in the engine from its start" if f.with_start else "switched on"
        return f"{f.name}, {where} at {at}, {duration(f.before_s)} before the onset"
    return f"a {tr.kind.replace('_', ' ')} at {at}" + (f" ({tr.detail})" if tr.detail else "")


CAUSE_TEXT = {
    Cause.HOST_DRIFT: (
        "The slowdown the soaked engine showed is not its age: a fresh engine under the same host "
        "and load was as slow, so the host or the load changed (see the fresh_control or "
        "host_contention check)."
    ),
}


def basis_text(basis: Basis | None) -> str:
    return "no comparison" if basis is None else BASIS_WORDS[basis].full


def rate_clause(a: Analysis, s: Slowdown | None = None) -> str:
    """`0.81x (90% interval 0.74-0.88) on identical probes: 37.0 tok/s healthy, 30.0 now at the same
    conditions` — three figures from one basis, which therefore agree."""
    s = s if s is not None else a.slowdown
    assert s is not None  # said only of an analysis with a slowdown
    return (
        f"{s.ratio:.2f}x{s.interval_text()} on {basis_text(s.basis)}: {s.healthy_tps:.1f} tok/s healthy, "
        f"{s.degraded_tps:.1f} tok/s now at the same conditions"
    )


def per_hour_text(a: Analysis) -> str | None:
    """`-6.0% per hour of engine age (90% interval -7.1% to -4.9%)`: decode speed's trend."""
    p = a.slowdown.per_hour if a.slowdown is not None else None
    if p is None:
        return None
    return f"{p.estimate:+.1%} per hour of engine age (90% interval {p.lo:+.1%} to {p.hi:+.1%})"


def _trend(a: Analysis) -> str:
    """`, -6.0% per hour of engine age (...)` where the step series measured a trend."""
    trend = per_hour_text(a)
    return f", {trend}" if trend else ""


def window_text(a: Analysis) -> str | None:
    """How precisely the onset is placed: the window the first degraded sample leaves, or how long
    a creep had been rising when it stood out."""
    if a.onset is None or a.onset.window_s is None:
        return None
    w = duration(a.onset.window_s)
    if a.slowdown is not None and a.slowdown.shape == "gradual":
        return f"{w} (how long the trend had been rising when it stood out of the early noise)"
    return f"{w} (from the last sample before the slowdown to the first slowed one; the change lies in between)"


def paragraph(a: Analysis) -> str:
    """One paragraph that states the verdict with its numbers, its basis and how sure it is."""
    checks = {c.name: c for c in a.checks}
    if a.verdict == Verdict.INSUFFICIENT:
        fails = [c.detail for c in a.checks if c.status == CheckStatus.FAIL]
        return "The data cannot tell engine age from context growth: " + ("; ".join(fails) or "too few samples") + "."
    if a.verdict == Verdict.AGE and a.age_basis == Basis.PREFIX_REUSE and a.prefix_reuse is not None:
        return _reuse_paragraph(a) + " " + a.reason
    if a.verdict == Verdict.AGE and a.age_basis == Basis.PREFILL and a.prefill is not None:
        return _prefill_paragraph(a) + " " + a.reason
    if a.verdict == Verdict.AGE:
        out = []
        gradual = a.slowdown is not None and a.slowdown.shape == "gradual"
        if a.onset is not None and gradual:
            out.append(
                f"Decode throughput crept down with engine age{_trend(a)}, and now runs at "
                f"{rate_clause(a)}. A creep has no moment it began: the onset ({onset_when(a)}, after "
                f"{duration(a.onset.engine_age_s)} {_life_words(a)}) is where the trend first stood out of the "
                f"healthy noise, {duration(a.onset.window_s)} after it began rising."
            )
        elif a.onset is not None:
            out.append(
                f"After {duration(a.onset.engine_age_s)} {_life_words(a)}, decode throughput fell to "
                f"{rate_clause(a)} (onset {onset_when(a)})."
            )
            if a.onset.window_s is not None:
                out.append(
                    f"The first degraded sample came {duration(a.onset.window_s)} after the last healthy one; "
                    f"the change lies in that window."
                )
            trig = trigger_text(a)
            if trig and fault_set(a):
                out.append(f"The only trigger on record is {trig}.")
            else:
                out.append(f"It began right after {trig}." if trig else "Nothing notable stands out just before it.")
        else:
            out.append(f"Late in the engine's life decode throughput ran at {rate_clause(a)}.")
        ctx = checks.get("context_only_model")
        if ctx is not None and ctx.detail.startswith("context cannot explain it"):
            out.append("Longer context cannot explain it: " + ctx.detail.split(": ", 1)[1] + ".")
        out.append(_restart_sentence(a))
        out.append(a.reason)
        sentence = _suspect_sentence(a)
        return " ".join(out + ([sentence] if sentence else []))
    out = []
    if a.slowdown is not None:
        if a.verdict == Verdict.CONTEXT_ONLY:
            out.append(
                f"Raw decode throughput fell, but at matched conditions late ran at {rate_clause(a)}, so the "
                f"longer context explains the loss."
            )
        else:
            out.append(f"At matched conditions late ran at {rate_clause(a)}.")
    if a.cause in CAUSE_TEXT:
        out.append(CAUSE_TEXT[a.cause])
    out.append(a.reason)
    return " ".join(out)


def _reuse_paragraph(a: Analysis) -> str:
    r = a.prefix_reuse
    assert r is not None  # the verdict rests on it
    when = (
        f"After {duration(a.onset.engine_age_s)} {_life_words(a)}, the"
        if a.onset is not None
        else "Late in the run, the"
    )
    out = [
        f"{when} engine's prefix cache stopped reusing what an agent's next turn shares with the last: "
        f"continuation turns reused a median {r.late_share:.0%} of their prompt from cache, against "
        f"{r.healthy_share:.0%} early"
        + (f", so each recomputed about {r.recomputed_tokens:,.0f} more prompt tokens" if r.recomputed_tokens else "")
        + (
            f" (median time to first token {r.ttft_healthy_s:.2f} s early, {r.ttft_late_s:.2f} s late)"
            if r.ttft_healthy_s is not None and r.ttft_late_s is not None
            else ""
        )
        + "."
    ]
    return " ".join(out + _decode_held(a))


def _prefill_paragraph(a: Analysis) -> str:
    p = a.prefill
    assert p is not None  # the verdict rests on it
    when = (
        f"After {duration(a.onset.engine_age_s)} {_life_words(a)}, the"
        if a.onset is not None
        else "Late in the run, the"
    )
    out = [
        f"{when} engine took longer and longer to admit a prompt: its last {p.num_late} prefills ran at "
        f"{1 / p.ratio:.2f} of the speed prefills of the same size had while it was young."
    ]
    return " ".join(out + _decode_held(a))


def _decode_held(a: Analysis) -> list[str]:
    """The sentences after a prefill-side finding: decode held, what began it, the top suspect."""
    out = []
    if a.decode_held is not None:
        out.append(f"Decode itself held: late decode ran at {rate_clause(a, a.decode_held)}.")
    if a.onset is not None:
        trig = trigger_text(a)
        out.append(f"It began after {trig}." if trig else "Nothing notable stands out just before it.")
    sentence = _suspect_sentence(a)
    return out + ([sentence] if sentence else [])


def _suspect_sentence(a: Analysis) -> str | None:
    if not a.suspects:
        return None
    top = a.suspects[0]
    return f"The engine figure that tracks it best is {top.name} (score {top.score:.2f}): {suspects_mod.short(top)}."


def key_numbers(a: Analysis) -> list[KeyNumber]:
    """The evidence table under the opening: the verdict in line one's word (its label beside it),
    every ratio the engine's over the reference's (below 1 slower), times to the second."""
    out = [
        KeyNumber("verdict", verdict_row(a), code=a.verdict),
        KeyNumber(DECIDED_BY, basis_text(a.basis)),
    ]
    if a.cause == Cause.HOST_DRIFT:
        out.append(KeyNumber("cause", "host or load drift: a fresh engine was as slow"))
    if a.slowdown is not None and a.slowdown.healthy_tps is None:  # a claim on prefix reuse or prefill time
        s = a.slowdown
        label = (
            "prefill speed at the same prompt sizes, late over early"
            if s.basis == Basis.PREFILL
            else "prefix reuse of continuation turns, late over early"
        )
        out.append(KeyNumber(label, f"{s.ratio:.2f}{s.interval_text()}"))
    elif a.slowdown is not None:
        s = a.slowdown
        interval = s.interval_text(none=" (too few samples for an interval)")
        out += [
            KeyNumber(figure_label(s.basis), f"{s.ratio:.2f}{interval}"),
            KeyNumber("decode early (tok/s, on what decided)", f"{s.healthy_tps:.1f}"),
            KeyNumber("decode late at the same conditions (tok/s: early times the ratio)", f"{s.degraded_tps:.1f}"),
        ]
        if s.shape is not None:
            out.append(
                KeyNumber(
                    "shape",
                    {
                        "step": "step: one change, then a new level",
                        "gradual": "gradual: a trend that grows with engine age",
                    }[s.shape],
                )
            )
        trend = per_hour_text(a)
        if trend is not None:
            out.append(KeyNumber("decode speed trend", trend))
    if a.prefix_reuse is not None:
        r = a.prefix_reuse
        out.append(
            KeyNumber(
                "prefix reuse of continuation turns (late / early)",
                f"{r.ratio:.2f} ({r.late_share:.0%} against {r.healthy_share:.0%})",
            )
        )
    if a.prefill is not None and not (a.slowdown is not None and a.slowdown.basis == Basis.PREFILL):
        out.append(KeyNumber("prefill speed at the same prompt sizes, late over early", f"{1 / a.prefill.ratio:.2f}"))
    if a.onset is not None:
        out += [
            KeyNumber("onset", onset_when(a)),
            KeyNumber("engine age at onset", _age_said(a.onset.engine_age_s)),
        ]
        window = window_text(a)
        if window is not None:
            out.append(KeyNumber("onset window", window))
        trig = trigger_text(a)
        out.append(KeyNumber("trigger", trig if trig else "none stands out"))
    out.append(KeyNumber("recovered by restart", recovered_text(a)))
    if any(x.facts for x in a.lives):  # a run directory's lives say nothing of themselves yet
        out.append(
            KeyNumber(
                "engine lives",
                "; ".join(f"life {x.life}: {x.describe()}" for x in a.lives[:6])
                + (f"; and {len(a.lives) - 6} more" if len(a.lives) > 6 else ""),
            )
        )
    if a.model is not None:
        out.append(KeyNumber("step-time model fitted early", f"{a.model.describe()} ({a.model.num_points} samples)"))
    valid = a.samples[a.samples["excluded"] == ""] if len(a.samples) else a.samples
    out.append(KeyNumber("decode samples", f"{len(a.samples)} ({len(a.samples) - len(valid)} kept out)"))
    return out


def suspects_note(a: Analysis) -> str | None:
    """What a list of suspects is under a verdict other than engine age: figures that track a
    slowdown the verdict did not pin on the engine's age, no cause."""
    if names_top_suspect(a):
        return None
    # "Not proven", not "does not call it": three readers of the fifteenth to seventeenth versions read the
    # latter beside a can't tell leaning aged, whose reason calls such a figure a sign of age, as a contradiction.
    return "figures that track the slowdown measured; engine age is not proven, so none is named its cause"


def figure_label(basis: Basis) -> str:
    """`decode speed, the engine's over a fresh engine's speed`: the key figure's row, by the
    comparison it comes from (a page whose table shows that comparison says it there instead)."""
    return f"decode speed, the engine's over {REFERENCE.get(basis, ('its early speed', ''))[0]}"


def no_suspects_text(a: Analysis) -> str:
    """What the pages say where they list no suspect."""
    if not lists_suspects(a):
        return "none listed: nothing was shown to slow down, so there is no slowdown for a figure to track"
    return "none: no engine figure tracks the slowdown beyond what healthy runs show"


def _restart_sentence(a: Analysis) -> str:
    if a.recovered_by_restart is True:
        return "A restart brought the speed back to the early rate, so the slowdown lives in the engine's state."
    if a.recovered_by_restart is False:
        return "A restart did not bring the speed back."
    restart = next((c for c in a.comparisons if c.basis == Basis.RESTART), None)
    if restart is not None:
        return f"A restart could not tell whether a fresh engine recovers: before it the engine ran at {ratio_words(restart)}."
    if len(a.lives) > 1:
        return f"The data hold a restart, but {_uncompared(a)}, so whether a fresh engine recovers is not tested here."
    return "The data holds no restart, so whether a fresh engine recovers is not tested here."


def recovered_text(a: Analysis) -> str:
    """Whether a restart brought the engine back, and where it cannot say, why: no restart in the
    data, a restart that could not be compared, or a restart that did not settle it. Its ratio as
    every ratio here, the engine's speed before the restart over its speed just after, without the
    interval the restart's own row says; an engine that was faster before it is said so, plainly."""
    if a.recovered_by_restart is not None:
        return "yes" if a.recovered_by_restart else "no"
    restart = next((c for c in a.comparisons if c.basis == Basis.RESTART), None)
    if restart is None:
        if len(a.lives) > 1:
            return f"not compared: {len(a.lives) - 1} restart(s) in the data, but {_uncompared(a)}"
        return "no restart in the data"
    ratio = times_x(restart.ratio)
    said = f"before the restart the engine ran at {ratio} its speed just after it"
    if restart.loss:
        # The restart did bring decode back; what the verdict could not show is that engine age, and
        # not something else, had slowed it (its reason).
        return f"decode came back after it ({said}), but the verdict could not rest on that"
    if restart.no_loss and restart.interval.lo > 1:
        return f"no: the engine was faster before the restart than just after it ({ratio})"
    if restart.no_loss:
        return f"nothing to bring back: the engine ran about as fast before the restart as just after it ({ratio})"
    return f"not settled: {said}"


def _uncompared(a: Analysis) -> str:
    """Why a restart in the data gave no restart comparison."""
    if any(c.name == "engine_identity" and c.status == CheckStatus.WARN for c in a.checks):
        return "the engine after it was a different one (the engine_identity check)"
    return "too few decode samples on one side of it to compare the engine before and after"


def _age_said(seconds: float) -> str:
    """`294 s (4.9 min)`; `98 s` where the two would say the same."""
    said = duration(seconds)
    return f"{seconds:.0f} s" if said == f"{seconds:.0f} s" else f"{seconds:.0f} s ({said})"
