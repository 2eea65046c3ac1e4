"""Probes and controls: pairs by cycle, the paired ratio cancels host drift, the restart control."""

import numpy as np
import pandas as pd
import pytest

from diagnostics.decision.live import running_verdict
from diagnostics.evidence import controls


def probe_table(main, control=None, lives=None):
    rows = []
    for i, tps in enumerate(main):
        life = lives[i] if lives else 0
        rows.append(
            {
                "t": pd.Timestamp("2026-12-01") + pd.Timedelta(seconds=60 * i),
                "engine_life": life,
                "engine_age_s": 60.0 * i,
                "probe_id": "p",
                "decode_tps": tps,
                "status": "ok",
                "role": "main",
                "cycle": i,
            }
        )
        if control is not None:
            rows.append(
                {
                    **rows[-1],
                    "decode_tps": control[i],
                    "role": "control",
                    "engine_life": 0,
                    "t": rows[-1]["t"] + pd.Timedelta(seconds=3),
                }
            )
    return pd.DataFrame(rows)


def test_host_drift_slows_both_engines_and_the_paired_ratio_cancels_it():
    rng = np.random.default_rng(0)
    host = np.r_[np.ones(10), np.full(10, 0.6)]  # a neighbour takes 40% of the core halfway through
    main = 60 * host * np.exp(rng.normal(0, 0.02, 20))
    control = 61 * host * np.exp(rng.normal(0, 0.02, 20))
    rows = controls.probe_rows(probe_table(main, control))
    alone = controls.probes(rows)
    assert alone.loss  # the main engine alone looks 40% slower
    cycles = controls.pairs(rows)
    assert len(cycles) == 20 and list(cycles["cycle"]) == list(range(20))
    paired = controls.paired(cycles)
    assert paired.no_loss and abs(paired.ratio - 1) < 0.05
    drift = controls.control_drift(cycles)
    assert drift.loss and abs(drift.ratio - 0.6) < 0.05


def test_the_hosts_drift_is_read_over_the_stretches_a_comparison_takes():
    host = np.r_[np.full(15, 1.0), np.full(5, 0.8)]  # the last five minutes ran slower
    cycles = controls.pairs(controls.probe_rows(probe_table(60 * host, 61 * host)))
    t0 = pd.Timestamp("2026-12-01")
    whole = controls.control_drift(cycles)
    over = controls.drift_between(
        cycles, ((t0, t0 + pd.Timedelta(minutes=10)), (t0 + pd.Timedelta(minutes=15), t0 + pd.Timedelta(minutes=20)))
    )
    assert over.ratio == pytest.approx(0.8) and whole.ratio > 0.85
    one = controls.drift_between(
        cycles, ((t0, t0 + pd.Timedelta(minutes=10)), (t0 + pd.Timedelta(minutes=19), t0 + pd.Timedelta(minutes=20)))
    )
    assert one.num_late == 1 and not one.interval.bounded  # one probe in the stretch: the host's speed there is unknown
    assert controls.drift_between(cycles, None) is None


def test_an_aged_engine_falls_against_its_control():
    main = np.r_[np.full(8, 60.0), np.full(8, 36.0)] * np.exp(np.random.default_rng(1).normal(0, 0.02, 16))
    rows = controls.probe_rows(probe_table(main, np.full(16, 60.0)))
    paired = controls.paired(controls.pairs(rows))
    assert paired.loss and paired.interval.hi < 0.7
    pos = controls.probe_onset(controls.pairs(rows), "ratio")
    assert pos == 8


def test_the_onset_is_where_the_loss_set_in_and_stayed_not_a_slow_spell_before_it():
    # The live output-buffer run's shape: a baseline of 30 cycles with three slow ones that came
    # back, then traffic, and the loss from cycle 40 on.
    ratio = np.r_[np.ones(20), [0.78, 1.0, 0.76], np.ones(17), np.full(8, 0.8)]
    main = 60 * ratio * np.exp(np.random.default_rng(2).normal(0, 0.02, len(ratio)))
    table = probe_table(main, np.full(len(ratio), 60.0))
    table.loc[table["cycle"] < 30, "reason"] = "baseline"
    cycles = controls.pairs(controls.probe_rows(table))
    assert controls.probe_onset(cycles, "ratio") == 40


