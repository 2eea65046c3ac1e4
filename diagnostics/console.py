"""The human summary of an analysis as rich renderables; the CLI prints them."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from diagnostics.labels import Cause, Verdict
from diagnostics.result import Analysis, iso

VERDICT_TEXT = {
    Verdict.AGE: ("bold red", "the engine slowed down with age, beyond what context explains"),
    Verdict.CONTEXT_ONLY: ("bold yellow", "throughput fell, but only as much as the longer context explains"),
    Verdict.NO_DEGRADATION: ("bold green", "no slowdown at matched conditions"),
    Verdict.INSUFFICIENT: ("bold magenta", "the data cannot tell (see the failed check)"),
}
STATUS_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def render(a: Analysis) -> Group:
    style, meaning = VERDICT_TEXT[a.verdict]
    head = Text.assemble(("verdict: ", "bold"), (a.verdict, style), f" - {meaning}")
    parts: list[Text | Table] = [Text(f"{a.source_kind} {a.source_path} ({a.engine})", style="dim"), head]
    parts.append(Text(a.reason))
    if a.cause == Cause.HOST_DRIFT:
        parts.append(
            Text(
                "cause: host or load drift - a fresh engine was as slow (see the fresh_control or "
                "host_contention check)",
                style="yellow",
            )
        )
    if a.slowdown is not None:
        s = a.slowdown
        interval = s.interval_text()
        rates = (
            f": {s.healthy_tps:.1f} tok/s healthy, {s.degraded_tps:.1f} tok/s now at the same conditions"
            if s.healthy_tps is not None
            else ""
        )
        parts.append(
            Text(f"matched ratio {s.ratio:.2f}{interval} (late / healthy, on {s.basis.replace('_', ' ')})" + rates)
        )
    if a.prefix_reuse is not None:
        r = a.prefix_reuse
        parts.append(
            Text(
                f"prefix reuse of continuation turns {r.ratio:.2f} (late / early: {r.late_share:.0%} "
                f"against {r.healthy_share:.0%})"
                + ("; the verdict rests on it" if a.age_basis == "prefix_reuse" else "")
            )
        )
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
        when = iso(a.onset.t) if a.dated else "(no time of day in this log)"
        age = "engine busy time" if a.clock == "busy" else "engine age"
        line = f"onset {when} at {age} {a.onset.engine_age_s:.0f} s"
        if a.onset.window_s is not None:
            line += f" (window {a.onset.window_s:.0f} s)"
        if a.onset.trigger is not None:
            line += f"; trigger {a.onset.trigger.kind} at {iso(a.onset.trigger.t)}: {a.onset.trigger.detail}"
        parts.append(Text(line))
    if a.recovered_by_restart is not None:
        parts.append(Text("a restart brought it back" if a.recovered_by_restart else "a restart did not bring it back"))
    if a.model is not None:
        parts.append(
            Text(f"healthy model: step time = {a.model.describe()} ({a.model.num_points} samples)", style="dim")
        )
    if a.suspects:
        table = Table(title="suspects", show_header=True, header_style="bold")
        table.add_column("name")
        table.add_column("score", justify="right")
        table.add_column("evidence")
        for suspect in a.suspects:
            table.add_row(escape(suspect.name), f"{suspect.score:.2f}", escape(suspect.evidence))
        parts.append(table)
    table = Table(title="checks", show_header=True, header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail")
    for c in a.checks:
        table.add_row(escape(c.name), f"[{STATUS_STYLE[c.status]}]{c.status}[/]", escape(c.detail))
    parts.append(table)
    return Group(*parts)
