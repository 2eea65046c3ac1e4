"""The control's youth: a control that ages with the soaked engine's fault is caught, across its
restarts and within its lives; only the cycles right after its restarts then decide, and never
"no age"."""

import numpy as np
import pandas as pd

from diagnostics.decision.live import running_verdict
from diagnostics.decision.verdict import decide
from diagnostics.evidence import controls, youth
from diagnostics.evidence.comparison import Comparison
from diagnostics.evidence.gathered import Evidence
from diagnostics.evidence.intervals import Interval
from diagnostics.labels import Basis, CheckStatus, ControlYouth, Verdict


def cycles_table(main, control, control_lives, reasons=None):
    """Probe rows of one main life, a main and a control probe per cycle, 10 s apart."""
    rows = []
    t0 = pd.Timestamp("2026-12-05")
    for i, (m, c, life) in enumerate(zip(main, control, control_lives)):
        reason = reasons[i] if reasons is not None else "periodic"
        base = {"probe_id": "p", "status": "ok", "cycle": i, "reason": reason}
        t = t0 + pd.Timedelta(seconds=10 * i)
        rows.append({**base, "t": t, "engine_life": 1, "engine_age_s": 10.0 * i, "decode_tps": m, "role": "main"})
        rows.append(
            {**base, "t": t + pd.Timedelta(seconds=3), "engine_life": life, "engine_age_s": None, "decode_tps": c}
            | {"role": "control"}
        )
    return pd.DataFrame(rows)


def noisy(level, n, rng, sd=0.03):
    return np.asarray(level, dtype=float) * np.exp(rng.normal(0, sd, n))


def evidence(rows, cycles):
    """What the analysis and the running verdict gather from the probes."""
    y = youth.measure(cycles)
    return Evidence(
        paired=controls.paired(cycles),
        probes=controls.probes(rows),
        control_drift=controls.control_drift(cycles),
        youth=y,
        paired_fresh=controls.paired(cycles, fresh_only=True) if y is not None and y.aging else None,
    )


def the_issues_run(seed=1):
    # The soak of the issue: the soaked engine at 0.73 of its twin from cycle 2 on, until the twin
    # reached the same request count at cycle 18 and slowed as much; the twin never restarted.
    rng = np.random.default_rng(seed)
    n = 29
    main = noisy(np.r_[np.full(2, 230.0), np.full(n - 2, 172.0)], n, rng)
    twin = noisy(np.r_[np.full(18, 230.0), np.full(n - 18, 180.0)], n, rng)
    return cycles_table(main, twin, np.ones(n, dtype=int))


def test_a_twin_that_caught_the_same_fault_is_caught_and_no_age_is_not_decided():
    table = the_issues_run()
    rows = controls.probe_rows(table)
    cycles = controls.pairs(rows)
    y = youth.measure(cycles)
    assert y is not None and y.status == ControlYouth.AGING
    assert y.across is None and y.within is not None and y.within.ratio < 0.9

    running = running_verdict(table, looks_planned=60)
    assert running.youth == ControlYouth.AGING
    assert running.decided is None
    assert "the control aged" in running.line

    decision = decide(evidence(rows, cycles))
    assert decision.verdict == Verdict.INSUFFICIENT
    assert [f.status for f in decision.findings if f.name == "control_youth"] == [CheckStatus.FAIL]
    assert "--control-restart-after" in decision.reason and "slowed with its own age" in decision.reason


def test_the_same_run_without_the_youth_check_decided_no_age():
    # What the check changes: the same pairs, read as a young control's, rule a loss out.
    rows = controls.probe_rows(the_issues_run())
    cycles = controls.pairs(rows)
    decision = decide(evidence(rows, cycles)._replace(youth=None))
    assert decision.verdict in (Verdict.NO_DEGRADATION, Verdict.CONTEXT_ONLY)


def test_a_control_that_ages_within_each_life_is_caught_across_its_restarts():
    # A fault from the control's 6th probe in each life of 10; the soaked engine healthy.
    rng = np.random.default_rng(2)
    n = 40
    lives = 1 + np.arange(n) // 10
    position = np.arange(n) % 10
    main = noisy(np.full(n, 200.0), n, rng)
    twin = noisy(np.where(position >= 5, 150.0, 200.0), n, rng)
    y = youth.measure(controls.pairs(controls.probe_rows(cycles_table(main, twin, lives))))
    assert y is not None and y.across is not None
    assert y.across.num_early == y.across.num_late == 3 * youth.YOUTH_K  # three restarts
    assert y.status == ControlYouth.AGING and abs(y.across.ratio - 0.75) < 0.05


def test_a_restart_after_a_short_life_does_not_judge_the_control():
    # A life of a few probes is too young to show age: its restart is left out, not pooled in.
    rng = np.random.default_rng(7)
    lives = np.r_[np.full(16, 1), np.full(4, 2), np.full(10, 3)]
    n = len(lives)
    position = np.r_[np.arange(16), np.arange(4), np.arange(10)]
    twin = noisy(np.where(position >= 8, 170.0, 200.0), n, rng)
    y = youth.measure(controls.pairs(controls.probe_rows(cycles_table(noisy(np.full(n, 200.0), n, rng), twin, lives))))
    assert y is not None and y.across is not None and "over 1 restart" in y.across.detail
    assert y.across.num_late == youth.YOUTH_K and y.status == ControlYouth.AGING


