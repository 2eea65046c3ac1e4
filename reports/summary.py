"""`diag summary`: the analysis as Markdown, at most MAX_LINES lines, ready to paste into an issue."""

from __future__ import annotations

import re

from diagnostics.evidence import suspects
from diagnostics.labels import Basis, CheckStatus
from diagnostics.result import Analysis, Check
from diagnostics.words import details
from diagnostics.words.details import NO_CHANGE
from diagnostics.words.said import capitalized, to_the_second
from ground import __version__
from reports import narrative
from reports.environment import DECIDED, environment
from reports.inputs import Inputs
from reports.redact import Redactor

MAX_LINES = 60
MAX_SUSPECTS = 3
MAX_CHECKS = 8
MAX_ENV = 12
MAX_RAW = 160  # a raw line quoted in the environment (a start-up line) is cut at a word past this
# The environment's fields, the most asked for first: where the lines run short, the last go.
# (The engine is in the details, with its build, model and host.)
ENV_FIELDS = (
    "source",
    "command",
    DECIDED,
    "started_at",
    "ended_at",
    "stop_reason",
    "log format",
    "KV capacity (tokens)",
    "target",
    "run_id",
    "status",
)
# Key figures kept out of the summary's table: the decisive comparison's early level and that level
# times the ratio, computed, which line one no longer says as speeds (diagnostics.words.said: only
# measured speeds, which the comparison's own row states).
SAID_ABOVE = (
    "decode early (tok/s, on what decided)",
    "decode late at the same conditions (tok/s: early times the ratio)",
)
# Comparisons a key figure says already, in its own words: by what its label holds.
KEYED = {
    Basis.PREFIX_REUSE: "prefix reuse of continuation turns",
    Basis.PREFILL: "prefill speed at the same prompt sizes",
}
ENV_PREFIXES = ("host.", "engine.", "trace.")
WHOLE = ("command", DECIDED)  # said whole, however long: a cut command does not run, a cut verdict misleads
PROSE = (DECIDED,)  # said in words, not a value to copy: no code font
STATUS_MARK = {
    CheckStatus.OK: "ok",
    CheckStatus.WARN: "**warn**",
    CheckStatus.FAIL: "**FAIL**",
    details.NOT_MET: f"**{details.NOT_MET}**",
}


def render_summary(inputs: Inputs, redactor: Redactor | None = None, report_name: str | None = None) -> str:
    redactor = redactor if redactor is not None else Redactor()
    a = inputs.analysis
    redactor.anchor_to(inputs.source.path, inputs.command)

    def red(s: object) -> str:
        return _md(redactor.text(to_the_second(str(s))))

    first = narrative.opening(a, inputs.source)
    out = [f"### tokdrift: {red(inputs.name)}", "", f"**{first.headline}**{red(first.after_headline)}", ""]
    for label, text in first.lines:
        out += [f"**{label}:** {red(text)}", ""]
    out += ["#### Details", ""]
    out += [f"- {d.label}: {red(d.text)}" for d in first.details]
    shown = a.suspects[:MAX_SUSPECTS] if narrative.lists_suspects(a) else ()
    out += ["", "| | |", "|---|---|"]
    for k in _table(a):
        code = f" (`{k.code}`)" if k.code else ""
        out.append(f"| {k.label} | {_cell(red(k.value))}{code} |")
    out.append("")
    if shown:
        notes = [n for n in (narrative.suspects_note(a), suspects.order_note(shown)) if n]
        out.append("**Suspects**" + (f" ({'; '.join(notes)})" if notes else ""))
        out += [f"{i}. `{s.name}` (score {s.score:.2f}): {red(s.evidence)}" for i, s in enumerate(shown, 1)]
    else:
        out.append(f"**Suspects:** {narrative.no_suspects_text(a)}")
    out.append("")
    order = {CheckStatus.FAIL: 0, CheckStatus.WARN: 1, CheckStatus.OK: 2}

    def weight(c: Check) -> tuple[int, bool]:  # failures, then what matters, then what changes nothing
        note = narrative.check_note(a, c)
        return order[c.status], note is not None and note.tag == NO_CHANGE

    warned = sorted((c for c in a.checks if c.status != CheckStatus.OK), key=weight)[:MAX_CHECKS]
    ok = [c.name for c in a.checks if c.status == CheckStatus.OK]
    failed = sum(c.status == CheckStatus.FAIL for c in a.checks)
    out.append(
        f"**Checks** ({len(a.checks)}: {len(ok)} ok, {sum(c.status == 'warn' for c in a.checks)} warn, "
        f"{failed} {details.failed_shown(a)})"
    )
    for c in warned:
        note = narrative.check_note(a, c)
        tag = f" ({note.tag})" if note is not None else ""
        detail = _cell(red(c.detail)).rstrip(".")
        why = f". {capitalized(note.why)}." if note is not None and note.why else ""
        out.append(f"- {STATUS_MARK[details.status_shown(a, c)]} {_check_name(c.name)}{tag}: {detail}{red(why)}")
    if ok:
        out.append(f"- ok: {', '.join(ok)}")
    out.append("")
    env = environment(inputs.source, redactor, a)  # before the redaction is described: it redacts too
    more = f" Full report with plots: `{report_name}`." if report_name else ""
    tail = [f"**Redacted:** {redactor.describe()}.", f"<sub>tokdrift {__version__}, `diag summary`.{more}</sub>"]
    rank = {k: i for i, k in enumerate(ENV_FIELDS)}
    rows = [(k, v) for k, v in env.rows if k in ENV_FIELDS or k.startswith(ENV_PREFIXES)]
    rows = sorted(rows, key=lambda kv: rank.get(kv[0], len(rank)))[:MAX_ENV]
    said = [_env_line(k, v) for k, v in rows]
    said += [f"- startup: `{_cell(line, MAX_RAW).replace('`', '')}`" for line in env.startup[:2]]
    room = MAX_LINES - len(out) - len(tail) - 2  # the heading and the blank line after the list
    if room > 0:
        out += ["**Environment**", *said[:room], ""]
    return "\n".join((out + tail)[:MAX_LINES]) + "\n"


