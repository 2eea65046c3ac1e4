"""From the log alone (issue 49): the case studies' own llama-server logs, each copied out of its run
directory as a user who hit llama.cpp issue #7802 or #10860 has it, with no probes table, no control
and no manifest beside it (docs/case-studies/, docs/real-logs.md "What a llama.cpp log must hold").

The buggy builds (0.3.14: one KV window over all slots; 0.3.1 in a full cache) must be called aged
from their logs, with the restart in the log bringing decode back; the fixed build (0.3.17 with
`-np 8`) and 0.3.2 must not. A log that truly cannot tell says which figure it lacks and the
llama-server option that prints it.
"""

import re
import shutil
from pathlib import Path

import pytest

from diagnostics.analysis import analyze
from diagnostics.labels import CheckStatus
from diagnostics.source.source import load_source

CASES = Path(__file__).resolve().parents[1] / "fixtures" / "case-studies"
STAMP = re.compile(rb"^\d+\.\d{2}\.\d{3}\.\d{3} [IWED] ", re.MULTILINE)


def _alone(tmp_path: Path, case: str, side: str) -> Path:
    """The run directory's engine.log, copied alone."""
    path = tmp_path / f"{case}-{side}.log"
    shutil.copyfile(CASES / case / side / "engine.log", path)
    return path


def test_the_shared_kv_build_is_aged_from_its_log_alone_and_its_restart_brings_decode_back(tmp_path):
    # 0.3.14: the probe decodes at 145-181 tok/s fresh, 27-49 with idle slots holding 15,000-38,000
    # cells, 141-178 after the restart; the soak's own requests decoded beside other slots'
    # prompts (0.3-18 tok/s) and are mixed windows, not decode steps.
    a = analyze(load_source(_alone(tmp_path, "llamacpp-shared-kv", "before")))
    assert a.verdict == "engine_age_degradation", a.reason
    assert a.slowdown is not None and a.slowdown.hi < 0.35, a.reason
    assert a.recovered_by_restart is True
    restart = next(c for c in a.comparisons if c.basis == "restart")
    assert restart.interval.hi < 0.35  # the aged engine over the fresh one: decode came back about five-fold
    # The healthy window held one context (the probe's), and so did the latest samples compared.
    checks = {c.name: c for c in a.checks}
    assert checks["context_only_model"].detail.startswith("context cannot explain it: the 3 latest samples")


def test_the_defrag_case_0_3_1_is_aged_from_its_log_alone(tmp_path):
    a = analyze(load_source(_alone(tmp_path, "llamacpp-defrag", "before")))
    assert a.verdict == "engine_age_degradation", a.reason
    assert a.slowdown is not None and a.slowdown.hi < 0.8, a.reason
    assert a.recovered_by_restart is True


@pytest.mark.parametrize("case", ["llamacpp-shared-kv", "llamacpp-defrag"])
def test_the_fixed_builds_are_not_called_aged_from_their_logs_alone(tmp_path, case):
    a = analyze(load_source(_alone(tmp_path, case, "after")))
    assert a.verdict in ("context_growth_only", "no_degradation"), a.reason
    assert a.basis != "prefill"


def test_the_fixed_builds_prefills_are_compared_only_where_nothing_ran_beside_them(tmp_path):
    """0.3.17's log was called aged on prefill time (0.43, 0.32-0.54) because a prompt's `prompt eval
    time` holds every batch it shared with the other slots: 436 tokens beside three other busy slots
    took 1,740 ms late, 300 beside as many 414 ms early. The prefills that ran alone, among them the
    identical probe's (one new token onto 333 cached), did not slow."""
    steps = load_source(_alone(tmp_path, "llamacpp-shared-kv", "after")).steps
    prompts = steps[steps["new_tokens"].notna() & (steps["engine_life"] == 0)]
    alone = prompts[prompts["phase"] == "prefill"]
    assert (alone["num_running_reqs"] == 1).all() and len(alone) < len(prompts) / 2
    probe = alone[(alone["new_tokens"] == 1) & (alone["cached_tokens"] == 333)]
    ms = (1000 / probe["input_tps"]).to_numpy()
    half = len(ms) // 2
    assert len(ms) >= 12 and 0.7 < float(sorted(ms[half:])[len(ms[half:]) // 2] / sorted(ms[:half])[half // 2]) < 1.4


def test_a_log_without_stamps_or_release_lines_is_refused_naming_each_figure_and_the_option(tmp_path):
    """The 0.3.14 log as a user who ran llama-server without `--log-timestamps` and kept warnings only
    of the release lines would have it: its requests cannot be placed beside each other, nor their
    context known. The refusal names both figures and what prints them."""
    text = STAMP.sub(b"", (CASES / "llamacpp-shared-kv" / "before" / "engine.log").read_bytes())
    path = tmp_path / "server.log"
    path.write_bytes(b"".join(line for line in text.splitlines(keepends=True) if b"stop processing" not in line))
    a = analyze(load_source(path))
    assert a.verdict == "insufficient_data"
    assert "This llama.cpp log lacks the time each line was printed" in a.reason
    assert "`--log-timestamps --log-prefix`" in a.reason
    assert "each request's context at its end (`stop processing: n_past = …`)" in a.reason
    assert "default verbosity" in a.reason
    checks = {c.name: c for c in a.checks}
    assert checks["log_figures"].status == CheckStatus.WARN and "--log-timestamps" in checks["log_figures"].detail


def test_a_stamped_log_with_release_lines_lacks_no_figure(tmp_path):
    a = analyze(load_source(_alone(tmp_path, "llamacpp-shared-kv", "before")))
    assert "log_figures" not in {c.name for c in a.checks}
