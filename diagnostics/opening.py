"""The first words a reader reads: the answer, one figure with its interval, what to do next.

Every page opens with them (the summary, the report's verdict box, `diag analyze` on the
terminal); the evidence follows for whoever wants it. What they keep to:

- about 60 words at most: the finding (one figure with its interval, said once), then one
  sentence of what to do next;
- the reader's terms (decode speed, the soaked engine, a fresh engine, the host), no check or
  basis names;
- one direction for every ratio: the soaked engine's speed over the reference's, below 1 slower
  (prefill too: its speed admitting prompts, never the time it took as a multiple);
- two engines only: the soaked engine and a fresh one (a control, or the soaked engine just
  restarted); two times: early and late;
- "up to N % slower" only where the estimate is below 1 or the interval leaves a material loss
  open; an estimate at or above 1 is "no slower", never a loss;
- which measure the figure is, why that one, and what the others read (the measures over time
  carry the host's own changes, a fresh engine beside it cancels them);
- what held the confidence back (failed probes, decode samples kept out, thin data, the checks
  that capped it) and what an operator must know whatever the verdict (failed requests, a full
  KV cache) beside the verdict, not only among the warnings;
- a command to run next that is complete where the run knows its values (its trace, its target),
  and for a short run, that a slowdown building over hours needs a soak of hours;
- times to the second, in the source's own clock: UTC for a run directory (it records Unix
  time), the log's own clock for a log (its zone unknown).
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics import rerun
from diagnostics.comparison import DECODE_MATERIAL, Comparison
from diagnostics.identity import lives
from diagnostics.intervals import LEVEL
from diagnostics.labels import Cause, Verdict
from diagnostics.result import Analysis, Check, Slowdown
from diagnostics.source import Source
from logformats import looks_like_log, parse_log
from logformats.errors import LogFormatError
from rundir import schema

# Whose speed a ratio is over, by the comparison it comes from: (after "at 0.83 of", after "slower than").
# Two engines (the soaked engine, a fresh one) and two times (early, late), nothing else.
REFERENCE = {
    "paired_control": ("a fresh engine's speed", "a fresh engine"),
    "restart": ("its own speed just after a restart", "its speed after a restart"),
    "probes": ("its own early speed on an identical request", "early in the run"),
    "bins": ("its early speed at the same batch and context", "early in the run"),
    "step_series": ("its early speed at the same batch and context", "early in the run"),
    "combined": ("its early speed, all measures together", "early in the run"),
}
# What each measure is, and why the verdict may rest on it, for the line under the opening.
MEASURE = {
    "paired_control": "identical probes of the soaked engine and a fresh one, back to back, so that a change "
    "of the host or the load cancels",
    "restart": "the soaked engine just before a restart against itself just after, at one moment, so that "
    "a change of the host cancels",
    "probes": "identical probes of the soaked engine, early against late",
    "bins": "the soaked engine's decode at the same batch and context, early against late",
    "step_series": "the soaked engine's decode steps against its early speed at the same batch and context",
    "combined": "every decode measure together, each interval widened so that all hold at once",
}
# The measures in the reader's words, for "the other measures read ...".
MEASURE_NAMES = {
    "paired_control": "beside a fresh engine",
    "restart": "across the restart",
    "probes": "own probes",
    "bins": "matched bins",
    "step_series": "step series",
}
OVER_TIME = ("probes", "bins", "step_series")  # the soaked engine against itself earlier: the host moves them too
HEADLINES = {
    Verdict.AGE: "The engine slowed down with age",
    Verdict.CONTEXT_ONLY: "Slower only as the context grew, not with engine age",
    Verdict.NO_DEGRADATION: "No slowdown with engine age",
    Verdict.INSUFFICIENT: "Cannot tell yet whether the engine slowed with age",
}
BELOW_MATERIAL = "Below what tokdrift calls engine age"
NOT_SHOWN = "Not shown to slow with age"
CONTEXT_NOT_SHOWN = "Slower as the context grew, not shown to be engine age"
NO_LOSS_MEASURED = "no slowdown measured"
HOST_DRIFT = "Slower, but the host or the load changed, not the engine"
# A confidence cap's checks in the reader's words (diagnostics.caps.DATA_CHECKS); others by name.
CAP_WORDS = {
    "engine_identity": "a restart into another engine",
    "decode_after_prefill_or_idle": "decode samples mixed with other work",
    "stalled_windows": "windows holding prefills",
    "healthy_model": "few early samples to compare with",
    "context_only_model": "few samples after the onset",
    "idle_time": "long idle stretches",
    "fresh_control": "a fresh engine as slow",
    "too_few_for_loss": "few probes",
    "probes_alone": "probes alone",
    "control_drift": "the host's speed moving",
    "matched_conditions": "few matched samples",
    "material_loss": "a loss near the bar",
    "decode_basis": "decode measures that differ",
    "host_contention": "other load on the host",
    "no_control": "no fresh engine beside it",
    "ratio_sanity": "samples that did not match",
    "decode_agreement": "measures that disagree",
    "raw_throughput": "raw speed telling another story",
}
# Checks in the reader's words, where the bare name misleads (a failed `confidence` is no doubt
# about the tool): the summary and the report say them beside the name.
CHECK_TITLES = {
    "confidence": "cause of the slowdown",
    "confidence_cap": "confidence lowered",
    "verdict_basis": "what the verdict rests on",
    "restart_slower": "restart against the run",
    "fresh_control": "a fresh engine as slow",
    "material_loss": "size of the loss",
}
# What an operator must know whatever the verdict: the service itself failed or ran out of room.
OPERATOR_CHECKS = ("kv_space", "kv_exhaustion", "dropped_requests", "preemptions", "queue_buildup")
IDENTITY_FACTS = ("version", "build", "model", "max_seq_len")  # what a URL target's manifest says of it
MAX_FLAGS = 5
NO_SLOWER = 0.995  # an interval's lower end from here up is said as no slower (it rounds to 0 %)
KEPT_OUT_SHARE = 0.5  # decode samples kept out beyond this share are said beside the verdict
THIN_CYCLES = 5  # probe cycles a side below this: the figure rests on thin data
THIN_SAMPLES = 20  # usable decode samples below this, or early samples below THIN_EARLY: thin data
THIN_EARLY = 10


logger = logging.getLogger(__name__)
_ISO = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?")


class Opening(NamedTuple):
    headline: str  # the answer in a few words
    finding: str  # one figure with its interval, in one or two sentences
    next_step: str  # one sentence: what to do next
    held_back: tuple[str, ...]  # what kept the confidence down: failed probes, samples kept out, thin data, caps
    warnings: tuple[str, ...] = ()  # what an operator must know whatever the verdict: failed requests, a full KV cache
    measured: str | None = None  # which measure the figure is, why that one, what the others read

    @property
    def paragraph(self) -> str:
        return f"{self.finding} {self.next_step}"


def opening(a: Analysis, source: Source | None = None) -> Opening:
    """The verdict's first words. `source`, where the caller has it, adds what only it holds: the
    requests that failed, a log's missing figures, the path to name in a command."""
    path = source.path if source is not None else a.source_path
    log = a.source_kind == "log"
    if a.verdict == Verdict.AGE:
        headline, finding, next_step = _age(a, path)
    elif a.verdict == Verdict.INSUFFICIENT:
        headline, finding, next_step = _undecided(a, source, log)
    else:
        headline, finding, next_step = _no_age(a, source, log)
    if a.confidence is not None and a.verdict != Verdict.INSUFFICIENT:
        headline += f" ({a.confidence} confidence)"
    return Opening(headline, finding, next_step, held_back(a, source), warnings(a, source), measured(a))


