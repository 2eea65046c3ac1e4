"""The engine benchmarks still run (--quick: tiny sizes); their figures come from full runs."""

import re

import pytest

from tests.benchmarks import run_benchmark


def run_quick(script: str, *args: str) -> list[str]:
    lines = run_benchmark(script, "--quick", *args)
    assert lines[0].startswith("machine: "), lines[0]
    return lines


def test_engine_vs_hf_prints_speedups_last():
    pytest.importorskip("transformers")
    lines = run_quick("engine_vs_hf.py")
    each = r"=[\d.]+x \(tiny, 1 thread\(s\)\)"
    assert re.fullmatch(
        rf"speedup_batch1{each} speedup_batch8{each} speedup_session{each} speedup_e2e_16_1{each} "
        rf"speedup_e2e_16_8{each} speedup_prefill_16_1{each} speedup_prefill_16_8{each}; "
        r"same greedy tokens everywhere: True",
        lines[-1],
    ), lines[-1]  # both sides ran the same model
    assert "same greedy tokens: True" in lines[-4], lines[-4]
    assert lines[-2].startswith("  prompt 16 x batch 8: end to end tokdrift"), lines[-2]


def test_decode_paths_prints_the_ratios_last():
    lines = run_quick("decode_paths.py")
    assert re.fullmatch(r"fast_vs_reference batch1=[\d.]+x batch8=[\d.]+x; same greedy tokens: True", lines[-1]), lines[
        -1
    ]


def test_roofline_prints_the_fraction_last():
    lines = run_quick("roofline.py")
    assert re.fullmatch(
        r"roofline_fraction=\d+% \(batch-1 decode vs the (copy|read|mv)-bandwidth limit\)", lines[-1]
    ), lines[-1]
    bytes_line = next(line for line in lines if line.startswith("bytes per decode step"))
    assert "routed experts" in bytes_line and "(0 picked)" not in bytes_line  # the expert counter saw the router


def test_roofline_prefill_prints_the_share_of_the_matrix_product_rate_last():
    lines = run_quick("roofline.py", "--prefill", "64")
    assert re.fullmatch(r"prefill_roofline_fraction=\d+% \(prefill of 64 tokens vs the mm rate\)", lines[-1]), lines[-1]
    counted = next(line for line in lines if line.startswith("prefill of 64 tokens"))
    assert float(counted.split(": ")[1].split(" GFLOP")[0]) > 0  # torch's counter saw the forward's products


def test_hooks_overhead_prints_every_mode_last():
    lines = run_quick("hooks_overhead.py")
    assert re.fullmatch(
        r"hooks_overhead idle=[\d.]+% sampled=[\d.]+% events=[\d.]+% \(clocked; "
        r"A/B [+-][\d.]+% / [+-][\d.]+% / [+-][\d.]+%, A/A noise [+-][\d.]+%\)",
        lines[-1],
    ), lines[-1]
    counts = next(line for line in lines if line.startswith("hook readings taken"))
    samples, events = map(int, re.findall(r"\d+", counts))
    assert samples > 0 and events > 0, counts  # the sampled modes read the hooks and drained events


def test_engine_memory_prints_the_growth_after_warm_up_last():
    lines = run_quick("engine_memory.py")
    assert re.fullmatch(
        r"rss growth after warm-up: -?[\d.]+ MB over \d+ requests \(-?\d+ KB per 1000 requests\)", lines[-1]
    ), lines[-1]
    rows = [line.split() for line in lines if line.split()[0].isdigit()]  # requests steps rss_MB ...
    requests, live = int(rows[-1][0]), int(rows[-1][-2])
    assert (requests, live) == (40, 0)  # every request ran; none is left on the engine thread
    assert int(rows[-1][5]) > 0 and int(rows[-1][6]) > 0  # the prefix cache held nodes and tokens
