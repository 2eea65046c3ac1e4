"""Prefill time at matched new-token counts, early against late (diagnostics.evidence.prefill)."""

import numpy as np
import pandas as pd

from diagnostics.analysis import analyze
from diagnostics.evidence import prefill
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source
from tests.diagnostics.rundirs import make_run_dir


def _steps(times, new):
    n = len(times)
    t = pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(np.arange(n) * 5.0, unit="s")
    return pd.DataFrame(
        {
            "t": t,
            "engine_age_s": np.arange(n) * 5.0,
            "engine_life": 0,
            "phase": "prefill",
            "new_tokens": np.asarray(new, float),
            "input_tps": np.asarray(new, float) / np.asarray(times),
        }
    )


def test_admissions_that_pay_more_and_more_are_a_loss():
    rng = np.random.default_rng(0)
    new = rng.choice([300, 1200, 2500], 45)
    base = new / 1000.0
    # Late, the big admissions pay seconds more (eviction), the small ones nothing.
    extra = np.where((np.arange(45) >= 20) & (new >= 1200), 1.5 * base, 0.0)
    cmp = prefill.compare(_steps(base * (1 + rng.normal(0, 0.03, 45)) + extra, new))
    assert cmp.loss and cmp.ratio > 1.8


def test_steady_prefills_of_any_size_are_no_loss():
    rng = np.random.default_rng(1)
    new = rng.integers(100, 5000, 60)
    cmp = prefill.compare(_steps(new / 1000.0 * (1 + rng.normal(0, 0.1, 60)), new))
    assert not cmp.loss and 0.85 < cmp.ratio < 1.15


def test_too_few_prefills_to_compare():
    assert prefill.compare(_steps([0.5] * 10, [500] * 10)) is None


def test_a_run_whose_admissions_slow_is_engine_age_with_eviction_first(tmp_path):
    a = analyze(
        load_source(make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None, prefill_slow_at_min=30))
    )
    assert a.verdict == "engine_age_degradation" and a.age_basis == "prefill"
    assert a.suspects[0].name == "eviction_s_total" and "prefill slows" in a.suspects[0].evidence
    assert 29 * 60 <= a.onset.engine_age_s <= 32 * 60
    # The headline figure is the claim's (prefill time), decode's own beside it: decode itself held.
    assert a.slowdown.basis == "prefill" and a.slowdown.ratio < 0.5 and a.slowdown.healthy_tps is None
    assert a.decode_held.ratio > 0.9
    assert a.to_dict()["prefill"]["loss"] is True


def test_a_decode_loss_only_the_probes_show_gives_way_to_a_clear_prefill_loss(tmp_path):
    run = make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None, prefill_slow_at_min=30)
    # The last probes read 20% slower (a noisy probe, say); the decode steps at matched
    # conditions hold, and admissions are 3x slower from minute 30.
    for part in (run / "probes").glob("*.parquet"):
        probes = pd.read_parquet(part)
        late = probes["t"] >= probes["t"].quantile(2 / 3)
        probes.loc[late, "decode_tps"] *= 0.8
        probes.to_parquet(part, index=False)
    a = analyze(load_source(run))
    assert a.verdict == "engine_age_degradation" and a.age_basis == "prefill"
    basis = next(c for c in a.checks if c.name == "decode_basis")
    assert basis.status == CheckStatus.WARN and "placed on prefill time" in basis.detail
    assert a.suspects[0].name == "eviction_s_total"
