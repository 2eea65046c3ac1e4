"""Prefix reuse of continuation turns, early against late (diagnostics.evidence.reuse)."""

import numpy as np
import pandas as pd

from diagnostics.analysis import analyze
from diagnostics.evidence import reuse
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source
from tests.diagnostics.rundirs import make_run_dir


def _requests(shares, kinds=None, turns=None):
    n = len(shares)
    t = pd.Timestamp("2026-11-30 04:00:00") + pd.to_timedelta(np.arange(n) * 5.0, unit="s")
    prompt = np.full(n, 2000)
    return pd.DataFrame(
        {
            "kind": kinds or ["turn"] * n,
            "turn": turns or list(range(1, n + 1)),
            "status": "ok",
            "t_send": t,
            "t_first_token": t + pd.to_timedelta(0.5 + 2.0 * (1 - np.asarray(shares)), unit="s"),
            "prompt_tokens": prompt,
            "cached_tokens": (np.asarray(shares) * prompt).round(),
            "engine_age_s": np.arange(n) * 5.0,
            "engine_life": 0,
        }
    )


def test_reuse_that_collapses_is_a_loss_with_its_onset():
    shares = [0.8, 0.85, 0.9, 0.75, 0.8, 0.9, 0.85, 0.8] + [0.0] * 10
    cmp = reuse.compare(_requests(shares))
    assert cmp.loss and cmp.ratio == 0.0 and cmp.healthy_share > 0.7
    assert cmp.onset_age_s == 40.0  # the first call that got nothing from the cache
    assert cmp.recomputed_tokens > 1000
    assert cmp.ttft_late_s > cmp.ttft_healthy_s


def test_steady_reuse_with_an_occasional_miss_is_no_loss():
    rng = np.random.default_rng(0)
    shares = list(np.clip(0.85 + rng.normal(0, 0.05, 30), 0, 1))
    shares[12] = shares[20] = shares[27] = 0.0  # after a compaction, say
    cmp = reuse.compare(_requests(shares))
    assert not cmp.loss and 0.9 < cmp.ratio < 1.1


def test_first_turns_and_compactions_are_not_continuations():
    # Only the first turns of sessions and compactions lose reuse: not a loss.
    n = 24
    kinds = ["compaction" if i >= 12 else "turn" for i in range(n)]
    shares = [0.8] * 12 + [0.0] * 12
    assert reuse.compare(_requests(shares, kinds=kinds)) is None  # 12 continuation turns only: too few late
    turns = [1 if i < 12 else 0 for i in range(n)]
    assert reuse.compare(_requests(shares, turns=turns)) is None


def test_a_run_whose_cache_stops_reusing_is_engine_age_with_the_leak_first(tmp_path):
    source = load_source(make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None, reuse_lost_at_min=30))
    a = analyze(source)
    assert a.verdict == "engine_age_degradation" and a.age_basis == "prefix_reuse"
    assert a.suspects[0].name == "state_slots_leaked" and "prefix reuse falls" in a.suspects[0].evidence
    assert 29 * 60 <= a.onset.engine_age_s <= 33 * 60
    assert a.to_dict()["prefix_reuse"]["loss"] is True
    # The headline figure is the claim's (prefix reuse), decode's own beside it: decode itself held.
    assert a.slowdown.basis == "prefix_reuse" and a.slowdown.ratio < 0.5
    assert a.to_dict()["slowdown"]["healthy_tps"] is None
    assert a.decode_held.ratio > 0.9


def test_a_healthy_run_reports_its_reuse_as_ok(tmp_path):
    a = analyze(load_source(make_run_dir(tmp_path / "run", fault_at_min=None, restart_at_min=None)))
    assert a.verdict == "context_growth_only" and a.age_basis == "decode"  # its contexts cost 12% at the long end
    (check,) = [c for c in a.checks if c.name == "prefix_reuse"]
    assert check.status == CheckStatus.OK


def test_reuse_lost_within_the_first_third_still_has_a_healthy_reference():
    shares = [0.7, 0.8, 0.9, 0.85, 0.75, 0.8] + [0.0] * 40 + [0.6] + [0.0] * 10
    cmp = reuse.compare(_requests(shares))
    assert cmp.loss and cmp.num_healthy == 6 and cmp.healthy_share > 0.7
    assert cmp.onset_age_s == 30.0
