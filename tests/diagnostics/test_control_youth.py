"""The control's youth: a control that ages with the soaked engine's fault is caught, across its
restarts and within its lives, and a "no age" is then not decided on its pairs."""

import numpy as np
import pandas as pd

from diagnostics import controls
from diagnostics.evidence import Evidence
from diagnostics.labels import ControlYouth, Verdict
from diagnostics.live import running_verdict
from diagnostics.verdict import decide


def cycles_table(main, control, control_lives):
    """Probe rows of one main life, a main and a control probe per cycle, 10 s apart."""
    rows = []
    t0 = pd.Timestamp("2026-12-05")
    for i, (m, c, life) in enumerate(zip(main, control, control_lives)):
        base = {"probe_id": "p", "status": "ok", "cycle": i, "reason": "periodic"}
        t = t0 + pd.Timedelta(seconds=10 * i)
        rows.append({**base, "t": t, "engine_life": 1, "engine_age_s": 10.0 * i, "decode_tps": m, "role": "main"})
        rows.append(
            {**base, "t": t + pd.Timedelta(seconds=3), "engine_life": life, "engine_age_s": None, "decode_tps": c}
            | {"role": "control"}
        )
    return pd.DataFrame(rows)


def noisy(level, n, rng, sd=0.03):
    return np.asarray(level, dtype=float) * np.exp(rng.normal(0, sd, n))


def test_a_twin_that_caught_the_same_fault_is_caught_and_no_age_is_not_decided():
    # The soak of the issue: the soaked engine at 0.73 of its twin from cycle 2 on, until the twin
    # reached the same request count at cycle 18 and slowed as much; the twin never restarted.
    rng = np.random.default_rng(1)
    n = 29
    main = noisy(np.r_[np.full(2, 230.0), np.full(n - 2, 172.0)], n, rng)
    twin = noisy(np.r_[np.full(18, 230.0), np.full(n - 18, 180.0)], n, rng)
    table = cycles_table(main, twin, np.ones(n, dtype=int))
    rows = controls.probe_rows(table)
    cycles = controls.pairs(rows)
    youth = controls.youth(cycles)
    assert youth is not None and youth.status == ControlYouth.AGING
    assert youth.across is None and youth.within is not None and youth.within.ratio < 0.9

    running = running_verdict(table, looks_planned=60)
    assert running.youth == ControlYouth.AGING
    assert running.decided != "no_degradation"
    assert "the control aged" in running.line

    decision = decide(Evidence(paired=controls.paired(cycles), probes=controls.probes(rows), youth=youth))
    assert decision.verdict not in (Verdict.NO_DEGRADATION, Verdict.CONTEXT_ONLY)
    assert [f.status for f in decision.findings if f.name == "control_youth"] == ["fail"]
    if decision.verdict == Verdict.INSUFFICIENT:
        assert "--control-restart-after" in decision.reason


def test_the_same_run_without_the_youth_check_decided_no_age():
    # What the check changes: the same pairs, read as a young control's, rule a loss out.
    rng = np.random.default_rng(1)
    n = 29
    main = noisy(np.r_[np.full(2, 230.0), np.full(n - 2, 172.0)], n, rng)
    twin = noisy(np.r_[np.full(18, 230.0), np.full(n - 18, 180.0)], n, rng)
    rows = controls.probe_rows(cycles_table(main, twin, np.ones(n, dtype=int)))
    cycles = controls.pairs(rows)
    decision = decide(Evidence(paired=controls.paired(cycles), probes=controls.probes(rows)))
    assert decision.verdict in (Verdict.NO_DEGRADATION, Verdict.CONTEXT_ONLY)


def test_a_control_that_ages_within_each_life_is_caught_across_its_restarts():
    # A fault from the control's 6th probe in each life of 10; the soaked engine healthy.
    rng = np.random.default_rng(2)
    n = 40
    lives = 1 + np.arange(n) // 10
    position = np.arange(n) % 10
    main = noisy(np.full(n, 200.0), n, rng)
    twin = noisy(np.where(position >= 5, 150.0, 200.0), n, rng)
    cycles = controls.pairs(controls.probe_rows(cycles_table(main, twin, lives)))
    youth = controls.youth(cycles)
    assert youth is not None and youth.across is not None
    assert youth.across.num_early == youth.across.num_late == 3 * 3  # three restarts, three cycles a side
    assert youth.across.loss and youth.status == ControlYouth.AGING
    assert abs(youth.across.ratio - 0.75) < 0.05


