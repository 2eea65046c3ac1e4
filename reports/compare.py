"""`diag compare A B`: two runs or logs side by side (before and after a fix): verdicts, matched
throughput, probes."""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple

from diagnostics.labels import BASIS_WORDS, Verdict
from diagnostics.result import Analysis
from ground import __version__
from reports import narrative, plots, tables
from reports.inputs import Inputs
from reports.redact import Redactor
from reports.report import Figure, environment_jinja

SAME = 0.05  # figures closer than this (relative) are not called better or worse


class Row(NamedTuple):
    label: str
    a: str
    b: str
    change: str  # "better", "worse" or ""


def render_compare(a: Inputs, b: Inputs, redactor: Redactor | None = None) -> str:
    redactor = redactor if redactor is not None else Redactor()
    names = [redactor.text(a.name), redactor.text(b.name)]
    if names[0] == names[1]:
        names = [f"A: {names[0]}", f"B: {names[1]}"]
    sides = []
    for inputs, name in zip((a, b), names):
        an = inputs.analysis
        first = narrative.opening(an, inputs.source)
        sides.append(
            {
                "name": name,
                "a": an,
                "first": first._replace(
                    action=redactor.text(first.action),
                    why=redactor.text(first.why),
                    also=tuple(redactor.text(x) for x in first.also),
                ),
                "matched": [m._replace(detail=redactor.text(m.detail)) for m in an.comparisons],
                "probe_lives": tables.probe_lives(inputs.source.probes),
                "source": f"{inputs.source.kind} {redactor.text(inputs.source.path)}",
            }
        )
    figures = {
        "probes": Figure(
            plots.probes_over_age([a.source.probes, b.source.probes], names),
            "Neither source holds probes (plain logs have none).",
        ),
        "age": Figure(
            plots.age_curves([a.analysis.samples, b.analysis.samples], names),
            "Neither source holds decode throughput figures.",
        ),
    }
    return (
        environment_jinja()
        .get_template("compare.html.j2")
        .render(
            title=f"tokdrift comparison: {names[0]} vs {names[1]}",
            names=names,
            sides=sides,
            rows=comparison_rows(a, b),
            figures=figures,
            version=__version__,
            generated=dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
            redacted=redactor.enabled,
        )
    )


def comparison_rows(a: Inputs, b: Inputs) -> list[Row]:
    aa, ba = a.analysis, b.analysis
    rows = [
        Row(
            "verdict", aa.verdict, ba.verdict, _change(_badness(aa.verdict), _badness(ba.verdict), lower_is_better=True)
        )
    ]

    def num(label: str, fa: float | None, fb: float | None, fmt: str = "{:.2f}", lower_is_better: bool = False) -> None:
        rows.append(
            Row(
                label,
                "" if fa is None else fmt.format(fa),
                "" if fb is None else fmt.format(fb),
                _change(fa, fb, lower_is_better),
            )
        )

    sa, sb = aa.slowdown, ba.slowdown
    num("matched throughput ratio (late / healthy)", sa.ratio if sa else None, sb.ratio if sb else None)
    num("healthy decode (tok/s)", sa.healthy_tps if sa else None, sb.healthy_tps if sb else None, "{:.1f}")
    num("late or degraded decode (tok/s)", sa.degraded_tps if sa else None, sb.degraded_tps if sb else None, "{:.1f}")
    for basis, words in BASIS_WORDS.items():
        if words.row is None:
            continue
        ma = next((m.ratio for m in aa.comparisons if m.basis == basis), None)
        mb = next((m.ratio for m in ba.comparisons if m.basis == basis), None)
        if ma is not None or mb is not None:
            num(f"matched {words.row}: late / early", ma, mb)
    pa, pb = tables.probe_lives(a.source.probes), tables.probe_lives(b.source.probes)
    if pa or pb:
        num(
            "probe decode, first quarter of first life (tok/s)",
            pa[0].first_tps if pa else None,
            pb[0].first_tps if pb else None,
            "{:.1f}",
        )
        num(
            "probe decode, last quarter of first life (tok/s)",
            pa[0].last_tps if pa else None,
            pb[0].last_tps if pb else None,
            "{:.1f}",
        )
    rows.append(
        Row(
            "onset (engine age)",
            narrative.duration(aa.onset.engine_age_s) if aa.onset else "none",
            narrative.duration(ba.onset.engine_age_s) if ba.onset else "none",
            "",
        )
    )
    rows.append(Row("trigger", narrative.trigger_text(aa) or "none", narrative.trigger_text(ba) or "none", ""))
    restart = {True: "yes", False: "no", None: "no restart"}
    rows.append(Row("recovered by restart", restart[aa.recovered_by_restart], restart[ba.recovered_by_restart], ""))
    rows.append(
        Row(
            "top suspect",
            aa.suspects[0].name if narrative.names_top_suspect(aa) else "none",
            ba.suspects[0].name if narrative.names_top_suspect(ba) else "none",
            "",
        )
    )
    rows.append(Row("checks warn / fail", _check_counts(aa), _check_counts(ba), ""))
    return rows


def _check_counts(an: Analysis) -> str:
    return f"{sum(c.status == 'warn' for c in an.checks)} / {sum(c.status == 'fail' for c in an.checks)}"


def _badness(verdict: str) -> int | None:
    badness: dict[str, int] = {Verdict.AGE: 2, Verdict.CONTEXT_ONLY: 1, Verdict.NO_DEGRADATION: 0}
    return badness.get(verdict)


def _change(fa: float | None, fb: float | None, lower_is_better: bool) -> str:
    if fa is None or fb is None or abs(fb - fa) <= SAME * max(abs(fa), abs(fb)):
        return ""
    better = fb < fa if lower_is_better else fb > fa
    return "better" if better else "worse"
