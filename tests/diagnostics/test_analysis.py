"""Analysis truths: the seed excerpt, each format with a known slowdown, context growth, flat, too little."""

import datetime as dt
import subprocess
import sys

import pandas as pd
import pytest

from diagnostics.analysis import analyze
from diagnostics.source.source import load_source
from logsim.synthetic import FORMATS, Scenario, write

DESIGN_KEYS = ["schema_version", "verdict", "slowdown", "onset", "recovered_by_restart", "suspects", "checks"]
AGE = Scenario(hours=2, onset_h=1.0, restart_h=1.6)
CONTEXT = Scenario(hours=2, batch=1, context_reset=None, context_start=10_000, append=(1000, 4000), per_token_s=2e-7)
FLAT = Scenario(hours=1.5, per_token_s=1e-9)  # context costs next to nothing
SAWTOOTH = Scenario(hours=1.5)  # sessions grow 20K -> 40K tokens and start again: each 20% slower at its end


def _analyze(tmp_path, sc, fmt):
    path = write(sc, fmt, tmp_path / f"{fmt}.log")
    return analyze(load_source(path, year=2026)).to_dict()


def test_seed_excerpt_is_engine_age_with_onset_and_trigger(excerpt):
    doc = analyze(load_source(excerpt, date=dt.date(2026, 9, 23))).to_dict()
    assert list(doc)[: len(DESIGN_KEYS)] == DESIGN_KEYS and doc["schema_version"] == 1
    assert list(doc)[len(DESIGN_KEYS) :] == [
        "age_basis",
        "prefix_reuse",
        "prefill",
        "confidence",
        "basis",
        "cause",
        "reason",
        "comparisons",
        "clock",
        "lives",
    ]
    assert doc["clock"] == "wall" and doc["lives"][0]["identity"]["moe_backend"] == "offload"
    # Its interval would make it high; two healthy lines cap it at medium (a data check warns, and says
    # so), and a figure on 2 early samples against 3 late at low (diagnostics.decision.caps.thin).
    assert doc["confidence"] == "low" and doc["basis"] == "step_series" and doc["cause"] == "engine_age"
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["confidence_cap"]["status"] == "warn" and "healthy_model" in checks["confidence_cap"]["detail"]
    assert checks["thin_data"]["status"] == "warn" and "rests on 2 early and 3 late" in checks["thin_data"]["detail"]
    assert doc["reason"].startswith(
        "Engine age, low confidence (high by its interval, lowered: see confidence_cap and thin_data)"
    )
    assert doc["verdict"] == "engine_age_degradation"
    assert doc["onset"]["t"] == "2026-09-23T21:18:50"
    assert doc["onset"]["engine_age_s"] == 938
    assert doc["onset"]["trigger"] == {
        "kind": "prefill_append",
        "t": "2026-09-23T21:18:50",
        "new_tokens": 5792,
        "cached_tokens": 121712,
    }
    assert doc["recovered_by_restart"] is None  # the excerpt holds no restart
    assert doc["slowdown"]["ratio"] < 0.2
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["decode_after_prefill_or_idle"]["detail"].startswith("2 of 7")  # the 3.63 and the 1.80
    assert checks["context_only_model"]["detail"].startswith("context cannot explain it")


@pytest.mark.parametrize("fmt", FORMATS)
def test_known_slowdown_is_found_in_every_format(tmp_path, fmt):
    doc = _analyze(tmp_path, AGE, fmt)
    assert doc["verdict"] == "engine_age_degradation"
    onset = pd.Timestamp(doc["onset"]["t"])
    assert abs(onset - pd.Timestamp("2026-09-23 10:00:00")) < pd.Timedelta(minutes=2)
    assert doc["slowdown"]["ratio"] == pytest.approx(0.25, abs=0.03)
    assert doc["recovered_by_restart"] is True
    if fmt not in ("vllm", "prometheus"):  # their samples hold no single prefill
        assert doc["onset"]["trigger"]["new_tokens"] == 5792
        assert doc["onset"]["trigger"]["cached_tokens"] == 121712


