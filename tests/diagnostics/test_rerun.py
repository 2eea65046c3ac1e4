"""The next soak a page suggests (diagnostics.words.rerun): built from the command the user ran, less
what only a test of tokdrift sets. A reader of after-10 (docs/reader-test/) was told to run
`soak run ... --fault output-buffer --engine-arg=--fault-after=15 ...`, which makes the slowdown
again, and a vLLM run's command named its trace at `/tmp/w/stable2/examples/opencode.jsonl`."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from diagnostics.words.rerun import EXAMPLE_TRACE, soak_command


def _ran(*argv: str) -> SimpleNamespace:
    """A run directory's source as rerun reads it: the manifest's command."""
    return SimpleNamespace(manifest=SimpleNamespace(command=[".venv/bin/soak", "run", *argv], elapsed_s=120.0))


@pytest.mark.parametrize(
    "fault",
    [
        ("--fault", "output-buffer"),
        ("--fault=gc-pressure",),
        ("--engine-arg=--fault-buffer-rows=65536", "--engine-arg=--fault-after=15"),
        ("--engine-arg", "--fault-leak-after=4"),
        ("--twin-engine-arg=--fault-after=60",),
        ("--engine-arg=--fault=snapshot-leak",),
    ],
)
def test_a_fault_a_test_switched_on_is_not_in_the_next_soak(fault):
    run = _ran("--trace", "examples/opencode.jsonl", *fault, "--engine-arg=--kv-tokens=2048", "-o", "runs/x")
    said = soak_command(run, "--until-decided")  # type: ignore[arg-type]
    assert "fault" not in said
    assert said == "soak run --trace examples/opencode.jsonl --engine-arg=--kv-tokens=2048 --until-decided"


@pytest.mark.parametrize(
    ("trace", "said"),
    [
        ("/tmp/w/stable2/examples/opencode.jsonl", "examples/opencode.jsonl"),  # a checkout in /tmp: the example
        ("/work/main/examples/llamacpp-kv-near-full.jsonl", "examples/llamacpp-kv-near-full.jsonl"),
        ("/tmp/rt53/my-trace.jsonl", EXAMPLE_TRACE),  # gone by the time anyone reads the page
        ("tests/fixtures/traces/short.jsonl", EXAMPLE_TRACE),  # a test's, no user's traffic
        ("/srv/traces/agents.jsonl", "/srv/traces/agents.jsonl"),  # the user's own: as typed
        ("/srv/examples/mine.jsonl", "/srv/examples/mine.jsonl"),  # a folder named examples, not a shipped one
    ],
)
def test_the_trace_is_named_as_a_reader_can_use_it(trace, said):
    run = _ran("--trace", trace, "--target", "http://127.0.0.1:8491", "-o", "/tmp/runs/x")
    assert soak_command(run, "--hours 8") == f"soak run --trace {said} --target http://127.0.0.1:8491 --hours 8"  # type: ignore[arg-type]


def test_no_temporary_or_fixture_path_reaches_the_command():
    """The whole command: the output folder, the engine's log and the restart command (their paths
    the machine's) are the user's to choose again, and never said."""
    run = _ran(
        "--trace",
        "/tmp/w/stable2/examples/opencode.jsonl",
        "--target",
        "http://127.0.0.1:8601",
        "--engine-log",
        "/root/.cache/tokdrift/peers/target.log",
        "--restart-cmd",
        "/tmp/w/stable2/scripts/peer-vllm.sh restart 8601",
        "--control-target",
        "http://127.0.0.1:8602",
        "-o",
        "/tmp/rt53/runs/vllm",
    )
    said = soak_command(run, "--until-decided")  # type: ignore[arg-type]
    assert "/tmp" not in said and "/root" not in said and "fixtures" not in said
    assert said == (
        "soak run --trace examples/opencode.jsonl --target http://127.0.0.1:8601 "
        "--control-target http://127.0.0.1:8602 --until-decided"
    )
