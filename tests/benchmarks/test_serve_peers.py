"""benchmarks/serve_peers.py reads llama.cpp's own figures from a run's metrics.prom (the soaks
themselves need the llama-server build: they are the benchmark, not a test)."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRAPES = ROOT / "tests" / "logformats" / "fixtures" / "metrics" / "llama-server-scrapes.prom"


def _module():
    spec = importlib.util.spec_from_file_location("serve_peers", ROOT / "benchmarks" / "serve_peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_llama_figures_sum_the_counters_within_each_process_life(tmp_path):
    serve_peers = _module()
    text = SCRAPES.read_text()
    # The 14 real scrapes, then a new process: their first 7 again, its counters from 384 again.
    second = "# scrape_time:".join(text.split("# scrape_time:")[:8]).replace("scrape_time: 17961", "scrape_time: 17962")
    (tmp_path / "metrics.prom").write_text(text + second)
    says = serve_peers.engine_figures("llama", tmp_path)["engine_says"]
    # 947 - 384 tokens over 25.7779 - 5.89802 s, then 629 - 384 over 15.6203 - 5.89802 s; never the drop.
    rate = ((947 - 384) + (629 - 384)) / ((25.7779 - 5.89802) + (15.6203 - 5.89802))
    assert says.startswith(f"{rate:.1f} tok/s per request")
    assert "1.03 busy slots per decode" in says  # the last scrape of the longer life


def test_an_unknown_engine_name_is_refused(monkeypatch, capsys):
    serve_peers = _module()
    monkeypatch.setattr("sys.argv", ["serve_peers.py", "--engines", "vllm"])
    with pytest.raises(SystemExit):
        serve_peers.main()
    assert "expected some of builtin, transformers, llama, found vllm" in capsys.readouterr().err
