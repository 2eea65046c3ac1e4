"""How sure a verdict may say it is (diagnostics.decision.caps): a figure on fewer than THIN_SIDE samples a
side is low at most, whatever the source. The FreeToken excerpt, 2 early samples against 3 late,
read "medium" while probe runs as thin could not tell (issue 53, third reader)."""

from __future__ import annotations

import pytest

from diagnostics.decision import caps
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import Confidence

from .test_controls import probe_table


def _figure(basis: str, num_early: int, num_late: int) -> Comparison:
    return Comparison(basis, Interval(0.1, 0.06, 0.17), num_early, num_late, 0.9, f"{basis} 0.10")


@pytest.mark.parametrize("basis", ["step_series", "bins", "probes", "paired_control", "restart", "combined"])
@pytest.mark.parametrize(("num_early", "num_late"), [(2, 3), (3, 2), (1, 40), (2, 2)])
def test_fewer_than_three_a_side_caps_any_figure_at_low(basis, num_early, num_late):
    for was in (Confidence.HIGH, Confidence.MEDIUM):
        confidence, check = caps.thin(was, _figure(basis, num_early, num_late))
        assert confidence == Confidence.LOW
        assert check is not None and check.name == caps.THIN and check.status == "warn"
        assert f"lowered from {was} to low" in check.detail
        assert f"rests on {num_early} early and {num_late} late" in check.detail


@pytest.mark.parametrize(("num_early", "num_late"), [(3, 3), (3, 50), (8, 8)])
def test_three_or_more_a_side_keep_their_confidence(num_early, num_late):
    for was in (Confidence.HIGH, Confidence.MEDIUM, Confidence.LOW):
        assert caps.thin(was, _figure("step_series", num_early, num_late)) == (was, None)


def test_nothing_to_cap_without_a_confidence_or_a_figure():
    assert caps.thin(None, _figure("step_series", 2, 3)) == (None, None)  # insufficient_data stays so
    assert caps.thin(Confidence.LOW, _figure("step_series", 2, 3)) == (Confidence.LOW, None)
    assert caps.thin(Confidence.MEDIUM, None) == (Confidence.MEDIUM, None)


def test_the_running_verdict_is_capped_as_the_whole_run_is():
    """A soak's running line on two cycles a side says low, as `diag analyze` on the run would."""
    from diagnostics.decision.live import running_verdict

    thin = running_verdict(probe_table([60, 61, 59, 60, 60]))  # five probes: two a side
    assert "low confidence (too few cycles a side to say how sure)" in thin.line, thin.line
    assert thin.decided is None
    more = running_verdict(probe_table([60, 61, 59, 60, 60, 61, 59, 60, 61]))  # three a side
    assert "too few cycles" not in more.line, more.line
