"""The first words a reader reads: the answer, one figure with its interval, what to do next.

Every page opens with them (the summary, the report's verdict box, `diag analyze` on the
terminal); the evidence follows for whoever wants it. What they keep to:

- about 60 words at most: the finding (one figure with its interval, said once), then one
  sentence of what to do next;
- the reader's terms (decode speed, the soaked engine, a fresh engine, the host), no check or
  basis names;
- one direction for every ratio: the soaked engine's speed over the reference's, below 1 slower
  (prefill too: its speed admitting prompts, never the time it took as a multiple);
- a loss the data leave possible but below what tokdrift calls engine age is said as "up to
  N % slower", never as no engine age;
- what held the confidence back (failed requests, decode samples kept out, the checks that
  capped it) beside the verdict, not only among the warnings;
- times to the second, in the source's own clock: UTC for a run directory (it records Unix
  time), the log's own clock for a log (its zone unknown).
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from diagnostics.comparison import DECODE_MATERIAL, Comparison
from diagnostics.labels import Cause, Verdict
from diagnostics.result import Analysis, Slowdown
from diagnostics.source import Source

# Whose speed a ratio is over, by the comparison it comes from: (after "at 0.83 of", after "slower than").
REFERENCE = {
    "paired_control": ("a fresh engine's speed", "a fresh engine"),
    "restart": ("the restarted engine's speed", "the restarted engine"),
    "probes": ("its own early speed on an identical request", "early in the run"),
    "bins": ("its early speed at the same batch and context", "early in the run"),
    "step_series": ("its healthy speed at the same batch and context", "while it was healthy"),
    "combined": ("its early speed, all comparisons together", "early in the run"),
}
HEADLINES = {
    Verdict.AGE: "The engine slowed down with age",
    Verdict.CONTEXT_ONLY: "Slower only as the context grew, not with engine age",
    Verdict.NO_DEGRADATION: "No slowdown with engine age",
    Verdict.INSUFFICIENT: "Cannot tell yet whether the engine slowed with age",
}
BELOW_MATERIAL = "Below what tokdrift calls engine age"
NOT_SHOWN = "Not shown to slow with age"
NO_LOSS_MEASURED = "no slowdown measured"
HOST_DRIFT = "Slower, but the host or the load changed, not the engine"
# A confidence cap's checks in the reader's words (diagnostics.caps.DATA_CHECKS); others by name.
CAP_WORDS = {
    "engine_identity": "a restart into another engine",
    "decode_after_prefill_or_idle": "decode samples mixed with other work",
    "stalled_windows": "windows holding prefills",
    "healthy_model": "few healthy samples to compare with",
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
IDENTITY_FACTS = ("version", "build", "model", "max_seq_len")  # what a URL target's manifest says of it
MAX_FLAGS = 5
NO_SLOWER = 0.995  # an interval's lower end from here up is said as no slower (it rounds to 0 %)
KEPT_OUT_SHARE = 0.5  # decode samples kept out beyond this share are said beside the verdict
SOAK_UNTIL_DECIDED = "`soak run --target URL --until-decided`"


_ISO = re.compile(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?")


class Opening(NamedTuple):
    headline: str  # the answer in a few words
    finding: str  # one figure with its interval, in one or two sentences
    next_step: str  # one sentence: what to do next
    held_back: tuple[str, ...]  # what kept the confidence down: failed requests, samples kept out, capped checks

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
        headline, finding, next_step = _no_age(a, log)
    if a.confidence is not None and a.verdict != Verdict.INSUFFICIENT:
        headline += f" ({a.confidence} confidence)"
    return Opening(headline, finding, next_step, held_back(a, source))


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


def ratio_words(c: Comparison, aside: str = "") -> str:
    """`0.83 of a fresh engine's speed (90% interval 0.68-1.00)`: the soaked engine's over the
    reference's; `aside` goes inside the parentheses, after the interval."""
    of, _ = REFERENCE.get(c.basis, ("its early speed", "early in the run"))
    i = c.interval
    span = i.span() if i.bounded else "too few samples for an interval"
    return f"{c.ratio:.2f} of {of} ({span}{aside})"


def held_back(a: Analysis, source: Source | None = None) -> tuple[str, ...]:
    """What kept the confidence down, in words: requests and probes that failed, decode samples
    kept out, the checks that capped a high confidence."""
    out = []
    if source is not None:
        for table, what in ((source.requests, "requests"), (source.probes, "probes")):
            if table.empty or "status" not in table:
                continue
            status = table["status"].fillna("ok").astype(str)
            failed = status[status != "ok"]
            if len(failed):
                kinds = ", ".join(f"{n} {k}" for k, n in failed.value_counts().items())
                out.append(f"{len(failed)} of {len(table)} {what} failed ({kinds})")
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


