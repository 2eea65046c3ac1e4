"""The HTML report, read the way a browser would: its sections, figures, escaping and empty states."""

from __future__ import annotations

import re

import pytest
from bs4 import BeautifulSoup

from reports.redact import Redactor
from reports.report import render_report

from .conftest import PLANTED, PROMPT, SCRIPT

SECTIONS = [
    "verdict",
    "throughput-time",
    "throughput-context",
    "matched",
    "probes",
    "residuals",
    "prefills",
    "suspects",
    "checks",
    "events",
    "environment",
    "profiles",
]


@pytest.fixture(scope="module")
def seed_page(seed_inputs):
    return BeautifulSoup(render_report(seed_inputs), "html.parser")


@pytest.fixture(scope="module")
def log_page(log_inputs):
    return BeautifulSoup(render_report(log_inputs), "html.parser")


@pytest.fixture(scope="module")
def run_page(run_inputs):
    return BeautifulSoup(render_report(run_inputs), "html.parser")


def _section(page, name):
    section = page.find("section", id=name)
    assert section is not None, f"no section #{name}"
    return section


def _text(node) -> str:
    return " ".join(node.get_text(" ").split())


def _plots(section) -> list:
    return section.find_all("img", class_="plot")


@pytest.mark.parametrize("page", ["seed_page", "log_page", "run_page"])
def test_every_section_is_there_and_self_contained(page, request):
    soup = request.getfixturevalue(page)
    assert [s["id"] for s in soup.find_all("section")] == SECTIONS
    assert soup.find("script") is None
    assert soup.find("link") is None
    for tag in soup.find_all(src=True):
        assert tag["src"].startswith("data:image/png;base64,"), tag["src"][:60]
    for tag in soup.find_all(href=True):
        assert tag["href"].startswith("#"), tag["href"]
    assert "url(" not in soup.find("style").get_text()  # no fonts or images fetched by the stylesheet
    csp = soup.find("meta", attrs={"http-equiv": "Content-Security-Policy"})
    assert "default-src 'none'" in csp["content"]


def test_seed_verdict_opens_with_three_lines_then_the_details(seed_page):
    verdict = _section(seed_page, "verdict")
    assert "engine_age_degradation" in _text(verdict.find(class_="name"))
    assert _text(verdict.find(class_="headline")) == "Can't tell (leaning aged)"
    assert _text(verdict.find(class_="grounds")) == "from a 35.7-min FreeToken log excerpt alone"
    assert " ".join(verdict.find("p", class_="verdict-line").get_text().split()) == (
        "Can't tell (leaning aged), from a 35.7-min FreeToken log excerpt alone: decode is 90% slower late in the run "
        "than early, at the same batch size and context length (90% interval 83-94% slower). Low: only 2 early "
        "measurements were there to compare with."
    )
    lines = [" ".join(p.get_text().split()) for p in verdict.find_all("p", class_="line")]
    assert lines[0] == (
        "Next: Restart it if it is slow now; confirm it is engine age with a soak before filing a bug: "
        "soak run --trace examples/opencode.jsonl --target http://HOST:PORT --until-decided."
    )
    assert verdict.find("p", class_="line").find("code").get_text().startswith("soak run --trace")
    assert lines[1].startswith("Why: It began 15.6 min after the engine started, right after 5,792 new tokens")
    assert _text(verdict.find("h3", class_="details-break")) == "Details"
    first = [_text(li) for li in verdict.find("ul", class_="details").find_all("li")]
    assert first[1].startswith("Also holding the confidence back: few measurements came after the slowdown began")
    assert first[-1] == (
        "Engine: freetoken (moe_backend offload, attention_backend triton, cache_type hybrid_radix, "
        "page_size 1); from its log (11 lines)"
    )
    account = _text(verdict.find("details", class_="account"))
    assert "Longer context cannot explain it" in account and "2026-09-23 21:18:50" in account
    cells = {_text(r.find_all("td")[0]): _text(r.find_all("td")[1]) for r in verdict.find_all("tr")}
    assert cells["engine age at onset"] == "938 s (15.6 min)"
    assert cells["onset"] == "2026-09-23 21:18:50"  # to the second, in the log's own clock
    assert cells["recovered by restart"].startswith("no restart in the data")
    # The verdict in line one's word with how sure, the label after it in code font (a fifth reader
    # matched `engine_age_degradation` to "Aged" by guess); no confidence row to say it twice.
    row = verdict.find("tr").find_all("td")
    assert row[0].get_text() == "verdict" and row[1].get_text() == (
        "Can't tell, leaning aged; its code says engine age, at low confidence (engine_age_degradation)"
    )
    assert row[1].find("code").get_text() == "engine_age_degradation"
    assert "confidence" not in cells and cells["decided by"] == "the step series against the early step-time model"


