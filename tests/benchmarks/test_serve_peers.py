"""benchmarks/serve_peers.py: the engines' own figures from a run's metrics.prom, the trace copies
that keep one run's prompts out of the next one's prefix cache, and the ratios and headline drawn
from runs of the same round (the soaks themselves need llama-server and vLLM builds: they are the
benchmark, not a test)."""

import importlib.util
import json
from pathlib import Path

import pytest

from replay.trace import read_trace

ROOT = Path(__file__).resolve().parents[2]
METRICS = ROOT / "tests" / "logformats" / "fixtures" / "metrics"


def _module():
    spec = importlib.util.spec_from_file_location("serve_peers", ROOT / "benchmarks" / "serve_peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_llama_figures_sum_the_counters_within_each_process_life(tmp_path):
    serve_peers = _module()
    text = (METRICS / "llama-server-scrapes.prom").read_text()
    # The 14 real scrapes, then a new process: their first 7 again, its counters from 384 again.
    second = "# scrape_time:".join(text.split("# scrape_time:")[:8]).replace("scrape_time: 17961", "scrape_time: 17962")
    (tmp_path / "metrics.prom").write_text(text + second)
    says = serve_peers.engine_figures("llamacpp", tmp_path)
    # 947 - 384 tokens over 25.7779 - 5.89802 s, then 629 - 384 over 15.6203 - 5.89802 s; never the drop.
    rate = ((947 - 384) + (629 - 384)) / ((25.7779 - 5.89802) + (15.6203 - 5.89802))
    assert says.startswith(f"{rate:.1f} tok/s per request")
    assert "1.03 busy slots per decode" in says  # the last scrape of the longer life


def test_vllm_figures_are_the_counters_increase_over_the_run(tmp_path):
    """Three /metrics pages of vLLM 0.32.0 as the soak saves them, labelled series and all."""
    serve_peers = _module()
    pages = [(METRICS / f"vllm-0.32.0-cpu-metrics-{i}.txt").read_text() for i in (1, 2, 3)]
    (tmp_path / "metrics.prom").write_text("".join(f"# scrape_time: {i}\n{page}" for i, page in enumerate(pages)))
    says = serve_peers.engine_figures("vllm", tmp_path)
    # inter-token latency 132 -> 1005 tokens over 0.77896 -> 11.3569 s; 200 -> 1617 tokens in 136 -> 358
    # steps; 0 -> 2688 of 64 -> 3288 prompt tokens from the prefix cache
    rate = (1005 - 132) / (11.356903059006072 - 0.778962780999791)
    assert says == (
        f"{rate:.1f} tok/s per request (inter-token latency), {(1617 - 200) / (358 - 136):.1f} tokens per step, "
        f"{100 * 2688 / (3288 - 64):.0f}% of prompt tokens cached"
    )


def test_a_run_without_metrics_says_so(tmp_path):
    serve_peers = _module()
    assert serve_peers.engine_figures(None, tmp_path) == "no /metrics"
    assert serve_peers.engine_figures("tokdrift", tmp_path) == "no /metrics scrapes"


def test_each_trace_copy_has_new_blocks_and_the_same_shape(tmp_path):
    serve_peers = _module()
    trace = ROOT / "examples" / "opencode.jsonl"
    original = read_trace(trace)
    copies = [read_trace(serve_peers.renumbered(trace, index, tmp_path)) for index in (1, 2)]
    for copy in copies:
        assert [(c.input_tokens, c.output_tokens, c.session, c.t) for c in copy.calls] == [
            (c.input_tokens, c.output_tokens, c.session, c.t) for c in original.calls
        ]
        # the same prefix sharing: two calls share their first k blocks in the copy as in the original
        for a, b in zip(original.calls, original.calls[1:]):
            assert _shared(a.hash_ids, b.hash_ids) == _shared(
                *(copy.calls[original.calls.index(c)].hash_ids for c in (a, b))
            )
    blocks = [{h for c in t.calls for h in c.hash_ids} for t in (original, *copies)]
    assert not (blocks[0] & blocks[1]) and not (blocks[0] & blocks[2]) and not (blocks[1] & blocks[2])


def _shared(a, b) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _row(engine, round_, concurrency, decode, output=100.0):
    return {
        "engine": engine,
        "round": round_,
        "concurrency": concurrency,
        "served": 10,
        "failed": 0,
        "decode_tps_p50": decode,
        "output_tps": output,
        "probe_decode_tps": [decode],
        "tokens_per_cpu_s": decode,
        "ttft_p50_s": 0.2,
        "load_before": 1.0,
        "load_after": 1.0,
        "engine_says": "",
    }


def test_ratios_pair_runs_of_the_same_round_and_the_headline_says_the_direction():
    serve_peers = _module()
    rows = [
        _row("builtin", 1, 1, 120.0),
        _row("vllm", 1, 1, 100.0),
        _row("builtin", 2, 1, 90.0),  # a slow round for both: the ratio is what counts
        _row("vllm", 2, 1, 60.0),
        _row("builtin", 3, 1, 110.0),
        _row("vllm", 3, 1, 100.0),
        _row("builtin", 1, 4, 50.0),
        _row("vllm", 1, 4, 100.0),
    ]
    decode = serve_peers.METRICS[0][1]
    assert serve_peers.ratios(rows, "builtin", "vllm", 1, decode) == pytest.approx([1.2, 1.5, 1.1])
    line = serve_peers.headline(rows, ["builtin", "vllm"])
    assert line.startswith("The built-in engine decodes each request 20% faster than vLLM at concurrency 1")
    assert "(ratio 1.10–1.50 over 3 rounds)" in line
    slower = serve_peers.headline([r for r in rows if r["concurrency"] == 4], ["builtin", "vllm"])
    assert "50% slower than vLLM at concurrency 4" in slower
    ratio_rows = serve_peers.ratio_table(rows, "vllm").splitlines()
    assert "| builtin | 1 | 1.20 (1.10–1.50) |" in "\n".join(ratio_rows)


def test_the_vllm_checkpoint_gives_every_token_text(tmp_path, monkeypatch):
    """Every id of the built-in vocabulary decodes to its own non-empty text (a streamed token
    without text would be a token the client cannot time)."""
    from tokenizers import Tokenizer

    serve_peers = _module()
    source = tmp_path / "default"
    source.mkdir()
    (source / "config.json").write_text(json.dumps({"vocab_size": 272}))
    (source / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr("engine.model.checkpoint.default_checkpoint", lambda: source)
    out = serve_peers.vllm_checkpoint(tmp_path / "vllm")
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = [tokenizer.decode([i]) for i in range(272)]
    assert all(texts) and len(set(texts)) == 272
    assert (out / "model.safetensors").resolve() == (source / "model.safetensors").resolve()


def test_an_unknown_engine_name_is_refused(monkeypatch, capsys):
    serve_peers = _module()
    monkeypatch.setattr("sys.argv", ["serve_peers.py", "--engines", "builtin,sglang"])
    with pytest.raises(SystemExit):
        serve_peers.main()
    assert "expected some of builtin, builtin-bf16, vllm, llama, transformers, found sglang" in capsys.readouterr().err