@pytest.mark.parametrize("fmt", ["freetoken", "sglang-old", "vllm", "prometheus"])
def test_context_growth_alone_is_not_called_engine_age(tmp_path, fmt):
    doc = _analyze(tmp_path, CONTEXT, fmt)
    assert doc["verdict"] == "context_growth_only"
    raw = {c["name"]: c for c in doc["checks"]}["raw_throughput"]
    assert (
        raw["status"] == "warn" and float(raw["detail"].split("is ")[1].split("x")[0]) < 0.5
    )  # raw throughput did fall
    assert doc["slowdown"]["ratio"] == pytest.approx(1.0, abs=0.05)  # matched: no loss
    assert doc["slowdown"]["degraded_tps"] == pytest.approx(
        doc["slowdown"]["healthy_tps"] * doc["slowdown"]["ratio"], rel=0.01
    )  # the three figures agree
    lo, hi = doc["slowdown"]["interval"]
    assert 0.9 < lo <= doc["slowdown"]["ratio"] <= hi  # a material loss is ruled out
    assert doc["onset"] is None


@pytest.mark.parametrize("fmt", ["freetoken", "sglang"])
def test_flat_log_is_no_degradation(tmp_path, fmt):
    doc = _analyze(tmp_path, FLAT, fmt)
    assert doc["verdict"] == "no_degradation"
    assert doc["onset"] is None


@pytest.mark.parametrize("fmt", ["freetoken", "sglang"])
def test_sessions_that_grow_and_start_again_are_named_context_growth(tmp_path, fmt):
    """No age, and the raw rate is back where it began at every new session; but decode ran materially
    slower at the end of each session, and the user asked why: context, with the figure."""
    doc = _analyze(tmp_path, SAWTOOTH, fmt)
    assert doc["verdict"] == "context_growth_only" and doc["cause"] == "context_growth"
    assert "Context explains what slowed: decode runs" in doc["reason"] and "tokens of context than at" in doc["reason"]
    assert doc["onset"] is None


def test_excerpt_style_log_where_context_explains_it(tmp_path):
    """Few points, no context in the healthy lines: the generous context-only model explains it."""
    path = tmp_path / "ctx-2026-09-23.log"
    path.write_text(
        "\n".join(
            [
                "10:00:00  Resolved config: moe_backend='offload'",
                "10:01:00  Decode batch, #running-req: 1, gen throughput (token/s): 60.00",
                "10:01:30  Decode batch, #running-req: 1, gen throughput (token/s): 62.00",
                "10:10:00  Decode batch, #token: 100000, gen throughput (token/s): 30.00",
                "10:10:10  Decode batch, #token: 150000, gen throughput (token/s): 22.00",
                "10:10:20  Decode batch, #token: 200000, gen throughput (token/s): 17.50",
            ]
        )
        + "\n"
    )
    doc = analyze(load_source(path)).to_dict()
    assert doc["verdict"] == "context_growth_only"
    detail = {c["name"]: c for c in doc["checks"]}["context_only_model"]["detail"]
    assert detail.startswith("context explains the slowdown")


def test_too_little_data_is_insufficient(tmp_path):
    path = tmp_path / "short-2026-09-23.log"
    path.write_text(
        "10:00:00  Decode batch, #running-req: 1, gen throughput (token/s): 60.00\n"
        "10:00:10  Decode batch, #running-req: 1, gen throughput (token/s): 20.00\n"
    )
    doc = analyze(load_source(path)).to_dict()
    assert doc["verdict"] == "insufficient_data"
    assert doc["slowdown"] is None and doc["onset"] is None
    data = {c["name"]: c for c in doc["checks"]}["data"]
    assert data["status"] == "fail" and "usable decode samples" in data["detail"]


def test_analysis_keeps_the_series_a_report_plots(tmp_path):
    path = write(AGE, "freetoken", tmp_path / "ft.log")
    result = analyze(load_source(path))
    assert result.model is not None and result.model.context_identified
    assert {"t", "residual", "excluded", "healthy", "step_time_s"} <= set(result.samples.columns)
    assert len(result.changepoints.segments) >= 2