def _table(a: Analysis) -> list[narrative.KeyNumber]:
    """The key figures, then each comparison, as rows. A figure is said once: the comparison the
    verdict rests on takes the place of the `decided by` row and of the key figure's (`decided by:
    paired control | this engine over a fresh engine ... 0.68 (90% interval 0.56-0.83) ...`), where
    it is the key figure's comparison too; a fifth reader found the same interval in three rows."""
    keys = [k for k in narrative.key_numbers(a) if k.label not in SAID_ABOVE]
    labels = " ".join(k.label for k in keys)
    shown = [m for m in a.comparisons if not (m.basis in KEYED and KEYED[m.basis] in labels)]
    s = a.slowdown
    keyed = s is not None and s.healthy_tps is not None and s.basis == a.basis  # a decode figure, on what decided
    figure = next((m for m in shown if m.basis == a.basis), None) if keyed else None
    rows = []
    for k in keys:
        if figure is not None and k.label == narrative.DECIDED_BY:
            rows.append(narrative.KeyNumber(f"{narrative.DECIDED_BY}: {_basis_row(figure.basis)}", figure.detail))
        elif figure is None or k.label != narrative.figure_label(figure.basis):
            rows.append(k)
    return rows + [narrative.KeyNumber(_basis_row(m.basis), m.detail) for m in shown if m is not figure]


def _basis_row(basis: Basis) -> str:
    """`paired control`: a comparison's row in the table, by its basis."""
    return basis.replace("_", " ")


def _env_line(key: str, value: str) -> str:
    """`- stop_reason: `duration``: an environment row, its value in code font, or in plain words."""
    text = _cell(str(value), None if key in WHOLE else MAX_RAW)
    return f"- {key}: {_md(text)}" if key in PROSE else f"- {key}: `{text.replace('`', '')}`"


def _check_name(name: str) -> str:
    """`cause of the slowdown (`confidence`)`: a check by its name, in the reader's words first where the name misleads."""
    title = narrative.check_title(name)
    return f"{title} (`{name}`)" if title else f"`{name}`"


def _md(s: str) -> str:
    """Text from the inputs: no raw HTML in the Markdown (a tag, a comment or an entity would be
    read as HTML), but plain text as it was: `main 54.2 -> 53.8 tok/s` stays so."""
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", re.sub(r"&(?=#?\w+;)", "&amp;", s))


def _cell(s: str, limit: int | None = None) -> str:
    """Text on one line, for a table cell or a list item: whole, or, past `limit`, cut at a word
    and marked `…` (never inside a word)."""
    s = " ".join(s.split()).replace("|", "\\|")
    if limit is None or len(s) <= limit:
        return s
    cut = s[:limit].rsplit(" ", 1)[0]
    return f"{cut} …"