def test_a_young_control_is_verified_across_its_restart_and_no_age_is_decided():
    rng = np.random.default_rng(3)
    n = 30
    main = noisy(np.full(n, 200.0), n, rng)
    twin = noisy(np.full(n, 205.0), n, rng)
    lives = 1 + (np.arange(n) >= 16)
    table = cycles_table(main, twin, lives)
    youth = controls.youth(controls.pairs(controls.probe_rows(table)))
    assert youth is not None and youth.status == ControlYouth.VERIFIED
    assert "stayed young" in youth.describe()
    running = running_verdict(table, looks_planned=30)
    assert running.youth == ControlYouth.VERIFIED and running.decided == "no_degradation"


def test_a_control_never_restarted_is_unverified_and_does_not_stop_a_no_age_look():
    # The look still decides (benchmarks resample such runs); the soak waits for a restart of the
    # control before it stops on it (tokdrift.cli.soak_run).
    rng = np.random.default_rng(4)
    n = 20
    table = cycles_table(noisy(np.full(n, 200.0), n, rng), noisy(np.full(n, 205.0), n, rng), np.ones(n, dtype=int))
    running = running_verdict(table, looks_planned=20)
    assert running.youth == ControlYouth.UNVERIFIED
    assert running.decided == "no_degradation"


def test_a_paired_loss_stands_beside_an_aging_control():
    # The control ages (within its lives) and the soaked engine lost more than it: the pairs still
    # show the loss (an aging control only makes it smaller), and it is engine age.
    rng = np.random.default_rng(5)
    n = 40
    lives = 1 + np.arange(n) // 10
    position = np.arange(n) % 10
    main = noisy(np.r_[np.full(12, 200.0), np.full(n - 12, 100.0)], n, rng)
    twin = noisy(np.where(position >= 5, 170.0, 200.0), n, rng)
    rows = controls.probe_rows(cycles_table(main, twin, lives))
    cycles = controls.pairs(rows)
    youth = controls.youth(cycles)
    assert youth is not None and youth.aging
    decision = decide(Evidence(paired=controls.paired(cycles), probes=controls.probes(rows), youth=youth))
    assert decision.verdict == Verdict.AGE and decision.basis == "paired_control"


def test_no_control_means_no_youth():
    table = cycles_table([200.0] * 8, [200.0] * 8, [1] * 8)
    main_only = table[table["role"] == "main"]
    assert controls.youth(controls.pairs(controls.probe_rows(main_only))) is None
    assert running_verdict(main_only, looks_planned=8).youth is None


def test_the_cycles_right_after_the_controls_restarts_stand_in_for_the_pairs_it_spoiled():
    # The same fault in both: the control ages at its 4th cycle in each life of 10, the soaked
    # engine at cycle 12, both to 0.75. All the pairs mix aged and young controls on both sides;
    # the cycles right after each restart of the control see the soaked engine's loss alone.
    rng = np.random.default_rng(6)
    n = 60
    lives = 1 + np.arange(n) // 10
    position = np.arange(n) % 10
    main = noisy(np.where(np.arange(n) >= 12, 150.0, 200.0), n, rng)
    twin = noisy(np.where(position >= 3, 150.0, 200.0), n, rng)
    rows = controls.probe_rows(cycles_table(main, twin, lives))
    cycles = controls.pairs(rows)
    fresh = controls.fresh(cycles)
    assert list(fresh["cycle"]) == [c for c in range(n) if c % 10 < 3]
    youth = controls.youth(cycles)
    assert youth is not None and youth.aging
    fresh_paired = controls.paired(cycles, fresh_only=True)
    assert fresh_paired.loss and 0.7 < fresh_paired.ratio < 0.85  # its early third holds one aged cycle
    assert "just-restarted control" in fresh_paired.detail
    spoiled = controls.paired(cycles)._replace(interval=controls.paired(cycles).interval._replace(lo=0.9, hi=1.1))
    ev = Evidence(paired=spoiled, paired_fresh=fresh_paired, probes=controls.probes(rows), youth=youth)
    decision = decide(ev)
    assert decision.verdict == Verdict.AGE and decision.decisive is fresh_paired
    # without them, the refusal that names the control
    assert decide(ev._replace(paired_fresh=None)).verdict == Verdict.INSUFFICIENT