def test_diagnostics_never_imports_torch(excerpt):
    code = (
        "import sys, datetime\n"
        "from diagnostics.source.source import load_source\n"
        "from diagnostics.analysis import analyze\n"
        "import tokdrift.cli.diag, diagnostics.words.console, logsim.synthetic\n"
        f"analyze(load_source({str(excerpt)!r}, date=datetime.date(2026, 9, 23)))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'engine', 'soak'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_an_onset_inside_the_early_window_does_not_teach_the_model_the_slowdown(tmp_path):
    path = write(Scenario(hours=2, onset_h=0.15), "freetoken", tmp_path / "early.log")
    result = analyze(load_source(path))
    assert result.verdict == "engine_age_degradation"
    assert abs(pd.Timestamp(result.onset.t) - pd.Timestamp("2026-09-23 09:09:00")) < pd.Timedelta(minutes=1)
    intercept, per_token = result.model.coef
    assert intercept == pytest.approx(0.012 + 0.002, rel=0.1)  # a + b * batch of the simulated engine
    assert per_token == pytest.approx(1.5e-7, rel=0.1)


def test_a_slowdown_a_fresh_engine_shows_too_is_not_engine_age(tmp_path):
    """The restart is the control: when the engine after it runs as slow as before it, the
    slowdown is the host's or the load's, whatever the step series alone says."""
    sc = Scenario(hours=2, onset_h=1.0, restart_h=1.5, restart_cures=False)
    doc = _analyze(tmp_path, sc, "sglang")
    assert doc["verdict"] == "no_degradation" and doc["cause"] == "host_or_load_drift"
    assert doc["recovered_by_restart"] is False
    fresh = {c["name"]: c for c in doc["checks"]}["fresh_control"]
    assert fresh["status"] == "warn" and "not the engine's age" in fresh["detail"]


def test_a_context_slope_is_not_trusted_far_beyond_the_window_that_fitted_it():
    """A healthy window of short contexts fixes no slope for contexts several times longer: there
    the verdict must also pass the generous context-only test."""
    from diagnostics.evidence.context import beyond_window
    from diagnostics.evidence.healthy import HealthyModel

    model = HealthyModel(
        terms=("intercept", "context"),
        coef=(0.016, 0.0),
        engine_life=0,
        num_points=100,
        t_end=None,
        batch_values=(1.0,),
        context_range=(300.0, 1000.0),
        r2=None,
    )
    assert beyond_window(model, pd.DataFrame({"context": [2000.0, 3000.0, 900.0]}))
    assert not beyond_window(model, pd.DataFrame({"context": [500.0, 900.0, 2000.0]}))


def test_a_short_excursion_then_a_small_loss_is_not_engine_age(tmp_path):
    """The onset segment runs 20% slow for a while, then the engine settles 8% below where it
    began: the onset segment cleared the 10% bar, but what follows the onset did not."""
    import numpy as np

    rng = np.random.default_rng(0)
    t = dt.datetime(2026, 9, 23, 9, 0, 10)
    lines = ["09:00:00  Resolved config: moe_backend='offload'"]
    for i, tps in enumerate([60.0] * 120 + [48.0] * 15 + [55.5] * 120):
        lines.append(
            f"{t:%H:%M:%S}  Decode batch, #running-req: 1, #token: {20000 + (i % 10) * 1000}, "
            f"gen throughput (token/s): {tps * np.exp(rng.normal(0, 0.01)):.2f}"
        )
        t += dt.timedelta(seconds=5)
    path = tmp_path / "excursion-2026-09-23.log"
    path.write_text("\n".join(lines) + "\n")
    doc = analyze(load_source(path)).to_dict()
    assert doc["verdict"] == "no_degradation"
    assert {c["name"]: c for c in doc["checks"]}["material_loss"]["status"] == "warn"


def test_a_noisy_neighbour_with_no_control_is_host_contention_not_engine_age(tmp_path):
    from tests.diagnostics.rundirs import make_run_dir

    run = make_run_dir(
        tmp_path / "run", fault_at_min=None, restart_at_min=None, host_slows_at_min=30, host_columns=True
    )
    doc = analyze(load_source(run)).to_dict()
    # The slowdown is real and the host's: without a control nothing can show whether age added to it.
    assert doc["verdict"] == "insufficient_data" and doc["cause"] == "host_or_load_drift"
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["host_contention"]["status"] == "warn" and "to 103% of a core" in checks["host_contention"]["detail"]
    # Decode and prefill both slowed under the contention: one check names both, the reason once.
    assert [c["name"] for c in doc["checks"]].count("host_contention") == 1
    assert "prefill slowed too" in checks["host_contention"]["detail"]
    assert "(host_contention)" in doc["reason"]


def test_a_fresh_twin_cancels_host_drift_and_keeps_engine_age_visible(tmp_path):
    from tests.diagnostics.rundirs import make_run_dir

    drift = make_run_dir(tmp_path / "drift", fault_at_min=None, restart_at_min=None, host_slows_at_min=30, twin=True)
    doc = analyze(load_source(drift)).to_dict()
    # The paired control rules a loss out; the probes, bins and step series are each corrected by
    # the control's drift, and the verdict rests on the narrowest of them, alone or together.
    assert doc["verdict"] == "no_degradation" and doc["cause"] == "host_or_load_drift"
    assert doc["confidence"] == "high"
    assert doc["slowdown"]["ratio"] == pytest.approx(1.0, abs=0.05)  # net of the host: not the host's 0.62
    assert {c["name"]: c for c in doc["checks"]}["fresh_control"]["status"] == "warn"
    aged = make_run_dir(tmp_path / "aged", restart_at_min=None, host_slows_at_min=20, twin=True)
    doc = analyze(load_source(aged)).to_dict()
    assert doc["verdict"] == "engine_age_degradation" and doc["basis"] == "paired_control"
    assert doc["slowdown"]["ratio"] == pytest.approx(1 / 3, rel=0.1)  # the fault's 3x, not the host's 1.6x on top
    assert abs(pd.Timestamp(doc["onset"]["t"]) - pd.Timestamp(1_790_000_000 + 30 * 60, unit="s")) < pd.Timedelta(
        minutes=4
    )


VLLM_EXCERPT = [  # six 10 s windows pasted from a report, the first two carrying a prompt's prefill
    ("14:22:11", 2841.6, 3.2, 11.9),
    ("14:22:21", 1204.3, 4.1, 17.0),
    ("14:22:31", 0.0, 61.8, 17.3),
    ("14:22:41", 0.0, 62.3, 17.5),
    ("14:22:51", 0.0, 61.5, 17.8),
    ("14:23:01", 0.0, 60.9, 18.0),
]


def test_six_windows_of_vllm_are_too_short_to_rule_engine_age_out(tmp_path):
    """Before: the prefill windows made 'healthy' and late read 15.7x faster, and diag said
    no_degradation. Now those windows are kept out, and what is left covers 30 s."""
    path = tmp_path / "vllm.log"
    path.write_text(
        "".join(
            f"(APIServer pid=1933) INFO 11-04 {t} [loggers.py:123] Engine 000: Avg prompt throughput: {p:.1f} tokens/s, "
            f"Avg generation throughput: {g:.1f} tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: {u:.1f}%, "
            f"Prefix cache hit rate: 31.2%\n"
            for t, p, g, u in VLLM_EXCERPT
        )
    )
    doc = analyze(load_source(path, year=2026)).to_dict()
    assert doc["verdict"] == "insufficient_data" and doc["confidence"] is None
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["data_span"]["status"] == "fail" and "30 s of engine time" in checks["data_span"]["detail"]
    assert "2 of 6 decode lines" in checks["decode_after_prefill_or_idle"]["detail"]


def test_a_ratio_no_engine_could_show_is_a_failed_matching(tmp_path):
    """Two machines' logs pasted into one: the second hour decodes 20x faster at the same batch and
    context. No engine ages into a twentyfold speedup: the matching failed."""
    t = dt.datetime(2026, 9, 23, 9, 0, 0)
    lines = [f"[{t:%Y-%m-%d|%H:%M:%S}] INFO     Resolved config: moe_backend='offload'"]
    for k in range(720):
        tps = (60.0 if k < 360 else 1200.0) * (1 + 0.01 * (k % 5))
        lines.append(
            f"[{t + dt.timedelta(seconds=10 + 10 * k):%Y-%m-%d|%H:%M:%S}] INFO     Decode batch, "
            f"#running-req: 2, #token: {20000 + 3000 * (k % 10)}, gen throughput (token/s): {tps:.2f}"
        )
    path = tmp_path / "pasted.log"
    path.write_text("\n".join(lines) + "\n")
    doc = analyze(load_source(path)).to_dict()
    assert doc["verdict"] == "insufficient_data" and doc["slowdown"] is None and doc["confidence"] is None
    sanity = {c["name"]: c for c in doc["checks"]}["ratio_sanity"]
    assert sanity["status"] == "fail" and "outside" not in sanity["detail"] and "0.02-5" in sanity["detail"]
    assert "the matching failed" in doc["reason"]
