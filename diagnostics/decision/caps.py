"""How sure a verdict may say it is, once the data have been checked: a warning caps it.

The verdict's confidence comes from its interval (diagnostics.decision.verdict). An interval measures
noise, not whether the samples meant what the analysis took them to mean: windows that held a
prefill or a stall, a restart into another build, a healthy model fitted on a handful of
points, a raw rate that tells another story than the matched one. `high` is a promise that is
never broken, so any check that warns about the data caps the confidence at `medium`, and the
reason says which checks did it.

A figure on fewer than THIN_SIDE samples a side is capped lower, at `low` (`thin`): two samples
that happen to agree give an interval as tight as twenty do, and a confidence read off it says
more than the data. The rule is the same whatever the source (a log's step series, a run's probes,
a running verdict's cycles), where each comparison counts what it compares (its `num_early` and
`num_late`: probes, paired cycles, block means of samples, matched pairs). Where a comparison needs
more before it may show a loss at all (probes: four a side, diagnostics.evidence.controls) the verdict
already cannot tell, and says so (`too_few_for_loss`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from diagnostics.evidence.comparison import Comparison
from diagnostics.labels import CheckStatus, Confidence, Verdict
from diagnostics.result import Check

# Checks whose warning says the samples may not mean what the comparison takes them to mean.
DATA_CHECKS = (
    "engine_identity",
    "decode_after_prefill_or_idle",
    "stalled_windows",
    "healthy_model",
    "context_only_model",
    "idle_time",
    "fresh_control",
    "too_few_for_loss",
    "probes_alone",
    "control_drift",
    "matched_conditions",
    "material_loss",
    "decode_basis",
    "host_contention",
    "no_control",
    "ratio_sanity",
    "decode_agreement",
)
REASON_CHECKS = ("fresh_control", "host_contention")
THIN = "thin_data"  # the check a thin figure's cap writes
# Samples a side of the figure's comparison below which its confidence is low at most: with two, a
# t interval has one degree of freedom and a bootstrap resamples two values; three is the fewest
# whose spread says anything of the next one. (The FreeToken excerpt: 2 early samples against 3
# late read "medium".)
THIN_SIDE = 3
RAW_AGREEMENT = 2.0  # an age claim whose raw late/early rate differs from the matched ratio by more: disagreeing


def capped(
    verdict: Verdict, confidence: Confidence | None, ratio: float | None, raw_ratio: float | None, checks: list[Check]
) -> tuple[Confidence | None, Check | None]:
    """The confidence the data allow, and a `confidence_cap` check when it was lowered."""
    if confidence != Confidence.HIGH:
        return confidence, None
    warned = data_warnings(verdict, checks)
    if (
        verdict == Verdict.AGE
        and raw_ratio is not None
        and ratio is not None
        and ratio > 0
        and raw_ratio > 0
        and abs(math.log(raw_ratio / ratio)) > math.log(RAW_AGREEMENT)
    ):
        warned.append(f"raw_throughput ({raw_ratio:.2f}x raw against {ratio:.2f}x matched)")
    if not warned:
        return confidence, None
    return Confidence.MEDIUM, Check(
        "confidence_cap",
        CheckStatus.WARN,
        f"high by its interval, lowered to medium at most: the data checks warn ({', '.join(warned)}); "
        f"a high confidence is given only where nothing in the data could mislead it",
    )


def data_warnings(verdict: str, checks: Sequence[Check]) -> list[str]:
    """The checks that warn about the data and so cap a high confidence. A fresh engine as slow,
    or other load rising, is why a verdict says no age: its reason, not a doubt."""
    reasons = REASON_CHECKS if verdict != Verdict.AGE else ()
    return [c.name for c in checks if c.status == CheckStatus.WARN and c.name in DATA_CHECKS and c.name not in reasons]


def thin(confidence: Confidence | None, figure: Comparison | None) -> tuple[Confidence | None, Check | None]:
    """The confidence a figure on so few samples allows: `low` where a side of `figure` (the
    comparison the verdict rests on) holds fewer than THIN_SIDE, with a `thin_data` check that says
    the counts; else as it was. Nothing to cap without a confidence or a figure."""
    if confidence in (None, Confidence.LOW) or figure is None:
        return confidence, None
    fewest = min(figure.num_early, figure.num_late)
    if fewest >= THIN_SIDE:
        return confidence, None
    return Confidence.LOW, Check(
        THIN,
        CheckStatus.WARN,
        f"lowered from {confidence} to low: the figure ({figure.basis.replace('_', ' ')}) rests on "
        f"{figure.num_early} early and {figure.num_late} late; with fewer than {THIN_SIDE} on a side its "
        f"interval is only a rough guide",
    )
