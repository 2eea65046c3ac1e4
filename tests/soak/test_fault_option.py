"""`--fault` on `soak run` and `soak serve`: refused with the known names before anything starts."""

from typer.testing import CliRunner

from ground import TokdriftError
from tokdrift.cli.soak import app


def _invoke(args):
    result = CliRunner().invoke(app, args)
    return result, result.exception


def test_run_refuses_an_unknown_fault_listing_the_known_ones(tmp_path):
    result, exc = _invoke(
        [
            "run",
            "--trace",
            "examples/opencode.jsonl",
            "--seconds",
            "1",
            "--out",
            str(tmp_path / "r"),
            "--fault",
            "slow",
            "--no-live",
        ]
    )
    assert isinstance(exc, TokdriftError)
    assert "unknown fault 'slow'; known: eviction-scan, snapshot-leak, kv-scatter" in str(exc)
    assert not (tmp_path / "r").exists()


def test_run_refuses_a_fault_on_a_url_target(tmp_path):
    result, exc = _invoke(
        [
            "run",
            "--trace",
            "examples/opencode.jsonl",
            "--seconds",
            "1",
            "--target",
            "http://127.0.0.1:9",
            "--fault",
            "kv-scatter",
            "--no-live",
        ]
    )
    assert isinstance(exc, TokdriftError) and "faults: expected none for a URL target" in str(exc)


def test_run_refuses_an_unknown_engine_option_before_anything_starts(tmp_path):
    result, exc = _invoke(
        [
            "run",
            "--trace",
            "examples/opencode.jsonl",
            "--seconds",
            "1",
            "--out",
            str(tmp_path / "r"),
            "--engine-arg=--kv-tokenz=100",
            "--no-live",
        ]
    )
    assert isinstance(exc, TokdriftError) and "--kv-tokenz" in str(exc)
    assert not (tmp_path / "r").exists()


def test_serve_refuses_expert_thrash_without_offload():
    result, exc = _invoke(["serve", "--fault", "expert-thrash", "--port", "9"])
    assert isinstance(exc, TokdriftError)
    assert "requires moe_backend='offload'" in str(exc)
