"""Suspect ranking: a per-step figure is judged by its level over a window, not step by step."""

from types import SimpleNamespace

import numpy as np
import pandas as pd

from diagnostics import suspects


def _run(trend: bool):
    """600 decode steps over 60 s; sample_s is part of each step's time. With `trend`, the step
    time steps up at 30 s and sample_s with it; without, both only jitter."""
    rng = np.random.default_rng(0)
    n = 600
    t = pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(np.arange(n) * 0.1, unit="s")
    sample_s = 0.001 + rng.exponential(0.002, n)
    if trend:
        sample_s[n // 2:] += 0.01
    step = 0.02 + rng.normal(0, 0.0005, n) + sample_s
    steps = pd.DataFrame({"t": t, "engine_life": 0, "sample_s": sample_s})
    samples = pd.DataFrame({"t": t, "residual": np.log(step / 0.023), "engine_age_s": np.arange(n) * 0.1,
                            "excluded": ""})
    return SimpleNamespace(snapshots=pd.DataFrame(), steps=steps), samples


def test_a_component_of_the_step_time_is_not_a_suspect_by_construction():
    source, samples = _run(trend=False)
    # Step by step, sample_s correlates with the residual (it is part of the step time)...
    assert abs(np.corrcoef(source.steps["sample_s"].rank(), samples["residual"].rank())[0, 1]) > 0.5
    # ...but its level over a window does not track anything, so it is not ranked.
    assert [s.name for s in suspects.rank(source, samples, None)] == []


def test_a_component_whose_level_moves_with_the_slowdown_still_ranks():
    source, samples = _run(trend=True)
    assert [s.name for s in suspects.rank(source, samples, None)] == ["sample_s"]


def test_an_engine_figure_that_tracks_the_slowdown_ranks_before_a_part_of_the_step_time():
    source, samples = _run(trend=True)
    n = len(samples)
    rng = np.random.default_rng(1)
    # A hook figure that steps up with the slowdown, but more noisily than sample_s follows it.
    pause = np.where(np.arange(n) >= n // 2, 0.01, 0.0) + rng.exponential(0.004, n)
    source.snapshots = pd.DataFrame({"t": source.steps["t"], "gc_pause_s": pause})
    names = [s.name for s in suspects.rank(source, samples, None)]
    assert names[0] == "gc_pause_s" and "sample_s" in names[1:]