def when(a: Analysis, t: np.datetime64 | pd.Timestamp | None) -> str | None:
    """A time to the second in the source's clock: `2026-12-02 14:16:05 UTC` for a run directory
    or a scrape series (Unix time), the log's own clock without a zone for a log."""
    return stamp(t, a.source_kind)


def to_the_second(text: str) -> str:
    """ISO times in a text (a check's detail) to the second: `2026-12-02 17:05:33`, not
    `2026-12-02T17:05:33.223594189`."""
    return _ISO.sub(r"\1 \2", text)


def stamp(t: np.datetime64 | pd.Timestamp | None, source_kind: str) -> str | None:
    """`when` for a caller that has the source's kind, not its analysis."""
    if t is None or pd.isna(t):
        return None
    text = pd.Timestamp(t).floor("s").strftime("%Y-%m-%d %H:%M:%S")
    return text if source_kind == "log" else f"{text} UTC"


def ratio_words(c: Comparison, aside: str = "", why_level: bool = False) -> str:
    """`0.83 of a fresh engine's speed (90% interval 0.68-1.00)`: the soaked engine's over the
    reference's; `aside` goes inside the parentheses, after the interval. `why_level`: an interval
    wider than 90% says why (a soak that stopped at a decided look keeps its running level)."""
    of, _ = REFERENCE.get(c.basis, ("its early speed", "early in the run"))
    i = c.interval
    span = i.span() if i.bounded else "too few samples for an interval"
    if why_level and i.bounded and i.level > LEVEL + 1e-9:
        span += f", not {LEVEL:.0%}: the soak checked after every probe cycle"
    return f"{c.ratio:.2f} of {of} ({span}{aside})"