def test_a_young_control_is_verified_across_its_restart_and_no_age_is_decided():
    rng = np.random.default_rng(3)
    n = 30
    main = noisy(np.full(n, 200.0), n, rng)
    twin = noisy(np.full(n, 205.0), n, rng)
    lives = 1 + (np.arange(n) >= 16)
    table = cycles_table(main, twin, lives)
    y = youth.measure(controls.pairs(controls.probe_rows(table)))
    assert y is not None and y.status == ControlYouth.VERIFIED and y.across.no_loss
    assert "stayed young" in y.describe()
    running = running_verdict(table, looks_planned=30)
    assert running.youth == ControlYouth.VERIFIED and running.decided == "no_degradation"


def test_a_control_that_may_have_slowed_a_little_is_not_verified():
    # 5 % slower at the end of its life: not shown aging, but not ruled out either.
    rng = np.random.default_rng(8)
    n = 30
    lives = 1 + (np.arange(n) >= 16)
    twin = np.where((np.arange(n) >= 12) & (lives == 1), 190.0, 200.0)
    table = cycles_table(noisy(np.full(n, 200.0), n, rng), noisy(twin, n, rng), lives)
    y = youth.measure(controls.pairs(controls.probe_rows(table)))
    assert y is not None and not y.across.no_loss and y.status == ControlYouth.UNVERIFIED


def test_a_control_never_restarted_is_unverified_and_does_not_stop_a_no_age_look():
    # The look still decides (benchmarks resample such runs); the soak waits for a restart of the
    # control before it stops on it (tokdrift.cli.soak_run).
    rng = np.random.default_rng(4)
    n = 20
    table = cycles_table(noisy(np.full(n, 200.0), n, rng), noisy(np.full(n, 205.0), n, rng), np.ones(n, dtype=int))
    running = running_verdict(table, looks_planned=20)
    assert running.youth == ControlYouth.UNVERIFIED
    assert running.decided == "no_degradation"


def test_beside_an_aging_control_only_the_cycles_right_after_its_restarts_decide():
    # The same fault in both: the control ages at its 6th cycle in each life of 10, the soaked
    # engine at cycle 24, both to 0.75. All the pairs mix aged and young controls on both sides;
    # the cycles right after each restart set the soaked engine beside a control of one age.
    rng = np.random.default_rng(6)
    n = 90
    lives = 1 + np.arange(n) // 10
    position = np.arange(n) % 10
    main = noisy(np.where(np.arange(n) >= 24, 150.0, 200.0), n, rng)
    twin = noisy(np.where(position >= 5, 150.0, 200.0), n, rng)
    rows = controls.probe_rows(cycles_table(main, twin, lives))
    cycles = controls.pairs(rows)
    assert list(youth.fresh(cycles)["cycle"]) == [c for c in range(n) if c % 10 < youth.YOUTH_K]
    ev = evidence(rows, cycles)
    assert ev.youth.aging and ev.paired_fresh.loss and "just-restarted control" in ev.paired_fresh.detail
    decision = decide(ev)
    assert decision.verdict == Verdict.AGE and decision.decisive is ev.paired_fresh
    # without them, the refusal that names the control
    assert decide(ev._replace(paired_fresh=None)).verdict == Verdict.INSUFFICIENT


def test_a_baselines_fresh_cycles_are_the_early_side_of_the_fresh_pairs():
    # --until-decided's baseline: the start cycle and 8 more, then the traffic; the control restarted
    # every 16 cycles and aging from its 10th; the soaked engine at 0.75 from cycle 12.
    rng = np.random.default_rng(9)
    n = 80
    lives = 1 + np.arange(n) // 16
    position = np.arange(n) % 16
    reasons = ["start"] + ["baseline"] * 8 + ["periodic"] * (n - 9)
    main = noisy(np.where(np.arange(n) >= 12, 150.0, 200.0), n, rng)
    twin = noisy(np.where(position >= 9, 160.0, 200.0), n, rng)
    rows = controls.probe_rows(cycles_table(main, twin, lives, reasons))
    cycles = controls.pairs(rows)
    fresh = controls.paired(cycles, fresh_only=True)
    assert fresh.num_early == youth.YOUTH_K and fresh.loss and abs(fresh.ratio - 0.75) < 0.05


def test_a_control_taken_for_aging_never_lets_the_soaked_engines_probes_alone_claim_age():
    # The host slows 40 % through a healthy run, and noise made the control look aged: its drift
    # is no longer trusted, and the probes alone (the host's slowing in them) do not claim age.
    rng = np.random.default_rng(10)
    n = 40
    host = np.linspace(1.0, 0.6, n)
    table = cycles_table(noisy(200.0 * host, n, rng), noisy(200.0 * host, n, rng), np.ones(n, dtype=int))
    rows = controls.probe_rows(table)
    cycles = controls.pairs(rows)
    aging = Comparison(Basis.CONTROL_YOUTH, Interval(0.84, 0.71, 0.99, 0.9), 8, 8, 0.9, "noise", min_for_loss=4)
    ev = evidence(rows, cycles)._replace(youth=youth.Youth(None, aging))
    assert ev.probes.loss and ev.youth.aging
    assert decide(ev).verdict == Verdict.INSUFFICIENT
    assert decide(ev._replace(context="explains", paired=None, probes=None)).verdict == Verdict.INSUFFICIENT


def test_no_control_means_no_youth():
    table = cycles_table([200.0] * 8, [200.0] * 8, [1] * 8)
    main_only = table[table["role"] == "main"]
    assert youth.measure(controls.pairs(controls.probe_rows(main_only))) is None
    assert running_verdict(main_only, looks_planned=8).youth is None
