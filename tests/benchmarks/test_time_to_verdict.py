"""benchmarks/time_to_verdict.py's resampled runs: what the product's running verdict is shown."""

import sys
from pathlib import Path

import numpy as np
import pytest

from diagnostics.evidence import controls

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import time_to_verdict as ttv  # noqa: E402


def _recording(sd: float = 0.02, n: int = 60) -> "ttv.Recording":
    rng = np.random.default_rng(1)
    control = 60 * np.exp(rng.normal(0, sd, n))
    return ttv.Recording(name="flat", period_s=10.0, main=60 * np.exp(rng.normal(0, sd, n)), control=control, note="")


def test_a_baseline_is_the_early_side_and_the_minutes_count_from_the_traffic():
    rec = _recording()
    rows, cycles = ttv.frames(rec.main[:20], rec.control[:20], rec.period_s, baseline=8)
    series, _ = controls.probe_series(rows, cycles)
    assert controls.baseline(series) == 9  # the start cycle and the eight of the baseline
    assert controls.baseline(controls.probe_series(*ttv.frames(rec.main[:20], rec.control[:20], 10.0))[0]) == 0
    # a loss of half from the traffic's second minute: decided age, timed from the traffic's start
    rng = np.random.default_rng(0)
    (trial,) = ttv.run_scenario(rec, 0.5, 1, horizon_min=5, onset_min=1, rng=rng, baseline=8)
    assert trial.first_age_min is not None and 1.0 <= trial.first_age_min < 2.5
    # a healthy run with a baseline rules out a 15 % loss and is never called aged
    (healthy,) = ttv.run_scenario(rec, 0.0, 1, horizon_min=5, onset_min=1, rng=rng, baseline=8)
    assert healthy.first_age_min is None and healthy.no_age_min[0.15] is not None


def test_a_live_soak_with_a_baseline_counts_its_minutes_from_the_traffic(tmp_path, fake_server):
    import json

    import time_to_verdict_live as live

    from rundir import reader
    from tests.soak.test_until_decided import _run

    main = fake_server("--token-delay", "0.004", "--jitter", "0.1", "--slow-after-calls", "1", "--slow-factor", "2.5")
    control = fake_server("--token-delay", "0.004", "--jitter", "0.1")
    run_dir, _ = _run(tmp_path, main, control, "--baseline", "8")
    result = live.read_live(run_dir, fault=False)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    decided_t = next(e["t"] for e in events if e["kind"] == "decided")
    first_probe_t = min(e["t"] for e in events if e["kind"] == "probe")
    requests = reader.read_table(run_dir, "requests")
    first_call_t = ttv._unix(requests[requests["kind"] != "probe"]["t_send"]).min()
    assert result.decided == ttv.AGE and result.stop_reason == "decided"
    assert result.decided_min * 60 == pytest.approx(decided_t - first_call_t, abs=1e-3)
    assert first_call_t > first_probe_t + 7 * 0.2  # the baseline's eight cycles came first and are not counted


def test_each_loss_is_held_to_the_target_of_the_largest_targeted_loss_not_above_it():
    assert ttv.target_min(0.10) == 45.0
    assert ttv.target_min(0.15) == ttv.target_min(0.20) == ttv.target_min(0.30) == 15.0
    assert ttv.target_min(0.05) == float("inf")  # below every target: none