def _span_words(c: Comparison, of: str) -> str:
    """`0.48 of its speed after the restart (90% interval 0.37-0.62)`: ratio_words with its own reference."""
    span = c.interval.span() if c.interval.bounded else "too few samples for an interval"
    return f"{c.ratio:.2f} of {of} ({span})"


def check_title(name: str) -> str | None:
    """A check's name in the reader's words, where the bare name misleads."""
    return CHECK_TITLES.get(name)


def held_back(a: Analysis, source: Source | None = None) -> tuple[str, ...]:
    """What kept the confidence down, in words: probes that failed, decode samples kept out, data
    too thin for the figure, the checks that capped a high confidence. (Failed requests are the
    operator's business whatever the verdict: `warnings`.)"""
    out = []
    probes = getattr(source, "probes", None)
    if probes is not None:
        failed = _failed(probes, "probes")
        if failed:
            out.append(failed)
    thin = _thin(a, source) if a.confidence is not None else None
    if thin:
        out.append(thin)
    samples = a.samples
    if len(samples):
        kept = int((samples["excluded"] != "").sum())
        if kept == len(samples):
            out.append(f"all {kept} decode samples kept out (their windows held other work)")
        elif kept > KEPT_OUT_SHARE * len(samples):
            out.append(f"{kept} of {len(samples)} decode samples kept out (their windows held other work)")
    cap = next((c for c in a.checks if c.name == "confidence_cap"), None)
    if cap is not None and "(" in cap.detail:
        names = cap.detail.split("warn (", 1)[-1].split(");", 1)[0]
        words = [CAP_WORDS.get(n.split(" ")[0], n.split(" ")[0]) for n in names.split(", ")]
        out.append(f"confidence {a.confidence}, not high: {', '.join(dict.fromkeys(words))}")
    return tuple(out)


def warnings(a: Analysis, source: Source | None = None) -> tuple[str, ...]:
    """What an operator must know whatever the verdict, beside it: requests that failed, a KV cache
    that ran out of room, requests dropped or preempted, a queue that grew."""
    out = []
    requests = getattr(source, "requests", None)
    if requests is not None:
        failed = _failed(requests, "requests")
        if failed:
            out.append(failed)
    for c in a.checks:
        if c.status == "warn" and c.name in OPERATOR_CHECKS:
            out.append(_operator_words(a, source, c))
    return tuple(out)


