"""The closed sets diag answers with: verdict, cause, confidence, a check's status and a
comparison's basis, each an enum whose values are the JSON strings readers know
(docs/diagnostics.md). A member is a `str`: it compares, hashes, formats and serialises as its
value, so `Verdict.AGE == "engine_age_degradation"` and `json.dumps` writes the string. How a
basis reads to a person is said here too, once (BASIS_WORDS)."""

from __future__ import annotations

from typing import NamedTuple

from ground import Label


class Verdict(Label):
    AGE = "engine_age_degradation"  # the engine slowed with age, beyond what context explains
    CONTEXT_ONLY = "context_growth_only"  # throughput fell, but no more than longer context explains
    NO_DEGRADATION = "no_degradation"
    INSUFFICIENT = "insufficient_data"  # the data cannot tell


class Cause(Label):
    ENGINE_AGE = "engine_age"
    CONTEXT_GROWTH = "context_growth"
    HOST_DRIFT = "host_or_load_drift"  # a fresh engine was as slow: the host or the load, not the engine


class Confidence(Label):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class ControlYouth(Label):
    """Whether the control stayed young (diagnostics.evidence.youth): the paired control assumes it."""

    VERIFIED = "verified"  # across a restart of it, the fresh control ran no faster than the old one
    AGING = "aging"  # it slowed with its own age: the same fault as the soaked engine, or another
    UNVERIFIED = "unverified"  # never restarted with probes on both sides, and no sign of age within its lives


class CheckStatus(Label):
    """How a check came out (an analysis's `checks`, docs/diagnostics.md, "Checks")."""

    OK = "ok"
    WARN = "warn"  # worth a look; a data check that warns may cap the confidence (diagnostics.decision.caps)
    FAIL = "fail"  # what the verdict would rest on failed: it cannot tell


class Basis(Label):
    """What a comparison compares, late against healthy (a comparison's `basis`, and the verdict's:
    docs/diagnostics.md, "Comparisons, each with an interval")."""

    PAIRED_CONTROL = "paired_control"  # the soaked engine's probes over a fresh control's, cycle by cycle
    RESTART = "restart"  # the aged engine just before a restart against the fresh one just after
    PROBES = "probes"  # the soaked engine's identical probes alone
    BINS = "bins"  # decode samples at the same batch and context band
    STEP_SERIES = "step_series"  # the step series against the early step-time model
    COMBINED = "combined"  # the decode comparisons together (diagnostics.evidence.combine)
    PREFIX_REUSE = "prefix_reuse"  # cached share of continuation turns
    PREFILL = "prefill"  # prefill time at matched sizes
    CONTROL_DRIFT = "control_drift"  # the control's own probes: the host's speed (never a verdict's)
    CONTROL_YOUTH = "control_youth"  # whether the control stayed young (never a verdict's)
    HOST_AT_RESTART = "host_at_restart"  # the control's own probes either side of the restart (never a verdict's)


class BasisWords(NamedTuple):
    """How a basis reads to a person, in each place a page names it."""

    # Among others: a part of the decode comparisons together (`restart control`), a side claim (`prefill time`).
    name: str
    # What it compared, after "decided by" or "on" (reports.narrative): `probes paired with a fresh control engine`.
    full: str
    # Its row where two runs are set side by side (reports.compare: `matched {row}: late / early`); None: no row.
    row: str | None = None


# The one place that says how each basis reads.
BASIS_WORDS: dict[Basis, BasisWords] = {
    Basis.PAIRED_CONTROL: BasisWords(
        "paired control", "probes paired with a fresh control engine", row="paired with a fresh control"
    ),
    Basis.RESTART: BasisWords("restart control", "the restart (the engine just before it against itself just after)"),
    Basis.PROBES: BasisWords("probes", "identical probes", row="identical probes"),
    Basis.BINS: BasisWords("bins", "matched batch-and-context bins", row="batch and context bands"),
    Basis.STEP_SERIES: BasisWords("step series", "the step series against the early step-time model"),
    Basis.COMBINED: BasisWords("combined", "every decode measure together"),
    Basis.PREFIX_REUSE: BasisWords("prefix reuse", "prefix reuse of continuation turns"),
    Basis.PREFILL: BasisWords("prefill time", "prefill time at matched sizes"),
    Basis.CONTROL_DRIFT: BasisWords("control drift", "control drift"),
    Basis.CONTROL_YOUTH: BasisWords("control youth", "control youth"),
    Basis.HOST_AT_RESTART: BasisWords("host at the restart", "the fresh engine's own speed either side of the restart"),
}
