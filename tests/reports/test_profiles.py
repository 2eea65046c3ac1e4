"""Speedscope profiles: self and total time per frame, sampled and evented, healthy against degraded."""

from __future__ import annotations

import json

import pytest

from reports.profiles import classify, compare, read_speedscope

from .conftest import speedscope


def test_sampled_profile_self_and_total(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(speedscope(hot=2)))
    ft = read_speedscope(path)
    frames = {k.split(" ")[0]: v for k, v in ft.self_s.items()}
    assert frames == {"find_free_run": pytest.approx(0.03), "forward": pytest.approx(0.01)}
    assert {k.split(" ")[0]: v for k, v in ft.total_s.items()}["run_loop"] == pytest.approx(0.04)


def test_evented_profile(tmp_path):
    doc = {
        "shared": {"frames": [{"name": "main"}, {"name": "step"}]},
        "profiles": [
            {
                "type": "evented",
                "startValue": 0,
                "endValue": 10,
                "events": [
                    {"type": "O", "frame": 0, "at": 0},
                    {"type": "O", "frame": 1, "at": 2},
                    {"type": "C", "frame": 1, "at": 8},
                    {"type": "C", "frame": 0, "at": 10},
                ],
            }
        ],
    }
    path = tmp_path / "e.json"
    path.write_text(json.dumps(doc))
    ft = read_speedscope(path)
    assert ft.self_s == {"main": 4.0, "step": 6.0}
    assert ft.total_s == {"main": 10.0, "step": 6.0}


def test_classify_by_name_then_by_time(tmp_path):
    named = [tmp_path / "20260101T000000-degraded.json", tmp_path / "20260101T000100-healthy.json"]
    assert classify(named, None) == (named[1:], named[:1])
    stamped = [tmp_path / f"20260101T0{i}0000-probe.json" for i in range(4)]
    assert classify(stamped, "20260101T020000") == (stamped[:2], stamped[2:])
    assert classify(stamped[:1], None) == ([], [])


def test_one_unreadable_profile_is_skipped(tmp_path):
    (tmp_path / "a-healthy.json").write_text(json.dumps(speedscope(1)))
    (tmp_path / "b-healthy.json").write_text("{not json")
    (tmp_path / "c-degraded.json").write_text(json.dumps(speedscope(2)))
    result = compare(sorted(tmp_path.iterdir()))
    assert result is not None and len(result.skipped) == 1 and result.skipped[0].startswith("b-healthy.json")
    assert result.rows[0].frame.startswith(("forward", "find_free_run"))