def measured(a: Analysis) -> str | None:
    """`identical probes of the soaked engine and a fresh one, ...; the other measures read:
    across the restart 0.65, own probes 0.50 ...`: which measure the opening's figure is, why the
    verdict rests on it, and what the others read (those over time carry the host's change too).
    None where no other measure would make a reader wonder."""
    d = decisive(a)
    if d is None or d.basis not in MEASURE:
        return None
    parts = d.parts if d.basis == "combined" else ()
    others = [
        c
        for c in a.comparisons
        if c.basis in MEASURE_NAMES and c.basis != d.basis and c.basis not in parts and c.interval.bounded
    ]
    if not others:
        return None
    said = ", ".join(f"{MEASURE_NAMES[c.basis]} {c.ratio:.2f}" for c in others)
    out = f"{MEASURE[d.basis]}; the other measures read: {said}"
    drift = next((c for c in a.comparisons if c.basis == "control_drift"), None)
    if drift is not None and abs(drift.ratio - 1) >= 0.1 and any(c.basis in OVER_TIME for c in others):
        moved = "rose" if drift.ratio > 1 else "fell"
        out += (
            f" (those of the soaked engine over time carry the host's change too: a fresh engine's own speed "
            f"{moved} to {drift.ratio:.2f} of its first meanwhile)"
        )
    return out


def engine_name(source: Source) -> str:
    """The engine's name: what a URL target said of itself, what the source was read as, or what
    the engine log a soak kept says; `unknown` where nothing says."""
    said = str(((source.manifest.engine or {}) if source.manifest is not None else {}).get("name") or "")
    if said and said != "unknown":
        return said
    if source.engine != "unknown":
        return source.engine
    return (_run_log_identity(source.path)[0] if source.kind == "run_dir" else "") or "unknown"


def identity(a: Analysis, source: Source | None = None) -> str:
    """`llama.cpp build 1 (79e0b68), model qwen2-tiny.gguf (threads 1, n_ctx 65536); host x86_64,
    2 CPUs, no GPU; 7.2 min of serving, 51 requests`: what the source says of the engine, the host
    and the run, as it holds them (nothing guessed; `unknown` where nothing says)."""
    m = source.manifest if source is not None else None
    said = dict(m.engine or {}) if m is not None else {}
    facts = {k: str(v) for k, v in said.items() if k in IDENTITY_FACTS and v not in (None, "", "unknown")}
    first = next((life.facts for life in a.lives if life.facts), {})
    name = str(said.get("name") or "")
    name = name if name and name != "unknown" else (a.engine if a.engine != "unknown" else "unknown")
    if name == "unknown" and not first and source is not None and source.kind == "run_dir":
        logged, first = _run_log_identity(source.path)  # a soak of a URL target keeps its engine's log
        name = logged or name
    facts = {**first, **facts}
    build = facts.pop("build", None)
    version = facts.pop("version", None) or (f"build {build}" if build else None)
    model = facts.pop("model", None) or (m.model if m is not None else None)
    flags = [f"{k} {v}" for k, v in facts.items()][:MAX_FLAGS]
    if isinstance(said.get("args"), list) and said["args"]:
        flags += [" ".join(str(x) for x in said["args"])]
    engine = name + (f" {version}" if version else "") + (f", model {model}" if model else "")
    engine += f" ({', '.join(flags)})" if flags else ""
    parts = [engine]
    host = (m.host or {}) if m is not None else {}
    if host:
        cpu = host.get("cpu") or host.get("machine") or "CPU unknown"
        cpus = f", {host['num_cpus']} CPUs" if host.get("num_cpus") else ""
        parts.append(f"host {cpu}{cpus}, {host.get('gpu') or 'no GPU'}")
    if m is not None and m.elapsed_s:
        calls = f", {m.num_requests} requests" if m.num_requests is not None else ""
        parts.append(f"{_duration(m.elapsed_s)} of serving{calls}")
    elif source is not None and source.log_info is not None:
        parts.append(f"from its log ({source.log_info.num_lines:,} lines)")
    return "; ".join(parts)


