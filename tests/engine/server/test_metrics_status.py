"""/metrics parses as Prometheus text and moves with the traffic; /v1/cache/status and
/v1/engine/steps report the engine's hooks and every step."""

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.engine.server.conftest import status


def scrape(server) -> dict:
    """{sample name: value} summed over labels, and the family types."""
    r = httpx.get(server.base_url + "/metrics", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    values, types = {}, {}
    for family in text_string_to_metric_families(r.text):
        types[family.name] = family.type
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values, types


def complete(server, **body):
    body = {"prompt": "metrics please", "max_tokens": 12, "temperature": 0, "ignore_eos": True} | body
    r = httpx.post(server.v1 + "/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_metrics_move_with_traffic(server):
    complete(server)
    before, types = scrape(server)
    out = complete(server, prompt="metrics please, again", max_tokens=9)
    after, _ = scrape(server)
    delta = lambda name: after[name] - before.get(name, 0.0)
    assert delta("tokdrift:generation_tokens_total") == 9
    assert delta("tokdrift:prompt_tokens_total") == out["usage"]["prompt_tokens"]
    assert delta("tokdrift:time_to_first_token_seconds_count") == 1
    assert delta("tokdrift:inter_token_latency_seconds_count") == 8
    assert delta("tokdrift:e2e_request_latency_seconds_count") == 1
    assert delta("tokdrift:request_decode_time_seconds_count") == 1
    assert delta("tokdrift:request_generation_tokens_sum") == 9
    assert delta("tokdrift:prefix_cache_queries_total") >= out["usage"]["prompt_tokens"] - 1
    assert delta("tokdrift:engine_steps_total") >= 9
    assert after["tokdrift:num_requests_running"] == 0 and after["tokdrift:num_requests_waiting"] == 0
    assert after["tokdrift:radix_nodes"] >= 1 and after["tokdrift:cached_tokens"] > 0
    assert after["tokdrift:mamba_slots_total"] == 32
    assert 0 <= after["tokdrift:kv_cache_usage_perc"] <= 1
    assert types["tokdrift:time_to_first_token_seconds"] == "histogram"
    assert types["tokdrift:prefix_cache_hits"] == "counter"
    assert types["tokdrift:num_preemptions"] == "counter"
    assert not any(name.endswith("_created") for name in after)


def test_metrics_names_are_the_documented_ones(server):
    values, types = scrape(server)
    assert all(name.startswith("tokdrift:") for name in types)
    doc = (Path(__file__).parents[3] / "docs" / "server.md").read_text()
    missing = [name for name in types if f"`{name}" not in doc]
    assert not missing, f"undocumented metrics: {missing}"


def test_cache_status_reports_every_hook(server):
    complete(server)
    s = status(server, check="true")
    assert s["integrity"] == "ok"
    assert s["num_running"] == 0 and s["cache_report"]["locked_tokens"] == 0
    assert s["cache_report"]["cached_tokens"] > 0 and s["mamba_stats"]["num_slots"] == 32
    assert s["allocator_summary"]["num_slots"] == s["kv_total_tokens"] == 2048
    assert s["expert_cache_stats"] is None  # resident experts
    assert s["config"]["kv_tokens"] == 2048 and s["engine_age_s"] > 0
    assert "integrity" not in status(server)


def test_engine_steps_page_without_gaps(server):
    first = httpx.get(server.v1 + "/engine/steps", params={"after": 0}).json()
    complete(server, max_tokens=15)
    after = first["last_step"]
    rows = []
    while True:  # page through it the way a soak sampler would
        page = httpx.get(server.v1 + "/engine/steps", params={"after": after, "limit": 4}).json()
        assert page["num_missed"] == 0
        if not page["steps"]:
            break
        rows += page["steps"]
        after = page["next_after"]
    assert [r["step"] for r in rows] == list(range(first["last_step"] + 1, first["last_step"] + 1 + len(rows)))
    assert len(rows) >= 15
    assert sum(r["num_decode_tokens"] for r in rows) == 14  # the first token comes from the prefill
    assert {"phase", "forward_s", "kv_usage", "duration_s", "engine_age_s"} <= set(rows[0])


def test_diag_reads_saved_scrapes_of_this_server(server, tmp_path):
    from logformats.prometheus import parse_scrapes

    blocks = []
    for i in range(3):
        complete(server, max_tokens=10)
        text = httpx.get(server.base_url + "/metrics").text
        blocks.append(f"# scrape_time: {1_800_000_000 + 10 * i}\n{text}")
    path = tmp_path / "scrapes.prom"
    path.write_text("".join(blocks))
    steps, events, engine = parse_scrapes(path)
    assert engine == "tokdrift"
    assert len(steps) == 3 and events.empty  # no counter went down: no restart
    assert steps["num_running_reqs"].tolist() == [0, 0, 0]
    assert (steps["token_usage"].notna()).all()
    assert steps["step_time_s"].iloc[1:].notna().all()  # from the inter-token histogram


def test_offloaded_experts_show_hits_and_misses(tiny_checkpoint):
    from tests.engine.server.conftest import engine_config, running_server

    config = engine_config(tiny_checkpoint, kv_tokens=512, moe_backend="offload", moe_cache_size=8)
    with running_server(config) as offload:
        complete(offload, max_tokens=6)
        values, types = scrape(offload)
        experts = status(offload)["expert_cache_stats"]
    assert values["tokdrift:expert_cache_misses_total"] == experts["misses"] > 0
    assert values["tokdrift:expert_cache_hits_total"] == experts["hits"]
    assert values["tokdrift:expert_cache_slots_total"] == 8
    assert types["tokdrift:expert_cache_evictions"] == "counter"
    assert len(experts["per_layer"]) == 3  # the MoE layers of the tiny checkpoint
