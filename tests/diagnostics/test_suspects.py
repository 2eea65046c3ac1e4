"""Suspect ranking: a per-step figure is judged by its level over a window, not step by step."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from diagnostics.evidence import suspects
from diagnostics.result import Suspect


def _run(trend: bool):
    """600 decode steps over 60 s; sample_s is part of each step's time. With `trend`, the step
    time steps up at 30 s and sample_s with it; without, both only jitter."""
    rng = np.random.default_rng(0)
    n = 600
    t = pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(np.arange(n) * 0.1, unit="s")
    sample_s = 0.001 + rng.exponential(0.002, n)
    if trend:
        sample_s[n // 2 :] += 0.01
    step = 0.02 + rng.normal(0, 0.0005, n) + sample_s
    steps = pd.DataFrame({"t": t, "engine_life": 0, "sample_s": sample_s})
    samples = pd.DataFrame(
        {"t": t, "residual": np.log(step / 0.023), "engine_age_s": np.arange(n) * 0.1, "excluded": ""}
    )
    return SimpleNamespace(snapshots=pd.DataFrame(), steps=steps, events=pd.DataFrame()), samples


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


def _filling_run(extra_share: float):
    """A slowdown that grows from engine start over 120 s, a cache fill level that rises with it
    and then flattens, and a time counter that takes `extra_share` more of wall time after 60 s."""
    rng = np.random.default_rng(2)
    n = 1200
    age = np.arange(n) * 0.1
    t = pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(age, unit="s")
    residual = 0.004 * age + rng.normal(0, 0.05, n)
    snap_age = np.arange(0, 120, 2.0)
    fill = 16384 * (1 - np.exp(-snap_age / 25))  # fills over the first minute, flat after
    share = np.where(snap_age > 60, 0.02 + extra_share, 0.02)  # over the 2 s before each snapshot
    work_s_total = np.concatenate([[0.0], np.cumsum(share[1:] * 2.0)])
    snapshots = pd.DataFrame(
        {
            "t": pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(snap_age, unit="s"),
            "engine_life": 0,
            "cached_tokens": fill,
            "work_s_total": work_s_total,
        }
    )
    samples = pd.DataFrame({"t": t, "residual": residual, "engine_age_s": age, "engine_life": 0, "excluded": ""})
    onset = SimpleNamespace(t=t[n // 2], engine_age_s=60.0, engine_life=0)
    return SimpleNamespace(snapshots=snapshots, steps=pd.DataFrame(), events=pd.DataFrame()), samples, onset


def test_a_time_counter_that_adds_wall_time_ranks_before_a_figure_that_merely_fills_up():
    source, samples, onset = _filling_run(extra_share=0.3)
    ranked = suspects.rank(source, samples, onset)
    assert [s.name for s in ranked][:2] == ["work_s_total", "cached_tokens"]
    assert ranked[0].score == pytest.approx(0.3, abs=0.02)
    assert ranked[0].evidence == (
        "30.0% more of the engine's wall time went into it as decode slows: 32.0% after the slowdown began, 2.0% before"
    )


def test_a_time_counter_whose_share_barely_moves_is_ranked_by_correlation_only():
    source, samples, onset = _filling_run(extra_share=0.01)
    names = [s.name for s in suspects.rank(source, samples, onset)]
    assert names[0] == "cached_tokens"


def _from_the_start_run(fresh_share: float):
    """A time counter that takes half the wall time from the engine's first seconds (no youth
    without it, the onset found late at 110 s), then a restart: the next life's 30 s of snapshots
    take `fresh_share`."""
    source, samples, _ = _filling_run(extra_share=0.0)
    start = pd.Timestamp("2026-11-30 04:00:00")
    life0 = source.snapshots.assign(work_s_total=0.5 * np.arange(0, 120, 2.0))
    age = np.arange(0, 30, 2.0)
    life1 = pd.DataFrame(
        {
            "t": start + pd.to_timedelta(125 + age, unit="s"),
            "engine_life": 1,
            "cached_tokens": 0.0,
            "work_s_total": fresh_share * age,
        }
    )
    source.snapshots = pd.concat([life0, life1], ignore_index=True)
    onset = SimpleNamespace(t=samples["t"].iloc[1100], engine_age_s=110.0, engine_life=0)
    return source, samples, onset


def test_a_time_counter_of_a_fault_that_acts_from_the_start_is_judged_against_the_restarted_engine():
    source, samples, onset = _from_the_start_run(fresh_share=0.05)
    ranked = suspects.rank(source, samples, onset)
    assert ranked[0].name == "work_s_total"
    assert ranked[0].evidence == (
        "45.0% more of the engine's wall time went into it as decode slows: 50.0% in the later half "
        "of the engine's life, 5.0% once restarted"
    )


def test_a_time_counter_the_restarted_engine_spends_as_much_on_is_no_timed_suspect():
    source, samples, onset = _from_the_start_run(fresh_share=0.5)
    ranked = suspects.rank(source, samples, onset)
    assert all("once restarted" not in s.evidence and "wall time" not in s.evidence for s in ranked)


def test_rss_is_judged_net_of_what_malloc_keeps_so_a_kept_step_up_at_the_onset_is_no_suspect():
    """The slowdown steps up at 30 s; so does the engine's RSS, by 300 MB that malloc freed and
    keeps (a big step ran then). Raw RSS tracks the slowdown; the memory the engine holds does
    not, and is what is ranked, where the snapshots carry the kept memory."""
    source, samples = _run(trend=True)
    n = len(samples)
    rng = np.random.default_rng(3)
    kept = np.where(np.arange(n) >= n // 2, 300e6, 50e6)
    in_use = 900e6 + rng.normal(0, 2e6, n)
    source.steps = source.steps.drop(columns="sample_s")
    source.snapshots = pd.DataFrame({"t": source.steps["t"], "rss_bytes": in_use + kept})
    assert [s.name for s in suspects.rank(source, samples, None)] == ["rss_bytes"]  # no kept figure: raw
    source.snapshots["heap_kept_bytes"] = kept
    assert [s.name for s in suspects.rank(source, samples, None)] == []
    source.snapshots["rss_bytes"] += np.where(np.arange(n) >= n // 2, 200e6, 0)  # held memory that steps up
    assert [s.name for s in suspects.rank(source, samples, None)] == ["rss_in_use_bytes"]


def test_a_figure_in_the_snapshots_and_the_steps_is_one_suspect():
    # A URL target: KV usage from its /metrics in every snapshot, and from its log in the steps.
    source, samples = _run(trend=True)
    usage = np.where(np.arange(len(samples)) >= len(samples) // 2, 0.9, 0.2)
    source.steps = source.steps.assign(token_usage=usage)
    source.snapshots = pd.DataFrame({"t": source.steps["t"], "token_usage": usage})
    names = [s.name for s in suspects.rank(source, samples, None)]
    assert names.count("token_usage") == 1


def test_the_medians_a_suspect_states_read_back_for_the_first_lines():
    """An undecided verdict says a suspect that moved a lot in its third line (diagnostics.words.opening):
    the medians it says are those the evidence states, read back from the words _move wrote."""
    source, samples = _run(trend=True)
    onset = SimpleNamespace(t=samples["t"].iloc[len(samples) // 2], engine_age_s=30.0, engine_life=0)
    for at in (None, onset):
        (s,) = suspects.rank(source, samples, at)
        m = suspects.moved(s)
        assert m is not None and m.at_onset == (at is not None)
        assert m.last > m.first and m.factor > 2  # sample_s steps up by 0.01 over a level of about 0.003
        said = suspects.plainly(s)
        assert said is not None and suspects._num(m.first) in said and suspects._num(m.last) in said
        assert said.startswith("`sample_s` rose from" if at is not None else "`sample_s` was ")
    timed = Suspect("work_s_total", 0.08, "8.0% more of the engine's wall time went into it as ...")
    assert suspects.moved(timed) is None  # shares of wall time, no medians


def test_a_list_out_of_score_order_says_its_order():
    """after-4: output_buffer_bytes 0.36, kv_gather_breaks 0.23, then schedule_s 0.54, unexplained."""
    listed = [
        Suspect("output_buffer_bytes", 0.36, ""),
        Suspect("kv_gather_breaks", 0.23, ""),
        Suspect("schedule_s", 0.54, ""),
    ]
    assert suspects.order_note(listed) == (
        "in this order: the engine's own figures first, parts of the step time last, which say where the time "
        "went, not why; by score within each"
    )
    assert suspects.order_note(sorted(listed, key=lambda s: -s.score)) is None