def names_top_suspect(a: Analysis) -> bool:
    """Whether a page names a top suspect beside the verdict: only beside engine age. Under any
    other verdict the figures that track a slowdown are evidence below, not a cause."""
    return a.verdict == Verdict.AGE and bool(a.suspects)


def lists_suspects(a: Analysis) -> bool:
    """Whether a page lists suspects: only beside a slowdown the verdict found (engine age), or one
    it measured but could not pin on a cause. On a run where nothing slowed, a figure that tracks
    the residual tracks noise or load, not a slowdown."""
    if a.verdict == Verdict.AGE:
        return True
    d = decisive(a)
    return a.verdict == Verdict.INSUFFICIENT and d is not None and d.clears


def decisive(a: Analysis) -> Comparison | None:
    """The comparison the verdict rests on."""
    return next((c for c in a.comparisons if c.basis == a.basis), None)


def _age(a: Analysis, path: str) -> tuple[str, str, str]:
    life = "of engine busy time" if a.clock == "busy" else "of engine life"
    after = f"After {_duration(a.onset.engine_age_s)} {life}, " if a.onset is not None else "Late in the run, "
    trigger = _trigger(a)
    if a.age_basis == "prefill" and a.slowdown is not None:
        finding = (
            f"{after}it admitted prompts at {a.slowdown.ratio:.2f} of its young speed for prompts of the same "
            f"size{_span(a.slowdown)}{trigger}; decode itself held."
        )
    elif a.age_basis == "prefix_reuse" and a.prefix_reuse is not None:
        r = a.prefix_reuse
        finding = (
            f"{after}its prefix cache stopped reusing: an agent's next turn took {r.late_share:.0%} of its prompt "
            f"from cache, against {r.healthy_share:.0%} early{_span(a.slowdown)}{trigger}; decode itself held."
        )
    else:
        c, s = decisive(a), a.slowdown
        if s is None or c is None:
            finding = f"{after}decode slowed with engine age{trigger}."
        else:
            verb = "crept down" if s.shape == "gradual" else "fell"
            tps = (
                f"; {s.healthy_tps:.0f} → {s.degraded_tps:.0f} tok/s"
                if s.healthy_tps is not None and s.degraded_tps is not None and "paired_control" not in c.bases
                else ""
            )
            finding = f"{after}decode {verb} to {ratio_words(c, tps, why_level=True)}{trigger}."
        finding += " " + _restart(a)
    if a.recovered_by_restart is True:
        act = "Restart it to get the speed back, and file a bug"
    elif a.recovered_by_restart is False:
        act = "A restart will not help; file a bug"
    else:
        act = "Restart it to see whether the speed comes back, and file a bug"
    return HEADLINES[Verdict.AGE], finding.strip(), f"{act} with `diag bundle {path}`."


def _restart(a: Analysis) -> str:
    if a.recovered_by_restart is True:
        return "A restart brought it back."
    if a.recovered_by_restart is False:
        return "A restart did not bring it back."
    if any(c.basis == "restart" for c in a.comparisons):
        return "A restart did not settle whether it comes back."
    return ""


