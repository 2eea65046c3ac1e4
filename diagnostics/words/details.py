"""What sits below the opening's details break: the figure and the other measures, what else held
the confidence back, the engine and the host, and what each warning means for the verdict.

The first three lines (diagnostics.words.opening) say the answer, what to do and why; a reader who wants
to know how the figure was made, what the other measures read or why a check warned reads on
here. Every line is in the reader's words too, but may name a measure or a check.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import NamedTuple

import pandas as pd

from diagnostics.decision import caps
from diagnostics.evidence import suspects as suspects_mod
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.intervals import LEVEL, level_text
from diagnostics.labels import Basis, CheckStatus, Verdict
from diagnostics.result import Analysis, Check
from diagnostics.source.identity import lives
from diagnostics.source.source import Source
from diagnostics.words.said import duration, ratio_change
from logformats import looks_like_log, parse_log
from logformats.errors import LogFormatError
from rundir import schema

MOVED_A_LOT = 2.0  # a suspect whose medians moved this many times over is said beside an undecided verdict
# What each measure is, and why the verdict may rest on it: in a first-time reader's words, for the
# opening's "How measured" line says it above the break (a probe is a test request there).
MEASURE = {
    Basis.PAIRED_CONTROL: "identical test requests to the engine and to a fresh copy run alongside, back to back, "
    "so that a change of the host or the load cancels",
    Basis.RESTART: "the engine just before a restart against itself just after, at one moment, so that "
    "a change of the host cancels",
    Basis.PROBES: "identical test requests to the engine, early against late",
    Basis.BINS: "the engine's decode speed early against late, at the same batch size and context length",
    Basis.STEP_SERIES: "the engine's decode speed, step by step, against its early speed at the same batch "
    "size and context length",
}
# The measures in the reader's words, for "other measures (less direct): ..." and a joined figure's parts.
MEASURE_NAMES = {
    Basis.PAIRED_CONTROL: "beside a fresh copy",
    Basis.RESTART: "across the restart",
    Basis.PROBES: "its own test requests",
    Basis.BINS: "at the same batch size and context length",
    Basis.STEP_SERIES: "step by step against its early speed",
}
PART_WORDS = {
    Basis.PAIRED_CONTROL: "test requests beside a fresh copy run alongside",
    Basis.RESTART: "the restart",
    Basis.PROBES: "its own test requests",
    Basis.BINS: "its speed at the same batch size and context length",
    Basis.STEP_SERIES: "its speed step by step against its early speed",
}
# The soaked engine against itself earlier: the host moves them too.
OVER_TIME = (Basis.PROBES, Basis.BINS, Basis.STEP_SERIES)
# Why the verdict's figure is trusted over measures that read otherwise (more than DISAGREE apart),
# by the design of the measure it is: one short clause after "the figure is trusted over them:".
TRUSTED = {
    Basis.PAIRED_CONTROL: "a fresh copy probed at the same moments cancels a change of the host, which the others carry",
    Basis.RESTART: "either side of a restart, minutes apart, a change of the host over the run cancels",
    Basis.PROBES: "identical requests compare the same work, early and late",
    Basis.BINS: "it compares only work at the same batch size and context length, early and late",
    Basis.STEP_SERIES: "it compares the latest stretch with the engine's early speed at the same batch size and "
    "context length",
    Basis.COMBINED: "it joins the measures narrow enough to count; the others were too wide, or read the engine "
    "much faster, which compares unlike work",
}
DISAGREE = 1 / 0.9  # two measures further apart than a material loss (10 %) read otherwise
# A confidence cap's checks (diagnostics.decision.caps.DATA_CHECKS) as the reason the confidence is not
# high, a clause after "because"; the most concrete first (CAP_ORDER).
CAP_REASONS = {
    "engine_identity": "a restart brought up another engine",
    "decode_after_prefill_or_idle": "many measurements were mixed with other work",
    "stalled_windows": "some measurements held prompt processing",
    "context_only_model": "few measurements came after the slowdown began",
    "idle_time": "the engine sat idle for long stretches",
    "fresh_control": "a fresh engine was about as slow",
    "too_few_for_loss": "there were few test requests",
    "probes_alone": "only the test requests measured it",
    "control_drift": "the host's own speed moved",
    "matched_conditions": "few samples matched",
    "material_loss": "the loss is near the 10% bar",
    "decode_basis": "the measures of decode speed differ",
    "host_contention": "other load on the host rose",
    "no_control": "no fresh engine ran beside it",
    "ratio_sanity": "some samples that were compared did not match",
    "decode_agreement": "the other measures disagree with it",
    "raw_throughput": "raw decode speed tells another story than the speed at the same conditions",
}
CAP_ORDER = (
    "healthy_model",
    "context_only_model",
    "too_few_for_loss",
    "matched_conditions",
    "engine_identity",
    "ratio_sanity",
    "decode_after_prefill_or_idle",
    "stalled_windows",
    "idle_time",
    "host_contention",
    "control_drift",
    "fresh_control",
    "no_control",
    "decode_agreement",
    "decode_basis",
    "material_loss",
    "probes_alone",
    "raw_throughput",
)
FEW_EARLY = 8  # the healthy_model check warns below this many early samples (diagnostics.evidence.decode)
# Checks in the reader's words, where the bare name misleads (a failed `confidence` is no doubt
# about the tool): the summary and the report say them beside the name.
CHECK_TITLES = {
    "confidence": "cause of the slowdown",
    "confidence_cap": "confidence lowered",
    caps.THIN: "too few measurements",
    "verdict_basis": "what the verdict rests on",
    "restart_slower": "restart against the run",
    "fresh_control": "a fresh engine as slow",
    "material_loss": "size of the loss",
    "control_youth": "the fresh engine's own age",
    "state_slot_exhaustion": "state slots full",
    "client_engine_agreement": "client and engine timings",
}
NO_CHANGE = "does not change the verdict"
NOT_MET = "not met"  # a failed check shown under a verdict that cannot tell: why it did not decide
IDENTITY_FACTS = ("version", "build", "model", "max_seq_len")  # what a URL target's manifest says of it
MAX_FLAGS = 5
HOST_MOVED = 0.1  # a fresh control's own speed moved this much over the run: the host was not steady
KEPT_OUT_SHARE = 0.5  # decode samples kept out beyond this share are said among what held it back
THIN_CYCLES = 5  # probe cycles a side below this: the figure rests on thin data
THIN_SAMPLES = 20  # usable decode samples below this, or early samples below THIN_EARLY: thin data
THIN_EARLY = 10

logger = logging.getLogger(__name__)


class Detail(NamedTuple):
    label: str  # `the figure`, `engine`: what the line is
    text: str


def decisive(a: Analysis) -> Comparison | None:
    """The comparison the verdict rests on."""
    return next((c for c in a.comparisons if c.basis == a.basis), None)


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


def grew(a: Analysis) -> str | None:
    """`output_buffer_bytes` was 1.1 KB where decode slowed least and 71 MB where it slowed most`: the
    top listed suspect, where it moved MOVED_A_LOT times over (what sets two can't-tell reports apart)."""
    top = a.suspects[0] if a.suspects and lists_suspects(a) else None
    m = suspects_mod.moved(top) if top is not None else None
    return suspects_mod.plainly(top) if top is not None and m is not None and m.factor >= MOVED_A_LOT else None


def measure(c: Comparison) -> str | None:
    """What a comparison measures, in words; a joined one by its parts."""
    if c.basis == Basis.COMBINED:
        parts = [PART_WORDS[p] for p in c.parts if p in PART_WORDS]
        together = "every measure of decode speed together"
        return f"{together}: {_and(parts)}" if parts else together
    return MEASURE.get(c.basis)


def others(a: Analysis) -> str | None:
    """`beside a fresh engine 1.09x (9% faster), its own test requests 1.58x (58% faster) ...`: what
    the measures the verdict does not rest on read, in line one's form, and where the host moved, that
    those over time carry it. None where there is no other measure to wonder about."""
    d = decisive(a)
    if d is None:
        return None
    parts = d.parts if d.basis == Basis.COMBINED else ()
    rest = [
        c
        for c in a.comparisons
        if c.basis in MEASURE_NAMES and c.basis != d.basis and c.basis not in parts and c.interval.bounded
    ]
    if not rest:
        return None
    out = ", ".join(f"{MEASURE_NAMES[c.basis]} {ratio_change(c.ratio)}" for c in rest)
    drift = host_moved(a)
    if drift is not None and any(c.basis in OVER_TIME for c in rest):
        out += (
            f"; those of the engine over time carry the host's change too: the fresh copy's own speed "
            f"{'rose' if drift.ratio > 1 else 'fell'} to {drift.ratio:.2f}x its first meanwhile"
        )
    # Where the verdict decided on its figure: an undecided one says in its line three why the
    # measures that read otherwise leave it open.
    if a.verdict != Verdict.INSUFFICIENT and d.basis in TRUSTED and any(_apart(c, d) for c in rest):
        out += f"; the figure is trusted over them: {TRUSTED[d.basis]}"
    return out


def _apart(c: Comparison, d: Comparison) -> bool:
    """Whether two measures read otherwise: their estimates more than a material loss apart."""
    return c.ratio > 0 and d.ratio > 0 and max(c.ratio / d.ratio, d.ratio / c.ratio) > DISAGREE


def figure(a: Analysis, said: bool) -> list[Detail]:
    """The figure's lines below the break: which measure it is (unless the opening `said` it), how a
    joined one is joined, and why its interval is wider than the others' where it is. What the other
    measures read comes last (`others`): a fourth reader took it, right under the opening, for a
    second answer."""
    d = decisive(a)
    if d is None:
        return []
    out = []
    what = measure(d)
    if what is not None and not said:
        out.append(Detail("the figure", what))
    if d.basis == Basis.COMBINED:
        out.append(
            Detail(
                "how they are joined",
                f"each measure's own interval is taken wider, so that all of them hold at once at {LEVEL:.0%}, "
                "and the joined figure is where they overlap",
            )
        )
    wide = wider(a)
    if wide:
        level = f"{level_text(wide[0].interval.level)}, not {LEVEL:.0%} as elsewhere"
        why = (
            "the soak decided while it ran, checking after every probe cycle, and a figure looked at that "
            "often needs a wider interval to be as sure"
        )
        names = [str(c.basis).replace("_", " ") for c in wide if c is not d]
        rows = _and(names) if names else ""
        if d in wide:
            also = f" (so are the {rows} rows in the table)" if rows else ""
            out.append(Detail("its interval", f"{level}{also}: {why}"))
        else:
            out.append(Detail("wider intervals", f"the {rows} rows in the table: {level}: {why}"))
    return out


def host_moved(a: Analysis) -> Comparison | None:
    """The fresh control's own change over the run (`control_drift`), where it moved by HOST_MOVED
    or more: the host was not steady, which a page says beside the measures it moves."""
    drift = next((c for c in a.comparisons if c.basis == Basis.CONTROL_DRIFT), None)
    return drift if drift is not None and abs(drift.ratio - 1) >= HOST_MOVED else None


def wider(a: Analysis) -> list[Comparison]:
    """The comparisons whose interval is wider than LEVEL (a soak stopped at a decided look keeps
    the running level on its probes): a page that shows them beside 90% ones says why."""
    return [c for c in a.comparisons if c.interval.bounded and c.interval.level > LEVEL + 1e-9]


def cap_checks(a: Analysis) -> list[str]:
    """The checks that lowered the confidence (diagnostics.decision.caps), most concrete first: a figure on too
    few samples (to low), then those that lowered a high one to medium."""
    thin = [caps.THIN] if any(c.name == caps.THIN and c.status == CheckStatus.WARN for c in a.checks) else []
    cap = next((c for c in a.checks if c.name == "confidence_cap"), None)
    if cap is None or "warn (" not in cap.detail:
        return thin
    names = cap.detail.split("warn (", 1)[-1].split(");", 1)[0]
    found = list(dict.fromkeys(n.split(" ")[0] for n in names.split(", ")))
    return thin + sorted(found, key=lambda n: CAP_ORDER.index(n) if n in CAP_ORDER else len(CAP_ORDER))


def cap_reason(a: Analysis, name: str) -> str:
    """A capping check as the reason, a clause after "because"."""
    d = decisive(a)
    if name == caps.THIN and d is not None:
        early = d.num_early <= d.num_late
        fewest, side = (d.num_early, "early") if early else (d.num_late, "late")
        return f"only {fewest} {side} {'measurement was' if fewest == 1 else 'measurements were'} there to compare with"
    if name == "healthy_model":
        if _few(a):
            assert a.model is not None
            d = decisive(a)
            if d is not None and d.basis in (Basis.PAIRED_CONTROL, Basis.PROBES, Basis.RESTART):
                # A figure of test requests, which the engine's log could contradict.
                return f"the engine's own log, which could contradict the figure, has only {a.model.num_points} early steps"
            return f"only {a.model.num_points} early measurements were there to compare with"
        return (
            "early on the context length hardly varied, so how much a longer context alone slows decoding is not known"
        )
    return CAP_REASONS.get(name, f"the {name.replace('_', ' ')} check warned")


def held_back(a: Analysis, source: Source | None = None, said: str | None = None) -> list[str]:
    """What else kept the confidence down, in words: probes that failed, decode samples kept out,
    data too thin for the figure, the other checks that capped it (`said`: the one line one gave)."""
    out = []
    probes = getattr(source, "probes", None)
    if probes is not None:
        failed = failed_rows(probes, "probes")
        if failed:
            out.append(failed)
    # A figure capped for its thin sides says so in line one; the counts here would say it twice.
    thin = _thin(a, source) if a.confidence is not None and caps.THIN not in cap_checks(a) else None
    if thin:
        out.append(thin)
    samples = a.samples
    if len(samples):
        kept = int((samples["excluded"] != "").sum())
        if kept == len(samples):
            out.append(f"all {kept} decode samples kept out (their windows held other work)")
        elif kept > KEPT_OUT_SHARE * len(samples):
            out.append(f"{kept} of {len(samples)} decode samples kept out (their windows held other work)")
    capped = cap_checks(a)
    # Few early samples of the model are the thin sides line one already counted: said once.
    reasons = [cap_reason(a, n) for n in capped if not (n == "healthy_model" and caps.THIN in capped and _few(a))]
    out += [r for r in reasons if r != said]
    return out


def failed_rows(table: pd.DataFrame, what: str) -> str | None:
    """`4 of 104 requests failed (3 error, 1 refused)`."""
    if table.empty or "status" not in table:
        return None
    status = table["status"].fillna("ok").astype(str)
    failed = status[status != "ok"]
    if not len(failed):
        return None
    kinds = ", ".join(f"{n} {k}" for k, n in failed.value_counts().items())
    return f"{len(failed)} of {len(table)} {what} failed ({kinds})"


def check_title(name: str) -> str | None:
    """A check's name in the reader's words, where the bare name misleads."""
    return CHECK_TITLES.get(name)


def status_shown(a: Analysis, c: Check) -> str:
    """A check's status as a page shows it: a check that failed under a verdict that cannot tell is
    the reason it did not decide, `not met`, not a fault of the tool (a fourth reader read `FAIL`
    so). The JSON and the tests keep `fail`."""
    return failed_shown(a) if c.status == "fail" else c.status


def failed_shown(a: Analysis) -> str:
    """How a page shows a failed check beside this verdict: `not met` where it cannot tell, else `fail`."""
    return NOT_MET if a.verdict == Verdict.INSUFFICIENT else "fail"


class Note(NamedTuple):
    """What a warning means for the verdict: a tag beside its name, and why, where it needs saying."""

    tag: str  # `does not change the verdict`, `holds the confidence at medium`, `matters`
    why: str | None = None


def check_note(a: Analysis, c: Check) -> Note | None:
    """Whether a warning matters to the verdict, for those that come up on most runs: a reader
    should not have to work out that client and engine timings differing changes nothing."""
    if c.status == CheckStatus.OK:
        return None
    if c.name in cap_checks(a):
        return Note(f"holds the confidence at {a.confidence}")
    if c.name == "control_youth":
        if not _on_control(a):
            return Note(NO_CHANGE, "the verdict does not rest on the fresh engine beside it")
        if a.verdict == Verdict.AGE:
            return Note(NO_CHANGE, "a fresh engine that slowed too would make the loss look smaller, not larger")
        if a.verdict == Verdict.INSUFFICIENT:
            return Note(
                "matters",
                "the measures beside the fresh engine assume it did not slow; `--control-restart-after 8` checks it",
            )
        d = decisive(a)
        on = (
            "its restart is read beside the fresh copy run alongside"
            if d and d.basis == Basis.RESTART
            else ("the verdict rests on the fresh copy run alongside")
        )
        return Note(
            "matters", f"{on}, and one that slowed too would hide a loss; `--control-restart-after 8` checks it"
        )
    if c.name == "state_slot_exhaustion":
        return Note(NO_CHANGE, "a limit of capacity, not a sign of age; the measures compare like batches")
    if c.name == "client_engine_agreement":
        return Note(
            NO_CHANGE,
            "the client's timings include streaming and the network; each measure compares one kind of "
            "timing with itself",
        )
    if c.name == "raw_throughput":
        return Note(NO_CHANGE, "raw speed mixes in longer contexts and bigger batches; the measures do not")
    if c.name == "control_drift":
        return Note(NO_CHANGE)
    return None


def _on_control(a: Analysis) -> bool:
    """Whether the verdict's figure rests on the fresh engine beside the soaked one: the paired
    control, or the restart read on the pairs (where both lives have them, diagnostics.evidence.controls)."""
    d = decisive(a)
    if d is None:
        return False
    if Basis.PAIRED_CONTROL in d.bases:
        return True
    pairs = a.probe_pairs
    return d.basis == Basis.RESTART and pairs is not None and len(pairs) > 0 and pairs["engine_life"].nunique() > 1


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
        parts.append(f"{duration(m.elapsed_s)} of serving{calls}")
    elif source is not None and source.log_info is not None:
        parts.append(f"from its log ({source.log_info.num_lines:,} lines)")
    return "; ".join(parts)


def _few(a: Analysis) -> bool:
    """Whether the model of the early steps rests on few samples."""
    return a.model is not None and a.model.num_points < FEW_EARLY


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _thin(a: Analysis, source: Source | None) -> str | None:
    """`thin data: 5 usable decode samples in a log of 11 lines, 2 of them early`: where the figure
    rests on so little that its confidence says more than the data."""
    d = decisive(a)
    if d is None:
        return None
    if d.basis in (Basis.PAIRED_CONTROL, Basis.PROBES):
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
