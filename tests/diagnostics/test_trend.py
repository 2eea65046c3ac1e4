"""A slowdown's shape and rate over engine age (diagnostics.evidence.trend) and the latest stretch it is judged on."""

import datetime as dt
import math

import numpy as np
import pytest

from diagnostics.analysis import analyze
from diagnostics.evidence import trend
from diagnostics.source.source import load_source
from logsim.synthetic import Scenario, write
from reports import narrative

START = dt.datetime(2026, 9, 23, 9, 0, 0)


def _creep_log(tmp_path, per_hour=0.06, hours=6.0, noise=0.02, seed=0):
    """vLLM at a steady batch of 4 whose step time grows `per_hour` per hour of uptime; context
    wanders over the same band all the while (matched conditions, no step)."""
    rng = np.random.default_rng(seed)
    lines = [f"(APIServer pid=1) INFO {START:%m-%d %H:%M:%S} [api_server.py:1805] vLLM API server version 0.10.1.1"]
    for k in range(1, int(hours * 360) + 1):
        usage = 0.2 + 0.3 * ((k * 7) % 10) / 10
        step = (0.016 + 0.02 * usage) * (1 + per_hour * k / 360) * math.exp(rng.normal(0, noise))
        now = START + dt.timedelta(seconds=10 * k)
        lines.append(
            f"(APIServer pid=1) INFO {now:%m-%d %H:%M:%S} [loggers.py:123] Engine 000: Avg prompt throughput: "
            f"0.0 tokens/s, Avg generation throughput: {4 / step:.1f} tokens/s, Running: 4 reqs, Waiting: 0 "
            f"reqs, GPU KV cache usage: {100 * usage:.1f}%, Prefix cache hit rate: 80.0%"
        )
    path = tmp_path / "creep.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_creep_reads_gradual_with_its_rate_and_the_latest_stretch_against_healthy(tmp_path):
    """Six hours of 6 %/h: by the end the engine is ~25 % slower than fresh. The ratio is the last
    quarter's against the healthy window (after the onset counted it at 0.86: the whole creep,
    half of it young), and the rate per hour comes with its interval."""
    result = analyze(load_source(_creep_log(tmp_path), year=2026))
    doc = result.to_dict()
    assert doc["verdict"] == "engine_age_degradation"
    s = doc["slowdown"]
    assert s["shape"] == "gradual"
    # The last quarter (4.5-6 h, step time x1.27-1.36) over the first (x1.00-1.09): about 0.79.
    assert 0.76 <= s["ratio"] <= 0.82
    assert s["degraded_tps"] == pytest.approx(s["healthy_tps"] * s["ratio"], rel=0.01)
    lo, hi = s["per_hour"]["interval"]
    assert -0.065 < lo < s["per_hour"]["estimate"] < hi < -0.035  # 6 %/h of the fresh step time
    # The onset: where the trend stands out of 2 % noise, well before it reaches the 10 % that counts
    # as material (1.7 h); it has no trigger, and its window is how long it had been rising.
    onset = doc["onset"]
    assert 0 < onset["engine_age_s"] < 1.7 * 3600 and onset["trigger"] is None
    assert onset["window_s"] == pytest.approx(onset["engine_age_s"], abs=15 * 60)
    text = narrative.paragraph(result)
    assert "crept down with engine age" in text and "where the trend first stood out of the healthy noise" in text
    keys = {k.label: k.value for k in narrative.key_numbers(result)}
    assert keys["shape"].startswith("gradual") and keys["decode speed trend"].startswith("-")


def test_a_step_reads_step_and_keeps_no_trend_after_it(tmp_path):
    path = write(Scenario(hours=2, onset_h=1.0), "freetoken", tmp_path / "step.log")
    s = analyze(load_source(path)).to_dict()["slowdown"]
    assert s["shape"] == "step" and s["ratio"] == pytest.approx(0.25, abs=0.03)
    lo, hi = s["per_hour"]["interval"]
    assert lo < 0 < hi  # after the step, the engine holds its new level


def test_a_healthy_engine_has_no_shape_and_a_flat_trend(tmp_path):
    path = write(Scenario(hours=1.5), "freetoken", tmp_path / "flat.log")
    s = analyze(load_source(path)).to_dict()["slowdown"]
    assert s["shape"] is None
    assert abs(s["per_hour"]["estimate"]) < 0.02


def test_the_fit_tells_a_level_shift_from_a_hinge():
    age = np.arange(0, 6 * 3600, 10.0)
    rng = np.random.default_rng(1)
    step = np.where(age > 2 * 3600, 0.5, 0.0) + rng.normal(0, 0.02, len(age))
    hinge = 0.06 * np.maximum(0, age / 3600 - 1.0) + rng.normal(0, 0.02, len(age))
    s, h = trend.fit(age, step), trend.fit(age, hinge)
    assert s.shape == "step" and abs(s.change_age_s - 2 * 3600) < 300
    assert h.shape == "gradual" and abs(h.change_age_s - 3600) < 900 and h.slope_per_h == pytest.approx(0.06, rel=0.15)
    rate = trend.per_hour(age, hinge, h.change_age_s)
    assert rate.lo < math.expm1(-0.06) < rate.hi
    assert trend.fit(age[:4], step[:4]) is None  # too few to tell


def test_a_per_hour_rate_from_seconds_of_data_is_none_not_an_overflow():
    """A soak that decided in 40 s: its residual's slope, extrapolated to an hour, read e^840, and
    `diag analyze` died in math.expm1 with an OverflowError. Beyond MAX_LOG_PER_H a per-hour figure
    says nothing: none is given, and a rate within it is still given."""
    age = np.linspace(0.0, 30.0, 60)
    with np.errstate(all="ignore"):
        assert trend.per_hour(age, np.linspace(0.0, -7.0, 60)) is None  # e^840 an hour
        assert trend.per_hour(age, np.linspace(0.0, 7.0, 60)) is None
    hours = np.linspace(0.0, 3600.0 * 4, 240)
    p = trend.per_hour(hours, np.linspace(0.0, 0.4, 240))  # 10% a hour slower step time
    assert p is not None and math.isclose(p.estimate, math.expm1(-0.1), rel_tol=1e-6)