def _no_age(a: Analysis, source: Source | None, log: bool) -> tuple[str, str, str]:
    c = decisive(a)
    context = a.verdict == Verdict.CONTEXT_ONLY
    host = a.cause == Cause.HOST_DRIFT
    if c is None or not c.interval.bounded:
        return (
            HEADLINES[a.verdict],
            "Decode fell only as much as the longer context explains; no comparison at matched conditions "
            "had enough samples to put a figure on engine age.",
            _log_next(source) if log else _run_longer(a, source),
        )
    lo, est, hi = c.interval.lo, c.ratio, c.interval.hi
    material = c.material if c.unit == "tok/s" else DECODE_MATERIAL
    bar = f"the {1 - material:.0%} tokdrift calls engine age"
    _, than = REFERENCE.get(c.basis, ("", "early in the run"))
    lead = "Decode slowed as the context grew; at the same conditions the" if context else "The"
    if host:
        lead = "Decode fell, but a fresh engine beside it fell as much (the host or the load changed); net of that, the"
    said = f"{lead} soaked engine ran at {ratio_words(c, why_level=True)}"
    if lo > material:  # decided: no material loss
        if est >= 1.0:
            finding = f"{said}: no slower."
            plain = (
                HEADLINES[a.verdict]
                if lo >= NO_SLOWER
                else _cap(("slower as the context grew, " if context else "") + NO_LOSS_MEASURED)
            )
        else:
            finding = f"{said}: up to {1 - lo:.0%} slower than {than}, below {bar}."
            small = NO_LOSS_MEASURED if hi >= 1.0 else "slightly slower, " + BELOW_MATERIAL.lower()
            plain = _cap(("slower as the context grew, " if context else "") + small)
        return HOST_DRIFT if host else plain, finding, _nothing_to_do(a, source, log)
    if est >= 1.0:
        finding = f"{said}: no slower on this estimate, but the interval leaves a loss of up to {1 - lo:.0%} open"
    else:
        finding = f"{said}: possibly up to {1 - lo:.0%} slower"
    seconds = rerun.run_seconds(source)
    finding += ", more than this run can settle." if seconds else ", more than the data can settle."
    plain = CONTEXT_NOT_SHOWN if context else NOT_SHOWN
    return HOST_DRIFT if host else plain, finding, _log_next(source) if log else _run_longer(a, source)


def _nothing_to_do(a: Analysis, source: Source | None, log: bool) -> str:
    """A decided no: nothing to restart or file for age (the warnings beside it aside); a short run
    says that hours need hours."""
    nothing = "Nothing to restart or file"
    if warnings(a, source):
        nothing += " for engine age (but see the warnings below)"
    if not log and rerun.is_short(source):
        return (
            f"{nothing}. This run lasted {_duration(rerun.run_seconds(source))}; a slowdown that builds over hours "
            f"needs a soak of hours: `{rerun.soak_command(source, rerun.LONG_SOAK)}`."
        )
    return f"{nothing}; a longer soak would catch a slower drift."


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _undecided(a: Analysis, source: Source | None, log: bool) -> tuple[str, str, str]:
    failed = [c for c in a.checks if c.status == "fail"]
    names = [c.name for c in failed]
    comps = {c.basis: c for c in a.comparisons}
    d = decisive(a)
    fig = ratio_words(d) if d is not None else None
    longer = _run_longer(a, source) if not log else _log_next(source)
    headline = HEADLINES[Verdict.INSUFFICIENT]
    if "control_youth" in names:
        return (
            headline,
            "The fresh control engine slowed with its own age, so it is no yardstick for the soaked one.",
            "Restart the control more often and take a baseline before the traffic: "
            f"`{rerun.soak_command(source, '--control-restart-after 8', '--baseline 8', '--until-decided')}`.",
        )
    if "ratio_sanity" in names:
        return (
            headline,
            "The matching failed: samples of different work were compared, so no figure here measures the engine.",
            f"Soak it with identical probes: `{rerun.soak_command(source, '--until-decided')}`.",
        )
    if "restart_slower" in names and "restart" in comps:
        return (
            headline,
            f"A restart made it faster: it had run at {_span_words(comps['restart'], 'its speed after the restart')}. "
            f"But it never slowed during the run, so this is not engine age: it was slow from the start, or the "
            f"host changed at the restart.",
            f"Soak again with a baseline first{_lasted(source)}: "
            f"`{rerun.soak_command(source, '--baseline 8', '--until-decided')}`.",
        )
    if "paired_slower" in names or "decode_agreement" in names:
        p = comps.get("paired_control", d)
        if p is not None:
            finding = f"The soaked engine ran at {ratio_words(p)}: slower, but whether by the 10 % tokdrift calls engine age is not settled."
            if "decode_agreement" in names:
                finding = (
                    f"The soaked engine ran at {ratio_words(p)}, but its own comparisons over time saw no loss: "
                    f"the measures disagree."
                )
            return headline, finding + _host_moved(a), longer
    if "prefill_drift" in names:
        return (
            headline,
            "Prompts took longer to admit, but the host's own speed moved too much to say whether the host or "
            "the engine did it.",
            longer,
        )
    if "data_span" in names:
        span = next((c.detail for c in failed if c.name == "data_span"), "")
        seconds = span.split(" cover ", 1)[-1].split(" of engine time", 1)[0] if " cover " in span else "too little"
        return headline, f"The usable decode covers {seconds} of engine time, too short to rule engine age out.", longer
    if "confidence" in names and fig is not None:
        detail = next(c.detail for c in failed if c.name == "confidence")
        if detail.startswith("a loss without a cause"):
            return (
                headline,
                f"Decode fell to {fig}, but with no fresh engine to compare with{_why_no_fresh(a)}, it cannot "
                f"tell longer context from engine age.",
                longer,
            )
        return headline, f"Decode ran at {fig}: too noisy to tell a 10 % loss from none.", longer
    if "data" in names or d is None:
        return headline, "No comparison at matched conditions has enough decode samples to put a figure on it.", longer
    return headline, f"Decode ran at {fig}, and the data cannot yet say whether that is engine age.", longer


