"""The case studies' evidence (docs/case-studies/): soaks of real engines, kept as run directories.

llama.cpp's shared KV cache (issue 25): a llama-server of llama-cpp-python 0.3.14 (one KV buffer
for all slots) and of 0.3.17 with `-np 8` (per-slot streams), the same trace, each with a fresh
control instance beside it and a restart at the end. The fixed build must be cleared; the buggy
one must never be (its soak does not yet reach an age verdict: its slowdown sets in within the
first two minutes, before the probes have a healthy reference, docs/case-studies/llamacpp-shared-kv.md).
"""

from pathlib import Path

from diagnostics.analysis import analyze
from diagnostics.source import load_source

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "case-studies"


def test_the_fixed_build_is_cleared_by_its_paired_control():
    a = analyze(load_source(CASES / "llamacpp-shared-kv" / "after"))
    assert a.verdict in ("no_degradation", "context_growth_only"), a.reason
    assert a.basis == "paired_control" and a.slowdown.lo > 0.81


def test_the_buggy_build_is_never_cleared():
    a = analyze(load_source(CASES / "llamacpp-shared-kv" / "before"))
    assert a.verdict not in ("no_degradation", "context_growth_only"), a.reason
