"""`diag summary`: the analysis as Markdown, at most MAX_LINES lines, ready to paste into an issue."""

from __future__ import annotations

import re

from diagnostics import suspects
from diagnostics.opening import to_the_second
from reports import narrative
from reports.environment import DECIDED, environment
from reports.inputs import Inputs
from reports.redact import Redactor
from tokdrift import __version__

MAX_LINES = 60
MAX_SUSPECTS = 3
MAX_CHECKS = 8
MAX_ENV = 12
MAX_CELL = 160
MAX_DECIDED = 280  # the running verdict a soak stopped on, whole: cut, it reads as the verdict
ENV_FIELDS = (
    "source",
    "engine",
    "run_id",
    "status",
    "stop_reason",
    DECIDED,
    "started_at",
    "ended_at",
    "target",
    "command",
    "log format",
    "KV capacity (tokens)",
)
ENV_PREFIXES = ("host.", "engine.", "trace.")
STATUS_MARK = {"ok": "ok", "warn": "**warn**", "fail": "**FAIL**"}


def render_summary(inputs: Inputs, redactor: Redactor | None = None, report_name: str | None = None) -> str:
    redactor = redactor if redactor is not None else Redactor()
    a = inputs.analysis
    redactor.anchor_to(inputs.source.path, inputs.command)

    def red(s: object) -> str:
        return _md(redactor.text(to_the_second(str(s))))

    first = narrative.opening(a, inputs.source)
    out = [
        f"### tokdrift: {red(inputs.name)}",
        "",
        f"**{first.headline}.** {red(first.paragraph)}",
        "",
    ]
    if first.warnings:
        out.append(f"- warnings: {red('; '.join(first.warnings))}")
    if first.held_back:
        out.append(f"- held back by: {red('; '.join(first.held_back))}")
    if first.measured:
        out.append(f"- the figure: {red(first.measured)}")
    out.append(f"- engine: {red(narrative.identity(a, inputs.source))}")
    shown = a.suspects[:MAX_SUSPECTS] if narrative.lists_suspects(a) else ()
    if shown and narrative.names_top_suspect(a):
        top = shown[0]
        out.append(f"- top suspect: `{top.name}` (score {top.score:.2f}): {red(suspects.short(top))}")
    out += ["", "| | |", "|---|---|"]
    out += [f"| {k.label} | {_cell(red(k.value))} |" for k in narrative.key_numbers(a)]
    for m in a.comparisons:
        out.append(f"| {m.basis.replace('_', ' ')} | {_cell(red(m.detail))} |")
    out.append("")
    if len(shown) > 1 or (shown and not narrative.names_top_suspect(a)):
        note = narrative.suspects_note(a)
        out.append("**Suspects**" + (f" ({note})" if note else ""))
        out += [f"{i}. `{s.name}` (score {s.score:.2f}): {red(s.evidence)}" for i, s in enumerate(shown, 1)]
    elif not shown:
        out.append(f"**Suspects:** {narrative.no_suspects_text(a)}")
    if out[-1] != "":
        out.append("")
    order = {"fail": 0, "warn": 1, "ok": 2}
    warned = sorted((c for c in a.checks if c.status != "ok"), key=lambda c: order[c.status])[:MAX_CHECKS]
    ok = [c.name for c in a.checks if c.status == "ok"]
    out.append(
        f"**Checks** ({len(a.checks)}: {len(ok)} ok, "
        f"{sum(c.status == 'warn' for c in a.checks)} warn, {sum(c.status == 'fail' for c in a.checks)} fail)"
    )
    out += [f"- {STATUS_MARK[c.status]} {_check_name(c.name)}: {_cell(red(c.detail), 300)}" for c in warned]
    if ok:
        out.append(f"- ok: {', '.join(ok)}")
    out.append("")
    env = environment(inputs.source, redactor)
    rows = [(k, v) for k, v in env.rows if k in ENV_FIELDS or k.startswith(ENV_PREFIXES)][:MAX_ENV]
    out.append("**Environment**")
    out += [f"- {k}: `{_cell(str(v), MAX_DECIDED if k == DECIDED else MAX_CELL).replace('`', '')}`" for k, v in rows]
    out += [f"- startup: `{_cell(line).replace('`', '')}`" for line in env.startup[:2]]
    out.append("")
    out.append(f"**Redacted:** {redactor.describe()}.")
    more = f" Full report with plots: `{report_name}`." if report_name else ""
    out.append(f"<sub>tokdrift {__version__}, `diag summary`.{more}</sub>")
    return "\n".join(out[:MAX_LINES]) + "\n"


def _check_name(name: str) -> str:
    """`cause of the slowdown (`confidence`)`: a check by its name, in the reader's words first where the name misleads."""
    title = narrative.check_title(name)
    return f"{title} (`{name}`)" if title else f"`{name}`"


def _md(s: str) -> str:
    """Text from the inputs: no raw HTML in the Markdown (a tag, a comment or an entity would be
    read as HTML), but plain text as it was: `main 54.2 -> 53.8 tok/s` stays so."""
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", re.sub(r"&(?=#?\w+;)", "&amp;", s))


def _cell(s: str, limit: int = MAX_CELL) -> str:
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= limit else s[: limit - 1] + "…"