def test_runs_without_roles_are_the_main_engine_alone_and_the_restart_compares_one_moment():
    table = probe_table([60, 61, 59, 40, 41, 39, 60, 61, 60], lives=[0] * 6 + [1] * 3).drop(columns=["role", "cycle"])
    rows = controls.probe_rows(table)
    assert set(rows["role"]) == {"main"} and controls.pairs(rows).empty
    restart = controls.restart(rows, controls.pairs(rows))
    assert restart.basis == "restart" and restart.loss  # the aged engine was slower than the fresh one
    same = probe_table([60, 61, 59, 40, 41, 39, 40, 39, 41], lives=[0] * 6 + [1] * 3)
    restart = controls.restart(controls.probe_rows(same), controls.pairs(controls.probe_rows(same)))
    assert restart.no_loss  # a fresh engine as slow: not age


def test_host_load_reads_the_driver_and_other_processes_cpu():
    t = pd.date_range("2026-12-01", periods=40, freq="10s")
    snaps = pd.DataFrame(
        {
            "t": t,
            "engine_life": 0,
            "driver_cpu_percent": 10.0,
            "host_other_cpu_percent": np.r_[np.zeros(20), np.full(20, 90.0)],
        }
    )
    load = controls.host_load(snaps)
    assert load.rose and load.early == 10.0 and load.late == 100.0
    assert controls.host_load(snaps.drop(columns=["driver_cpu_percent", "host_other_cpu_percent"])) is None


def test_the_running_verdict_reads_the_probes_so_far():
    from diagnostics.decision.live import running_verdict

    assert running_verdict(probe_table([60, 59])).line.startswith("verdict so far: too few probes (2 ok)")
    # three cycles a side are too few for a loss (two bursts of a neighbour can agree by chance)...
    few = running_verdict(probe_table([60, 59, 61, 60, 30, 31, 30, 31], [60, 60, 60, 61, 59, 60, 60, 61]))
    assert "engine_age_degradation" not in few.line and few.decided is None
    # ...four are enough
    main, control = [60, 59, 61, 60, 61, 60, 30, 31, 30, 31, 30, 31], [60, 60, 60, 61, 59, 60] * 2
    aged = running_verdict(probe_table(main, control))
    assert aged.line.startswith(
        "verdict so far: engine_age_degradation, medium confidence (high by its interval; `diag"
    )
    assert "(paired control 0.5" in aged.line
    assert aged.decided == "engine_age_degradation" and aged.onset_cycle == 6 and "from cycle 6" in aged.line
    drift = running_verdict(probe_table(main, [60, 60, 60, 61, 59, 60, 31, 30, 30, 31, 30, 31]))
    assert drift.line.startswith("verdict so far: no_degradation") and "host or load drift, not age" in drift.line
    assert drift.decided == "no_degradation" and drift.line.endswith("a loss of more than 10% ruled out")


def test_the_healthy_side_is_the_engines_youth_not_a_third_of_a_long_run():
    rng = np.random.default_rng(3)
    main = 60 * np.r_[np.ones(12), np.full(48, 0.85)] * np.exp(rng.normal(0, 0.03, 60))  # 15 % slower from cycle 12
    control = 60 * np.exp(rng.normal(0, 0.03, 60))
    paired = controls.paired(controls.pairs(controls.probe_rows(probe_table(main, control))))
    # cycles a minute apart: the first 5 minutes hold 6, fewer than YOUTH_MIN, so the first 8 (all before the step)
    assert (paired.num_early, paired.num_late) == (controls.YOUTH_MIN, 20)
    assert paired.loss and paired.ratio == pytest.approx(0.85, abs=0.03)
    assert "the last 20 cycles over the first 8" in paired.detail


def test_a_paired_loss_needs_a_material_estimate_and_an_interval_below_five_percent():
    from diagnostics.evidence.comparison import Comparison
    from diagnostics.evidence.intervals import Interval
    from diagnostics.labels import Basis

    def paired(estimate, lo, hi):
        return Comparison(
            basis=Basis.PAIRED_CONTROL,
            interval=Interval(estimate, lo, hi),
            num_early=10,
            num_late=10,
            material=0.9,
            detail="",
            min_for_loss=4,
            detect=controls.PAIRED_DETECT,
        )

    assert paired(0.85, 0.78, 0.94).loss  # a 15 % loss, a loss below 5 % ruled out
    assert not paired(0.91, 0.88, 0.94).loss  # a loss is shown, but the estimate is not material
    assert not paired(0.85, 0.72, 0.97).loss  # the interval allows a loss of 3 %
    assert not paired(0.85, 0.78, 0.94)._replace(num_early=3).loss  # too few cycles a side