def _host_moved(a: Analysis) -> str:
    """The fresh control's own change over the run, where it moved more than 10 %: the host was not steady."""
    drift = next((c for c in a.comparisons if c.basis == "control_drift"), None)
    if drift is None or abs(drift.ratio - 1) < 0.1:
        return ""
    return f" The fresh engine's own speed changed {drift.ratio - 1:+.0%} meanwhile: the host was not steady."


def _run_longer(a: Analysis, source: Source | None) -> str:
    quieter = any(c.name in ("host_contention", "control_drift") and c.status == "warn" for c in a.checks)
    where = " on a quieter host" if quieter else ""
    return f"Run longer{where}{_lasted(source)}: `{rerun.soak_command(source, '--until-decided')}`."


def _lasted(source: Source | None) -> str:
    """` (this run lasted 2.6 min)` where the run was short, for a next step that asks for a longer one."""
    return f" (this run lasted {_duration(rerun.run_seconds(source))})" if rerun.is_short(source) else ""


def _log_next(source: Source | None) -> str:
    """What would let a log tell: the options that print what it lacks, or a soak with probes."""
    info = getattr(source, "log_info", None)
    options = [m.option for m in info.missing if m.option.startswith("`")] if info is not None else []
    restart = f", or restart it with {' '.join(options)} so its log can tell" if options else ""
    return f"Soak it with probes (`{rerun.soak_command(source, '--until-decided')}`){restart}."


def _why_no_fresh(a: Analysis) -> str:
    """Why a source holds no fresh engine to compare with: its restarts ran another engine, or it has none."""
    if any(c.name == "engine_identity" and c.status == "warn" for c in a.checks):
        return " (its restarts ran another engine)"
    return " (no restart in the data, no control beside it)" if len(a.lives) <= 1 else ""


def _failed(table: pd.DataFrame, what: str) -> str | None:
    """`4 of 104 requests failed (3 error, 1 refused)`."""
    if table.empty or "status" not in table:
        return None
    status = table["status"].fillna("ok").astype(str)
    failed = status[status != "ok"]
    if not len(failed):
        return None
    kinds = ", ".join(f"{n} {k}" for k, n in failed.value_counts().items())
    return f"{len(failed)} of {len(table)} {what} failed ({kinds})"


