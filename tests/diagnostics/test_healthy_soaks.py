"""Healthy soaks of the built-in engine that diag once called aged, kept as run directories
(scripts/case_fixture.py). A false age verdict is the worst answer diag can give: each one found
stays here as a test.

demo-late-host-spell: a fresh-clone `make demo` (3.3 minutes, a fresh control beside it, a
restart at the end). The shared host ran 12 % slower for the last 20 seconds before the
restart; the step series' latest 20 samples (one state of the host, so their 12 block means
agreed) read 0.88 (0.82-0.95), divided by the control's drift over the whole run (1.20) it read
0.73, and the restart "confirmed" it: `engine_age_degradation`, medium. The latest stretch's mean
is no surer than the means of stretches as long along the reference (intervals.stretch_noise),
and the control's drift that corrects it is read over the same stretches
(controls.drift_between).
"""

from pathlib import Path

from diagnostics.analysis import analyze
from diagnostics.source.source import load_source

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "healthy-soaks"


def test_a_slow_spell_of_the_host_before_the_restart_is_not_engine_age():
    a = analyze(load_source(RUNS / "demo-late-host-spell"))
    # 3.3 minutes of a healthy engine: the paired control, 0.88 (0.77-1.00), neither shows a loss
    # nor rules one out.
    assert a.verdict == "insufficient_data", a.reason
    steps = next(c for c in a.comparisons if c.basis == "step_series")
    assert steps.interval.hi > 1.0  # the last 20 seconds' mean, with the host's own spread of such stretches
