"""The closed sets diag answers with: verdict, cause, confidence and a check's status, each an enum
whose values are the JSON strings readers know (docs/diagnostics.md). A member is a `str`: it
compares, hashes, formats and serialises as its value, so `Verdict.AGE ==
"engine_age_degradation"` and `json.dumps` writes the string."""

from __future__ import annotations

from tokdrift import Label


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
    """Whether the control stayed young (diagnostics.youth): the paired control assumes it."""

    VERIFIED = "verified"  # across a restart of it, the fresh control ran no faster than the old one
    AGING = "aging"  # it slowed with its own age: the same fault as the soaked engine, or another
    UNVERIFIED = "unverified"  # never restarted with probes on both sides, and no sign of age within its lives


class CheckStatus(Label):
    """How a check came out (an analysis's `checks`, docs/diagnostics.md, "Checks")."""

    OK = "ok"
    WARN = "warn"  # worth a look; a data check that warns may cap the confidence (diagnostics.caps)
    FAIL = "fail"  # what the verdict would rest on failed: it cannot tell