def identity(a: Analysis, source: Source | None = None) -> str:
    """`llama.cpp build 1 (79e0b68), model qwen2-tiny.gguf (threads 1, n_ctx 65536); host x86_64,
    2 CPUs, no GPU; 7.2 min of serving, 51 requests`: what the source says of the engine, the host
    and the run, as it holds them (nothing guessed; `unknown` where nothing says)."""
    m = source.manifest if source is not None else None
    said = dict(m.engine or {}) if m is not None else {}
    facts = {k: str(v) for k, v in said.items() if k in IDENTITY_FACTS and v not in (None, "", "unknown")}
    first = next((life.facts for life in a.lives if life.facts), {})
    facts = {**first, **facts}
    name = str(said.get("name") or "")
    name = name if name and name != "unknown" else (a.engine if a.engine != "unknown" else "unknown")
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
            finding = f"{after}decode {verb} to {ratio_words(c, tps)}{trigger}."
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


def _no_age(a: Analysis, log: bool) -> tuple[str, str, str]:
    c = decisive(a)
    context = a.verdict == Verdict.CONTEXT_ONLY
    if c is None or not c.interval.bounded:
        return (
            HEADLINES[a.verdict],
            "Decode fell only as much as the longer context explains; no comparison at matched conditions "
            "had enough samples to put a figure on engine age.",
            f"Run longer, or soak it with probes: {SOAK_UNTIL_DECIDED}." if log else _run_longer(a),
        )
    lo, hi = c.interval.lo, c.interval.hi
    material = c.material if c.unit == "tok/s" else DECODE_MATERIAL
    bar = f"the {1 - material:.0%} tokdrift calls engine age"
    _, than = REFERENCE.get(c.basis, ("", "early in the run"))
    matched = "" if c.basis in ("bins", "step_series") else "at matched conditions "
    lead = f"Decode fell as the context grew, but {matched}the" if context else "The"
    if a.cause == Cause.HOST_DRIFT:
        lead = "Decode fell, but a fresh engine beside it fell as much (the host or the load changed); net of that, the"
    said = f"{lead} soaked engine ran at {ratio_words(c)}"
    grew = "Slower as the context grew, " if context else ""
    if lo >= NO_SLOWER:
        headline = HOST_DRIFT if a.cause == Cause.HOST_DRIFT else HEADLINES[a.verdict]
        return headline, f"{said}: no slower.", "Nothing to restart or file; a longer soak would catch a slower drift."
    if lo > material:
        # No loss measured (the interval reaches 1) reads as such; a measured one as slightly slower.
        small = NO_LOSS_MEASURED if hi >= 1.0 else "slightly slower, " + BELOW_MATERIAL.lower()
        headline = HOST_DRIFT if a.cause == Cause.HOST_DRIFT else _cap(grew + small)
        finding = f"{said}: up to {1 - lo:.0%} slower than {than}, below {bar}."
        return headline, finding, "Nothing to restart or file; run longer to settle a loss this small."
    finding = f"{said}: up to {1 - lo:.0%} slower than {than}, not shown to reach {bar}."
    headline = HOST_DRIFT if a.cause == Cause.HOST_DRIFT else _cap(grew + NOT_SHOWN.lower())
    return headline, finding, _run_longer(a) if not log else f"Run longer to settle it: {SOAK_UNTIL_DECIDED}."


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _undecided(a: Analysis, source: Source | None, log: bool) -> tuple[str, str, str]:
    failed = [c for c in a.checks if c.status == "fail"]
    names = [c.name for c in failed]
    comps = {c.basis: c for c in a.comparisons}
    d = decisive(a)
    fig = ratio_words(d) if d is not None else None
    longer = _run_longer(a) if not log else _log_next(source)
    headline = HEADLINES[Verdict.INSUFFICIENT]
    if "control_youth" in names:
        return (
            headline,
            "The fresh control engine slowed with its own age, so it is no yardstick for the soaked one.",
            "Restart the control more often (`--control-restart-after`) and take a baseline before the "
            "traffic (`--baseline 8`).",
        )
    if "ratio_sanity" in names:
        return (
            headline,
            "The matching failed: samples of different work were compared, so no figure here measures the engine.",
            f"Soak it with identical probes: {SOAK_UNTIL_DECIDED}.",
        )
    if "restart_slower" in names and "restart" in comps:
        return (
            headline,
            f"After a restart it ran faster: the aged engine had run at {ratio_words(comps['restart'])}. But the "
            f"run saw no loss within its first life, so the slowdown may predate its healthy baseline.",
            "Soak again with a baseline before the traffic: `soak run … --baseline 8`.",
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
                f"Decode fell to {fig}, but the data cannot tell whether longer context or engine age slowed it.",
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


def _run_longer(a: Analysis) -> str:
    quieter = any(c.name in ("host_contention", "control_drift") and c.status == "warn" for c in a.checks)
    where = " on a quieter host" if quieter else ""
    return f"Run longer{where}: `soak run … --until-decided`."


def _log_next(source: Source | None) -> str:
    """What would let a log tell: the options that print what it lacks, or a soak with probes."""
    info = source.log_info if source is not None else None
    options = [m.option for m in info.missing if m.option.startswith("`")] if info is not None else []
    restart = f", or restart the engine with {' '.join(options)} so its log can tell" if options else ""
    return f"Soak the engine with probes ({SOAK_UNTIL_DECIDED}){restart}."


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
