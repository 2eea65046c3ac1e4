"""benchmarks/soak_footprint.py reads a run directory's snapshots into growth per hour after
warm-up; its figures come from real soaks (docs/benchmarks.md)."""

import re

from rundir.writer import RunStore
from tests.benchmarks import run_benchmark

MB = 2**20


def test_soak_footprint_reads_the_slope_after_warm_up_from_the_snapshots(tmp_path):
    run = tmp_path / "run"
    store = RunStore(run)
    for k in range(121):  # an hour, a sample every 30 s
        minute = k / 2
        warm = min(minute, 5) * 40 * MB  # the engine's warm-up: +200 MB in 5 minutes, then flat
        store.add(
            "snapshots",
            {
                "t": 1.8e9 + 30 * k,
                "engine_age_s": 30.0 * k,
                "engine_life": 0,
                "rss_bytes": 1000 * MB + warm + (MB if k % 7 == 0 else 0),
                "driver_rss_bytes": 200 * MB + minute / 60 * 6 * MB,  # 6 MB an hour, throughout
            },
        )
        if k % 20 == 0:
            store.flush()
    store.close()
    last = run_benchmark("soak_footprint.py", "--run", str(run), "--warmup-min", "10", timeout=120)[-1]
    assert re.fullmatch(
        r"soak footprint: driver \+6\.0 MB/h \(\+35\.\d % in 12 h\), engine \+0\.0 MB/h \(\+0\.0 % in 12 h\), "
        r"parts \d+ after 60 min \(\d+ written an hour\)",
        last,
    ), last