def test_seed_sections_without_data_say_so(seed_page):
    """A pasted excerpt has no probes, no suspects and no profiles: each section says so, none fails."""
    for name, words in (
        ("probes", "No probes in this source"),
        ("suspects", "Suspects: none: no engine figure tracks the slowdown beyond what healthy runs show"),
        ("profiles", "No profiles in this source"),
    ):
        section = _section(seed_page, name)
        assert not _plots(section)
        assert words in _text(section.find(class_="empty"))
    assert len(_plots(_section(seed_page, "throughput-time"))) == 1
    assert len(_plots(_section(seed_page, "prefills"))) == 1
    env = _text(_section(seed_page, "environment"))
    assert "freetoken-excerpt, 11 lines" in env and "245,760" in env
    assert "Resolved config: moe_strategy='offload'" in env


def test_seed_log_around_the_onset_marks_the_trigger_line(seed_page):
    rows = _section(seed_page, "events").find("table", class_="log").find_all("tr")
    marked = [r for r in rows if "mark" in (r.get("class") or [])]
    assert len(marked) == 1
    assert "#new-token: 5792, #cached-token: 121712" in _text(marked[0])
    assert _text(marked[0].find("td")) == "5"  # line 5 of the excerpt


def test_log_line_holding_a_script_tag_shows_as_text(log_inputs, log_page):
    assert log_page.find("script") is None
    log = _section(log_page, "events").find("table", class_="log")
    assert SCRIPT in _text(log)  # parsed back as text, so it was escaped in the page
    html = render_report(log_inputs)
    assert "&lt;script&gt;alert(" in html and "<script>alert(" not in html


def test_synthetic_log_report_has_all_figures(log_page):
    for name in ("throughput-time", "throughput-context", "residuals", "prefills"):
        assert len(_plots(_section(log_page, name))) == 1, name
    bands = _section(log_page, "matched").find("table", class_="bands")
    ratios = [float(_text(r.find_all("td")[-1])) for r in bands.find_all("tr")[1:]]
    assert ratios and all(r == pytest.approx(0.25, abs=0.06) for r in ratios)  # the 4x slowdown, band by band


def test_the_bands_table_is_the_bands_the_analysis_compared(log_inputs, log_page):
    """The table shows what the `bins` comparison used, not a binning of its own."""
    a = log_inputs.analysis
    bins = next(c for c in a.comparisons if c.basis == "bins")
    rows = _section(log_page, "matched").find("table", class_="bands").find_all("tr")[1:]
    assert len(rows) == min(len(a.bands), 12) and f"{len(a.bands)} batch-and-context bands" in bins.detail
    assert sum(min(r.num_early, r.num_late) for r in a.bands.itertuples()) == bins.num_early
    checks = _section(log_page, "checks").find_all("tr", class_=re.compile("check-"))
    assert {"healthy_model", "matched_conditions"} <= {_text(r.find("td")) for r in checks}


def test_run_dir_report_has_probes_suspects_environment_and_profiles(run_page):
    verdict = _text(_section(run_page, "verdict"))
    assert "A restart brought the speed back" in verdict
    assert len(_plots(_section(run_page, "probes"))) == 1
    lives = _section(run_page, "matched").find("table", class_="probe-lives").find_all("tr")[1:]
    assert [_text(r.find("td")) for r in lives] == ["0", "1"]
    suspects = _section(run_page, "suspects")
    assert _text(suspects.find("table").find_all("tr")[1].find("td")) == "kv_fragmentation"
    assert len(_plots(suspects)) >= 1
    env = dict(
        (_text(r.find_all("td")[0]), _text(r.find_all("td")[1]))
        for r in _section(run_page, "environment").find("table").find_all("tr")
    )
    assert env["host.gpu"] == "NVIDIA H200" and env["host.versions.torch"] == "2.13.0"
    assert env["trace.num_calls"] == "412"
    assert env["host.ram_bytes"].endswith("(1024.0 GiB)")
    frames = _section(run_page, "profiles").find("table", class_="profile-frames").find_all("tr")[1:]
    top = {_text(r.find("td")).split(" ")[0]: [_text(td) for td in r.find_all("td")[1:3]] for r in frames}
    assert top["forward"] == ["75.0%", "25.0%"] and top["find_free_run"] == ["25.0%", "75.0%"]
    assert "engine/memory/allocator.py:141" in _text(frames[0]) + _text(frames[1])


