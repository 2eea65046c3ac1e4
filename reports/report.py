"""`diag report`: one self-contained HTML page (figures as data URIs, styles inline, no scripts).

Everything taken from the inputs reaches the page through jinja2 with autoescaping on, so a
log line holding `<script>` shows as text.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any, NamedTuple

import jinja2
import markupsafe

from diagnostics.evidence import suspects as suspects_mod
from diagnostics.evidence.decode import MATERIAL
from diagnostics.result import iso
from diagnostics.words.details import engine_name
from ground import __version__
from reports import narrative, plots, tables
from reports.environment import environment
from reports.inputs import Inputs, model_life_samples, restarts
from reports.profiles import compare as compare_profiles
from reports.profiles import fmt_share
from reports.redact import Redactor

logger = logging.getLogger(__name__)

MAX_SUSPECT_PLOTS = 6
_TICKED = re.compile(r"`([^`]+)`")

# The header's word for what was read: a run directory is a soak's.
SOURCE_SAID = {"run_dir": "soak", "log": "engine log", "prometheus": "metrics scrapes"}


class Figure(NamedTuple):
    uri: str | None  # PNG data URI, None when there is nothing to draw
    empty: str  # what the page says instead


def environment_jinja() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["share"] = fmt_share
    env.filters["num"] = lambda x, d=1: "" if x is None else f"{x:,.{d}f}"
    env.filters["ticks"] = ticks
    return env


def ticks(text: str) -> markupsafe.Markup:
    """A line of the opening as HTML: escaped, and what it says between backticks (a command, a
    figure's name) as code, as the summary's Markdown shows it."""
    escaped = str(markupsafe.escape(text))
    return markupsafe.Markup(_TICKED.sub(r"<code>\1</code>", escaped))


def render_report(inputs: Inputs, redactor: Redactor | None = None) -> str:
    redactor = redactor if redactor is not None else Redactor()
    redactor.anchor_to(inputs.source.path, inputs.command)
    return environment_jinja().get_template("report.html.j2").render(**report_context(inputs, redactor))


def report_context(inputs: Inputs, redactor: Redactor) -> dict[str, Any]:
    source, a = inputs.source, inputs.analysis
    samples = a.samples
    onset_t = a.onset.t if a.onset is not None else None
    trigger_t = a.onset.trigger.t if a.onset is not None and a.onset.trigger is not None else None
    starts = restarts(source)
    life_rows = model_life_samples(a)

    figures = {
        "throughput_time": Figure(
            plots.throughput_over_time(
                samples, onset_t, trigger_t, starts, a.model.t_end if a.model is not None else None
            ),
            "No decode throughput figures in this source.",
        ),
        "throughput_context": Figure(
            plots.throughput_vs_context(samples, a.model),
            "No decode sample carries a context figure (#token or token usage), "
            "so throughput cannot be set against context.",
        ),
        "probes": Figure(
            plots.probes_over_age(source.probes),
            "No probes in this source: a plain engine log has none; a soak run records an "
            "identical probe request at intervals.",
        ),
        "residuals": Figure(
            plots.residuals(samples, life_rows, a.changepoints.segments if a.changepoints else (), MATERIAL),
            "No residuals: the healthy model could not be fitted (see the checks).",
        ),
        "prefills": Figure(
            plots.prefills(source.steps, trigger_t), "No prefill lines with token counts in this source."
        ),
    }
    first = narrative.opening(a, source)
    suspects = []
    for i, s in enumerate(a.suspects if narrative.lists_suspects(a) else ()):
        uri = None
        if i < MAX_SUSPECT_PLOTS:
            uri = plots.suspect(tables.suspect_series(source, s.name), s.name, samples, onset_t, starts)
        suspects.append(
            {"name": s.name, "score": s.score, "evidence": s.evidence, "short": suspects_mod.short(s), "uri": uri}
        )

    log_path, log = inputs.engine_log, []
    line = tables.trigger_line(inputs)
    if log_path is not None and line is not None:
        log = [ln._replace(text=redactor.text(ln.text)) for ln in tables.log_lines(log_path, line)]
    event_rows, more_events = tables.events(source)
    event_rows = [e._replace(detail=redactor.fields(e.detail)) for e in event_rows]
    profiles = None
    if inputs.profiles:
        when = iso(onset_t)
        stamp = None if when is None else dt.datetime.fromisoformat(when).strftime("%Y%m%dT%H%M%S")
        profiles = compare_profiles(inputs.profiles, stamp)
        if profiles is not None:
            profiles = profiles._replace(rows=[r._replace(frame=redactor.text(r.frame)) for r in profiles.rows])

    return {
        "title": f"tokdrift report: {redactor.text(inputs.name)}",
        "name": redactor.text(inputs.name),
        "version": __version__,
        "generated": dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "a": a,
        "engine": redactor.text(engine_name(source)),
        "source_said": SOURCE_SAID.get(a.source_kind, a.source_kind),
        "onset_iso": narrative.onset_when(a) if a.onset is not None else None,
        "first": _redacted(first, redactor),
        "suspects_note": narrative.suspects_note(a),
        "suspects_order": suspects_mod.order_note(a.suspects) if suspects else None,
        "account": redactor.text(narrative.paragraph(a)),
        "no_suspects": narrative.no_suspects_text(a),
        "key_numbers": [k._replace(value=redactor.text(k.value)) for k in narrative.key_numbers(a)],
        "figures": figures,
        "no_context": int(((samples["excluded"] == "") & samples["context"].isna()).sum()) if len(samples) else 0,
        "matched": [m._replace(detail=redactor.text(narrative.to_the_second(m.detail))) for m in a.comparisons],
        "bands": tables.matched_bands(a),
        "probe_lives": tables.probe_lives(source.probes),
        "suspects": suspects,
        "checks": [
            {
                "name": c.name,
                "title": narrative.check_title(c.name),
                "note": narrative.check_note(a, c),
                "status": c.status,
                "shown": narrative.status_shown(a, c),
                "detail": redactor.text(narrative.to_the_second(c.detail)),
            }
            for c in a.checks
        ],
        "events": event_rows,
        "more_events": more_events,
        "log": log,
        "log_name": redactor.text(log_path.name) if log_path is not None else None,
        "env": environment(source, redactor, a),
        "has_profiles": bool(inputs.profiles),
        "profiles": profiles,
        "redacted": redactor.enabled,
    }


def _redacted(first: narrative.Opening, redactor: Redactor) -> narrative.Opening:
    """The opening with every text from the inputs redacted (its commands name the run's paths)."""
    return first._replace(
        grounds=redactor.text(first.grounds) if first.grounds else None,
        size=redactor.text(first.size) if first.size else None,
        action=redactor.text(first.action),
        also=tuple(redactor.text(x) for x in first.also),
        why=redactor.text(first.why),
        details=tuple(d._replace(text=redactor.text(d.text)) for d in first.details),
    )
