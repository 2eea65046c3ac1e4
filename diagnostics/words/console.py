"""The human summary of an analysis as rich renderables; the CLI prints them.

It opens as every page does (diagnostics.words.opening): three lines (the answer with its size and how
sure, what to do, why), then the details (the other measures, the engine). The evidence follows:
the verdict's label and basis, the comparisons, the onset, the suspects and the checks.
"""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from diagnostics.evidence import suspects as suspects_mod
from diagnostics.labels import Cause, CheckStatus
from diagnostics.result import Analysis
from diagnostics.source.source import Source
from diagnostics.words import details, line_one
from diagnostics.words import opening as opening_mod
from diagnostics.words.said import capitalized

# By the word line one says, so that the colour says what the word says (an age at low confidence is
# can't tell, whatever its verdict).
ANSWER_STYLE = {
    line_one.Answer.AGED: "bold red",
    line_one.Answer.NOT_AGED: "bold green",
    line_one.Answer.CANT_TELL: "bold yellow",
}
STATUS_STYLE = {CheckStatus.OK: "green", CheckStatus.WARN: "yellow", CheckStatus.FAIL: "red"}


def render(a: Analysis, source: Source | None = None) -> Group:
    first = opening_mod.opening(a, source)
    parts: list[Text | Table] = [
        Text.assemble((first.headline, ANSWER_STYLE[line_one.answer(a)]), first.after_headline)
    ]
    for label, text in first.lines:
        style = "bold yellow" if label == opening_mod.LABEL_ALSO else ""
        parts.append(Text.assemble((f"{label}: ", "bold"), (text, style)))
    parts += [Text(""), Text("Details", style="bold")]
    parts += [Text(f"{d.label}: {d.text}", style="dim") for d in first.details]
    parts.append(Text(""))
    # The verdict in line one's word, then its label (a fifth reader found the labels beside the
    # words above hard to match): `verdict: Aged, medium confidence (engine_age_degradation, on paired control)`.
    basis = f", on {a.basis.replace('_', ' ')}" if a.basis else ""
    code = f"{a.verdict}, {a.confidence} confidence" if a.confidence is not None else str(a.verdict)
    parts.append(
        Text.assemble(
            ("verdict: ", "bold"),
            (f"{line_one.answer(a)}, {line_one.sureness(a)}", ANSWER_STYLE[line_one.answer(a)]),
            f" ({code}{basis})",
        )
    )
    engine = details.engine_name(source) if source is not None else a.engine
    parts.append(Text(f"{a.source_kind} {a.source_path} ({engine})", style="dim"))
    if a.cause == Cause.HOST_DRIFT:
        parts.append(Text("cause: host or load drift - a fresh engine was as slow", style="yellow"))
    for m in a.comparisons:
        parts.append(Text(f"{m.basis.replace('_', ' ')}: {m.detail}", style="dim"))
    if a.slowdown is not None and a.slowdown.per_hour is not None:
        p = a.slowdown.per_hour
        shape = f"{a.slowdown.shape}; " if a.slowdown.shape else ""
        parts.append(
            Text(
                f"{shape}decode speed {p.estimate:+.1%} per hour of engine age (90% interval "
                f"{p.lo:+.1%} to {p.hi:+.1%})"
            )
        )
    if a.onset is not None:
        when = opening_mod.when(a, a.onset.t) if a.dated else "(no time of day in this log)"
        age = "engine busy time" if a.clock == "busy" else "engine age"
        line = f"onset {when} at {age} {a.onset.engine_age_s:.0f} s"
        if a.onset.window_s is not None:
            line += f" (window {a.onset.window_s:.0f} s)"
        if a.onset.trigger is not None:
            at = opening_mod.when(a, a.onset.trigger.t) if a.dated else "the onset"
            line += f"; trigger {a.onset.trigger.kind} at {at}: {a.onset.trigger.detail}"
        parts.append(Text(line))
    if a.model is not None:
        parts.append(
            Text(f"step-time model fitted early: {a.model.describe()} ({a.model.num_points} samples)", style="dim")
        )
    if a.suspects and opening_mod.lists_suspects(a):
        title = (
            "suspects"
            if opening_mod.names_top_suspect(a)
            else "figures that track the slowdown (no cause: not engine age)"
        )
        order = suspects_mod.order_note(a.suspects)
        title += f" ({order})" if order else ""
        table = Table(title=title, show_header=True, header_style="bold")
        table.add_column("name")
        table.add_column("score", justify="right")
        table.add_column("evidence")
        for suspect in a.suspects:
            table.add_row(escape(suspect.name), f"{suspect.score:.2f}", escape(suspects_mod.short(suspect)))
        parts.append(table)
    table = Table(title="checks", show_header=True, header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    for c in a.checks:
        note = details.check_note(a, c)
        shown = details.status_shown(a, c)
        status = f"[{STATUS_STYLE[c.status]}]{shown}[/]" + (f" ({escape(note.tag)})" if note is not None else "")
        why = f". {capitalized(note.why)}." if note is not None and note.why else ""
        table.add_row(escape(c.name), status, escape(c.detail.rstrip(".") + why if why else c.detail))
    parts.append(table)
    return Group(*parts)