def test_the_running_verdict_caps_a_high_confidence_where_its_rules_warn():
    from diagnostics.decision.live import running_verdict

    # the soaked engine halves while the control itself swings by a factor of four: its drift is
    # not measured, which the final analysis caps at medium, and so does the running line
    main = [60, 59, 61, 60, 61, 60, 30, 31, 30, 31, 30, 31]
    control = [60, 20, 80, 30, 60, 90, 20, 70, 40, 90, 25, 60]
    line = running_verdict(probe_table(main, control)).line
    assert "high confidence" not in line
    # a high decision whose rules warn names them; one whose rules do not still says medium
    from diagnostics.decision.live import _confidence
    from diagnostics.decision.verdict import Decision
    from diagnostics.labels import Basis, CheckStatus, Confidence, Verdict
    from diagnostics.result import Check

    high = Decision(
        verdict=Verdict.AGE,
        basis=Basis.PAIRED_CONTROL,
        decisive=None,
        decode=None,
        cause=None,
        confidence=Confidence.HIGH,
        reason="",
        findings=(),
    )
    warned = high._replace(findings=(Check("control_drift", CheckStatus.WARN, "not measured"),))
    assert _confidence(high).startswith(", medium confidence (high by its interval; `diag analyze`")
    assert _confidence(warned) == ", medium confidence (high by its interval; control_drift warn)"
    assert _confidence(high._replace(confidence=Confidence.MEDIUM)) == ", medium confidence"


def test_two_cycles_a_side_decide_nothing_however_tight_they_look():
    from diagnostics.decision.live import running_verdict

    # seen live: two pairs of identical ratios gave a 99.6 % interval of 0.95-0.96 at cycle 3
    main, control = [151.2, 135.0, 144.7, 134.1], [155.9, 139.2, 156.1, 144.7]
    running = running_verdict(probe_table(main, control), looks_planned=100)
    assert running.interval is not None and running.interval[1] - running.interval[0] < 0.05
    assert running.decided is None and "decided" not in running.line


def _with_baseline(table: pd.DataFrame, num_baseline: int) -> pd.DataFrame:
    reason = np.where(table["cycle"] == 0, "start", np.where(table["cycle"] <= num_baseline, "baseline", "periodic"))
    return table.assign(reason=reason)


def test_a_baseline_is_the_early_side_and_the_late_side_is_the_last_third_since():
    rng = np.random.default_rng(8)
    # 8 baseline cycles (start + 7) healthy, then traffic fills the engine at once: 0.4 from the first cycle on
    main = 60 * np.r_[np.ones(8), np.full(24, 0.4)] * np.exp(rng.normal(0, 0.03, 32))
    control = 60 * np.exp(rng.normal(0, 0.03, 32))
    rows = controls.probe_rows(_with_baseline(probe_table(main, control), 7))
    paired = controls.paired(controls.pairs(rows))
    assert (paired.num_early, paired.num_late) == (8, 8)  # the baseline; a third of the 24 since
    assert paired.loss and paired.ratio == pytest.approx(0.4, abs=0.03)
    # without the baseline the early side is the youth: 8 cycles, which here holds the baseline too
    plain = controls.paired(controls.pairs(controls.probe_rows(probe_table(main, control))))
    assert plain.num_early == 8


def test_the_running_verdict_waits_for_cycles_after_the_baseline():
    rng = np.random.default_rng(9)
    main = 60 * np.exp(rng.normal(0, 0.02, 11))
    control = 60 * np.exp(rng.normal(0, 0.02, 11))
    table = _with_baseline(probe_table(main, control), 7)  # start + 7 baseline, then 3 cycles of traffic
    early = running_verdict(table)
    assert early.verdict is None and early.decided is None and early.looks == 0  # 3 < BASELINE_FIRST since
    assert "a baseline of 8 cycles and 3 since" in early.line
    main2 = np.r_[main, 60 * np.exp(rng.normal(0, 0.02, 1))]
    control2 = np.r_[control, 60 * np.exp(rng.normal(0, 0.02, 1))]
    later = running_verdict(_with_baseline(probe_table(main2, control2), 7))
    assert later.looks == 1 and later.verdict is not None
