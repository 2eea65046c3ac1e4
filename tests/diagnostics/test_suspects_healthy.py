"""Suspects that mean something (issue 53): a figure is listed only where it tracks the slowdown
beyond the score it reaches on runs known to be healthy (diagnostics.evidence.suspects.HEALTHY_SCORES,
measured by benchmarks/suspect_bar.py), and a figure of the whole process (open files, RSS) never
ranks above an engine figure.

Before the bar, the fixed llama.cpp builds listed `num_fds` (0.37, 0.46) and a healthy demo
`schedule_s` (0.43-0.52); the buggy 0.3.14 listed `num_fds` (0.59) and `rss_in_use_bytes` (0.54)
as suspects 2 and 3 beside `idle_slot_tokens` with nothing saying why.
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from diagnostics.analysis import analyze
from diagnostics.evidence import suspects
from diagnostics.source.source import load_source

TESTS = Path(__file__).resolve().parents[1]
CASES = TESTS / "fixtures" / "case-studies"
HEALTHY = [
    *sorted((TESTS / "fixtures" / "healthy-soaks").iterdir()),
    *sorted((TESTS / "soak" / "fixtures" / "matrix").glob("control-*")),
    CASES / "llamacpp-shared-kv" / "after",
    CASES / "llamacpp-defrag" / "after",
    CASES / "llamacpp-shared-kv" / "after" / "engine.log",
    CASES / "llamacpp-defrag" / "after" / "engine.log",
]


@pytest.mark.parametrize("path", HEALTHY, ids=lambda p: "/".join(p.parts[-3:]))
def test_a_healthy_run_lists_no_suspect(path):
    a = analyze(load_source(path))
    assert a.verdict != "engine_age_degradation"
    assert [(s.name, round(s.score, 3)) for s in a.suspects] == []


def test_the_buggy_build_names_its_mechanism_first_and_the_process_figures_after_it_with_a_reason():
    a = analyze(load_source(CASES / "llamacpp-shared-kv" / "before"))
    names = [s.name for s in a.suspects]
    assert names[0] == "idle_slot_tokens"
    for s in a.suspects[1:]:
        assert suspects.kind(s.name) == "process", names
        assert s.evidence.startswith("a figure of the whole process (it moves with the traffic")
    assert suspects.short(a.suspects[0]) == (
        "KV cells held by idle slots: rose from a median of 0 before the onset to 12,224 after"
    )


def test_a_figure_whose_median_does_not_move_at_the_onset_is_not_listed():
    """The output-buffer fault's run: gc_last_full_pause_s ranked second on its correlation (0.35)
    and read 'rises as decode slows' with a median of 0.1918 before the onset and 0.1918 after."""
    a = analyze(load_source(TESTS / "fixtures" / "aged-soaks" / "demo-output-buffer"))
    assert "gc_last_full_pause_s" not in [s.name for s in a.suspects]
    for s in a.suspects:
        assert " before the onset to " in s.evidence
        verb, first, last = _medians(s.evidence)
        assert (verb == "rose") == (last > first) and first != last, s.evidence


def _medians(evidence: str) -> tuple[str, float, float]:
    """('rose', 1088.0, 71303168.0) from '... rose from a median of 1,088 before the onset to 71,303,168 after ...'."""
    said = evidence.split(" from a median of ", 1)
    verb = said[0].rsplit(" ", 1)[-1]
    first, rest = said[1].split(" before the onset to ", 1)
    return verb, float(first.replace(",", "")), float(rest.split(" after", 1)[0].replace(",", ""))


def test_without_an_onset_the_medians_are_of_the_least_and_most_slowed_samples():
    """A figure high while the engine was slow early and low on the restarted engine late read
    'rises as decode slows ... median 71,303,168 early, 1,088 late': by those numbers it fell. Its
    medians are now of the samples the correlation is about: the least and the most slowed."""
    source, samples = _tracking()
    # The slow half first, the fast half after (a restart): the figure falls over time.
    samples = samples.assign(residual=samples["residual"].to_numpy()[::-1])
    source.snapshots = source.snapshots.assign(slots_held=source.snapshots["slots_held"].to_numpy()[::-1])
    top = suspects.rank(source, samples, None)[0]
    assert top.name == "slots_held"
    assert "higher where decode slows: a median of " in top.evidence
    least, most = (
        top.evidence.split("a median of ", 1)[1]
        .split(" in the quarter with the most", 1)[0]
        .split(" in the quarter of samples with the least slowdown, ")
    )
    assert float(least) < float(most)
    assert " early" not in top.evidence and " late" not in top.evidence


def test_0_3_1_lists_its_batch_halving_and_not_the_clients_sockets():
    """num_fds read 0.453 here and 0.463 on the fixed build beside it: no more than healthy."""
    names = [s.name for s in analyze(load_source(CASES / "llamacpp-defrag" / "before")).suspects]
    assert "kv_no_space" in names and "num_fds" not in names


def test_the_built_in_engine_with_a_growing_output_buffer_names_the_buffer():
    a = analyze(load_source(TESTS / "fixtures" / "aged-soaks" / "demo-output-buffer"))
    assert a.verdict == "engine_age_degradation"
    assert a.suspects[0].name == "output_buffer_bytes"
    kinds = [suspects.kind(s.name) for s in a.suspects]
    assert kinds == sorted(kinds, key=["engine", "process", "step_part"].index)  # the engine's figures first


def _tracking(n: int = 400):
    """A step at the middle of the run: the residual, an engine figure and RSS step up together;
    RSS more cleanly than the engine figure."""
    rng = np.random.default_rng(4)
    t = pd.Timestamp("2026-12-05 04:00:00") + pd.to_timedelta(np.arange(n) * 0.5, unit="s")
    late = np.arange(n) >= n // 2
    residual = np.where(late, 0.4, 0.0) + rng.normal(0, 0.05, n)
    snaps = pd.DataFrame(
        {
            "t": t,
            "engine_life": 0,
            "rss_bytes": 1e9 + np.where(late, 5e8, 0) + rng.normal(0, 1e6, n),
            "slots_held": np.where(late, 10.0, 0.0) + rng.exponential(3.0, n),
        }
    )
    samples = pd.DataFrame(
        {"t": t, "residual": residual, "engine_age_s": np.arange(n) * 0.5, "engine_life": 0, "excluded": ""}
    )
    return SimpleNamespace(snapshots=snaps, steps=pd.DataFrame(), events=pd.DataFrame()), samples


def test_a_process_figure_ranks_after_an_engine_figure_that_explains_the_same_samples():
    source, samples = _tracking()
    ranked = suspects.rank(source, samples, None)
    by_name = {s.name: s.score for s in ranked}
    assert by_name["rss_bytes"] > by_name["slots_held"]  # RSS tracks the step better...
    assert [s.name for s in ranked] == ["slots_held", "rss_bytes"]  # ...and still ranks after the engine's figure


def test_the_bar_is_the_highest_healthy_score_and_a_process_figure_is_held_to_its_kinds():
    assert suspects.bar("idle_slot_tokens") == suspects.HEALTHY_SCORES["idle_slot_tokens"]
    assert suspects.bar("a_figure_no_healthy_run_showed") == suspects.CLASS_BAR["engine"]
    assert suspects.bar("token_usage") == suspects.HEALTHY_SCORES["token_usage"]
    # RSS, open files and CPU all follow the traffic: one bar for them all, the highest any reached.
    assert suspects.bar("cpu_percent") == suspects.bar("num_fds") == suspects.CLASS_BAR["process"]
    assert suspects.CLASS_BAR["process"] >= max(
        v for k, v in suspects.HEALTHY_SCORES.items() if suspects.kind(k) == "process"
    )


def test_a_figure_at_its_healthy_score_is_not_listed(monkeypatch):
    source, samples = _tracking()
    score = {s.name: s.score for s in suspects.rank(source, samples, None)}["slots_held"]
    monkeypatch.setitem(suspects.HEALTHY_SCORES, "slots_held", score)
    assert "slots_held" not in [s.name for s in suspects.rank(source, samples, None)]
