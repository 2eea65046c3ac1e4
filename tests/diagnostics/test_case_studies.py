"""The case studies' evidence (docs/case-studies/): soaks of real engines, kept as run directories.

llama.cpp's KV cells held by idle slots (issue 25): a llama-server of llama-cpp-python 0.3.14
(one KV buffer for all slots: every decode attends up to the highest used cell) and of 0.3.17
with `-np 8` (per-slot streams), the same trace and command (scripts/case-llamacpp-shared-kv.sh),
each with a fresh control instance beside it, a baseline of probe cycles before any traffic, and
a restart at the end. The buggy build must be called aged with the mechanism named first and the
restart bringing it back; the fixed build must not be called aged.

llama.cpp's KV defragmentation (issue 25, mechanism 2): llama-server of 0.3.1 (off) and 0.3.2
(on), soaked the same way in a scenario whose slots fill the whole cache
(docs/case-studies/llamacpp-defrag.md). Both halve their batches for want of room (the
`kv_space` check, from the log's lines); 0.3.1 is called aged and 0.3.2 is not (0.3.1 with
defragmentation on aged too: the difference is not defragmentation, and no test claims it is).
"""

from pathlib import Path

from diagnostics.analysis import analyze
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "case-studies"


def test_the_buggy_build_is_aged_by_the_kv_cells_its_idle_slots_hold_and_a_restart_brings_it_back():
    a = analyze(load_source(CASES / "llamacpp-shared-kv" / "before"))
    assert a.verdict == "engine_age_degradation" and a.confidence in ("medium", "high"), a.reason
    assert a.basis == "paired_control" and a.slowdown.hi < 0.7
    assert a.onset is not None and a.recovered_by_restart is True
    assert a.suspects[0].name == "idle_slot_tokens"
    assert "KV cells held by idle slots" in a.suspects[0].evidence


def test_the_fixed_build_is_not_called_aged():
    a = analyze(load_source(CASES / "llamacpp-shared-kv" / "after"))
    # The paired control rules out a loss of more than 9 %; the raw throughput's fall is the
    # fills' longer context (docs/case-studies/llamacpp-shared-kv.md).
    assert a.verdict == "context_growth_only", a.reason


def test_0_3_1_in_a_full_cache_is_aged_and_its_batch_halving_is_read():
    a = analyze(load_source(CASES / "llamacpp-defrag" / "before"))
    assert a.verdict == "engine_age_degradation" and a.confidence in ("medium", "high"), a.reason
    assert a.basis == "paired_control" and a.slowdown.hi < 0.9 and a.onset is not None
    checks = {c.name: c for c in a.checks}
    assert checks["kv_space"].status == CheckStatus.WARN and checks["kv_space"].detail.startswith("224 times")
    assert "kv_no_space" in [s.name for s in a.suspects]


def test_0_3_2_in_the_same_soak_is_not_called_aged_though_its_batches_halve_too():
    a = analyze(load_source(CASES / "llamacpp-defrag" / "after"))
    # The decode comparisons together rule a loss out (docs/case-studies/llamacpp-defrag.md).
    assert a.verdict == "no_degradation", a.reason
    checks = {c.name: c for c in a.checks}
    assert checks["kv_space"].status == CheckStatus.WARN and checks["kv_space"].detail.startswith("389 times")
