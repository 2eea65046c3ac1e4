"""Two runs side by side: a run before a fix against one after it, and a run against a log."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from reports.compare import render_compare
from reports.inputs import load
from tests.diagnostics.rundirs import make_run_dir


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    return load(
        make_run_dir(
            tmp_path_factory.mktemp("runs") / "run-b", minutes=40, fault_at_min=None, restart_at_min=None, seed=1
        )
    )


def _rows(soup):
    table = soup.find("table", class_="compare")
    return {
        " ".join(r.find_all("td")[0].get_text().split()): [td.get_text(strip=True) for td in r.find_all("td")[1:]]
        for r in table.find_all("tr")[1:]
    }


def test_before_and_after_a_fix(run_inputs, fixed):
    soup = BeautifulSoup(render_compare(run_inputs, fixed), "html.parser")
    verdicts = [v.find(class_="name").get_text() for v in soup.find_all(class_="verdict")]
    assert verdicts == ["A: test: engine_age_degradation", "B: test: context_growth_only"]  # fixed; context costs 12%
    rows = _rows(soup)
    assert rows["verdict"] == ["engine_age_degradation", "context_growth_only", "better"]
    a, b, change = rows["matched identical probes: late / early"]
    assert float(a) == pytest.approx(1 / 3, abs=0.05) and float(b) == pytest.approx(1.0, abs=0.05)
    assert change == "better"
    assert rows["recovered by restart"] == ["yes", "no restart", ""]
    assert rows["top suspect"][0] == "kv_fragmentation"
    for section in ("probes", "matched"):
        imgs = soup.find("section", id=section).find_all("img", class_="plot")
        assert len(imgs) == 1 and imgs[0]["src"].startswith("data:image/png;base64,")
    assert soup.find("script") is None


def test_run_against_a_plain_log(run_inputs, seed_inputs):
    soup = BeautifulSoup(render_compare(seed_inputs, run_inputs), "html.parser")
    rows = _rows(soup)
    assert rows["trigger"][0].startswith("a prefill appending 5,792 new tokens")
    assert rows["probe decode, first quarter of first life (tok/s)"][0] == ""  # the excerpt has none
    tables = soup.find("section", id="probes").find_all("table", class_="probe-lives")
    assert len(tables) == 1  # only the run directory has probes; the log's side says so
    assert "No probes." in soup.find("section", id="probes").get_text()