def test_run_dir_event_from_the_inputs_is_escaped_and_redacted(run_inputs, run_page):
    events = _text(_section(run_page, "events").find("table", class_="events"))
    assert SCRIPT in events and run_page.find("script") is None
    html = str(run_page)
    for planted in PLANTED:
        assert planted not in html, planted
    kept = render_report(run_inputs, Redactor(enabled=False))
    assert PROMPT in BeautifulSoup(kept, "html.parser").get_text()
    assert "/home/alice" in kept


def test_a_run_that_crashed_before_any_step_still_gets_a_report(tmp_path):
    """Manifest only: every section is there and says it has no data; nothing fails."""
    from reports.inputs import load

    (tmp_path / "manifest.json").write_text(
        '{"schema_version": 1, "run_id": "crashed-early", "status": "crashed", "started_at": "2026-09-23T09:00:00Z"}'
    )
    soup = BeautifulSoup(render_report(load(tmp_path)), "html.parser")
    assert [s["id"] for s in soup.find_all("section")] == SECTIONS
    assert soup.find("img") is None
    assert "insufficient_data" in _text(_section(soup, "verdict"))
    for name in ("throughput-time", "throughput-context", "probes", "residuals", "prefills", "suspects", "profiles"):
        assert _section(soup, name).find(class_="empty") is not None, name
    assert "the data hold no decode throughput at all" in _text(_section(soup, "checks"))


def test_run_dir_events_get_engine_life_and_age_from_engine_starts(run_page):
    rows = [
        [_text(td) for td in r.find_all("td")]
        for r in _section(run_page, "events").find("table", class_="events").find_all("tr")[1:]
    ]
    by_kind = {r[3]: r for r in rows}
    assert by_kind["start"][1:3] == ["", ""]  # before the engine started
    assert by_kind["fault_on"][1:3] == ["0", "20.0 min"]
    assert [r[1:3] for r in rows if r[3] == "engine_start"] == [["0", "0.0 min"], ["1", "0.0 min"]]


def test_run_dir_log_lines_are_found_by_time_around_the_onset(run_page):
    """The steps came from the engine's hooks, so the log line is found by its time stamp."""
    rows = _section(run_page, "events").find("table", class_="log").find_all("tr")
    marked = [r for r in rows if "mark" in (r.get("class") or [])]
    assert len(marked) == 1 and "14:33:21" in _text(marked[0]) and "34.00" in _text(marked[0])
    assert "[redacted" in _text(_section(run_page, "events").find("table", class_="log"))  # the planted request line


def test_a_failed_check_beside_a_verdict_that_cannot_tell_is_shown_as_not_met(seed_inputs):
    """The fourth reader read `fail` inside a can't-tell report as the tool breaking: on the page it is
    `not met`, the reason it did not decide; the status in the JSON stays `fail`."""
    import dataclasses

    from diagnostics.result import Check

    failed = Check("confidence", "fail", "a loss without a cause: step series 0.75")
    a = dataclasses.replace(seed_inputs.analysis, verdict="insufficient_data", confidence=None, checks=(failed,))
    page = BeautifulSoup(render_report(seed_inputs._replace(analysis=a)), "html.parser")
    shown = page.find("tr", class_="check-fail").find("span", class_="status")
    assert _text(shown) == "not met" and "fail" in shown["class"]
    aged = dataclasses.replace(a, verdict="engine_age_degradation", confidence="medium")
    page = BeautifulSoup(render_report(seed_inputs._replace(analysis=aged)), "html.parser")
    assert _text(page.find("tr", class_="check-fail").find("span", class_="status")) == "fail"


def test_the_header_names_the_engine_a_soak_of_a_url_target_kept_the_log_of():
    """The llama.cpp case study's manifest says nothing of its engine; the engine log it kept does."""
    from pathlib import Path

    from reports.inputs import load

    case = Path(__file__).resolve().parents[1] / "fixtures" / "case-studies" / "llamacpp-shared-kv" / "before"
    soup = BeautifulSoup(render_report(load(case)), "html.parser")
    assert _text(soup.find("header").find(class_="dim")).startswith("soak · engine llama.cpp · onset 2026-12-02")


def test_the_openings_backticks_are_code_and_everything_else_is_escaped():
    from reports.report import ticks

    assert str(ticks("file a bug with `diag bundle runs/a<b>`; <script>")) == (
        "file a bug with <code>diag bundle runs/a&lt;b&gt;</code>; &lt;script&gt;"
    )