def _thin(a: Analysis, source: Source | None) -> str | None:
    """`thin data: 5 usable decode samples in an 11-line log, 2 of them early`: where the figure
    rests on so little that its confidence says more than the data."""
    d = decisive(a)
    if d is None:
        return None
    if d.basis in ("paired_control", "probes"):
        if min(d.num_early, d.num_late) >= THIN_CYCLES:
            return None
        return f"thin data: the figure rests on {d.num_early} probe cycles early and {d.num_late} late"
    usable = int((a.samples["excluded"] == "").sum()) if len(a.samples) else 0
    early = a.model.num_points if a.model is not None else None
    if usable >= THIN_SAMPLES and (early is None or early >= THIN_EARLY):
        return None
    info = getattr(source, "log_info", None)
    where = f" in a log of {info.num_lines:,} lines" if info is not None else ""
    return f"thin data: {usable} usable decode samples{where}" + (f", {early} of them early" if early else "")


def _operator_words(a: Analysis, source: Source | None, c: Check) -> str:
    """An operator check's warning in a line: the KV cache's failures from the events, where the
    source holds them; another check's detail as it is (to the second)."""
    events = getattr(source, "events", None)
    if c.name == "kv_space" and events is not None and not events.empty:
        hits = events[events["kind"].isin(("kv_no_space", "kv_full"))]
        failed, retried = int(hits["kind"].eq("kv_full").sum()), int(hits["kind"].eq("kv_no_space").sum())
        first, last = when(a, hits["t"].min()), when(a, hits["t"].max())
        gave_up = f"{_times(failed)} a batch found no room even at its smallest and its requests failed; "
        retry = f"{_times(retried)} a batch was retried smaller" if retried else ""
        said = (gave_up if failed else "") + retry
        return f"the KV cache ran out of room: {said.rstrip('; ')} ({first} to {last})"
    if c.name == "kv_exhaustion":
        return "the KV cache filled up: " + c.detail.replace("KV cache usage peaked", "usage peaked")
    if c.name == "dropped_requests":
        return "requests dropped: " + c.detail
    return to_the_second(c.detail)


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n:,} times")


@functools.lru_cache(maxsize=8)
def _run_log_identity(path: str) -> tuple[str, dict[str, str]]:
    """The engine's name and start-up facts from the log a soak of a URL target kept in the run
    directory (`engine.log`), where the manifest says nothing of it: ('', {}) without one."""
    log = Path(path) / schema.ENGINE_LOG
    if not log.is_file() or not looks_like_log(log):
        return "", {}
    try:
        parsed = parse_log(log)
    except (LogFormatError, OSError, ValueError):  # an unreadable log leaves the identity as the manifest says it
        logger.debug("could not read %s for the engine's identity", log, exc_info=True)
        return "", {}
    first = next((life.facts for life in lives(parsed.steps, parsed.events) if life.facts), {})
    return parsed.info.format.split("-")[0], dict(first)


def _trigger(a: Analysis) -> str:
    """`, right after a 2,973-token prompt`: what came just before the onset, briefly."""
    if a.onset is None or a.onset.trigger is None:
        return ""
    tr = a.onset.trigger
    if tr.kind in ("prefill_append", "prefill") and tr.new_tokens is not None:
        if tr.cached_tokens:
            return f", right after {tr.new_tokens:,} tokens were appended to a {tr.cached_tokens:,}-token cached prompt"
        return f", right after a {tr.new_tokens:,}-token prompt"
    if tr.kind == "fault_on":
        fault = tr.detail.split("fault=", 1)[-1].split(",")[0].strip() if tr.detail else ""
        return f", when the {fault} fault was switched on" if fault else ", when a fault was switched on"
    return f", right after a {tr.kind.replace('_', ' ')}"


def _span(s: Slowdown | None) -> str:
    return f" ({s.interval_text().strip()[1:-1]})" if s is not None and s.interval_text() else ""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "an unknown time"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
