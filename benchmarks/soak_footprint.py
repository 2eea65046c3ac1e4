"""A soak's footprint as it runs: the soak driver's and the engines' resident memory per hour after
warm-up, and the run directory's Parquet parts per hour, read from the run directory's own
snapshots (`driver_rss_bytes`, `rss_bytes`, `control_rss_bytes`, one row per sample).

    .venv/bin/python benchmarks/soak_footprint.py [--minutes 30] [--warmup-min 10] [-o RUN_DIR] [-- SOAK ARGS]
    .venv/bin/python benchmarks/soak_footprint.py --run runs/<id>     # a soak that already ran

Without --run it soaks the example trace on the built-in engine (`soak run --trace
examples/opencode.jsonl --minutes M`, any further words after `--` go to `soak run`) into a
temporary run directory, then reads it. Each process's growth is the slope of its RSS against the
time since the run started, over the samples after --warmup-min (Theil-Sen: a single large step
of malloc's kept memory does not tilt it as least squares would), per hour and projected over 12
hours as a share of its RSS at the end of warm-up. The control twin is started afresh through a
soak (a fresh twin is the point of it), so its row spans processes and stays out of the last line. A slope from tens of minutes says what the
process does then, not that it keeps doing it: run for hours for the hours' figure. The table is
the median RSS of each --slice-min slice. Last line: the figures.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rundir import parts, reader  # noqa: E402

MB = 2**20
PROCESSES = {
    "driver": "driver_rss_bytes",
    "driver_own": "driver_anon_bytes",  # less its file-backed pages: what it allocated itself
    "engine": "rss_bytes",
    "control": "control_rss_bytes",
}
TABLES = ("steps", "requests", "probes", "snapshots")


def soak(run_dir: Path, minutes: float, extra: list[str]) -> None:
    cmd = [sys.executable, "-m", "tokdrift.cli.soak", "run", "--trace", str(ROOT / "examples" / "opencode.jsonl")]
    cmd += ["--minutes", str(minutes), "-o", str(run_dir), *extra]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def growth(minutes: np.ndarray, rss: np.ndarray, warmup_min: float) -> tuple[float, float, float] | None:
    """MB an hour after warm-up (Theil-Sen, with its 90 % interval), and the RSS where warm-up ends."""
    after = (minutes >= warmup_min) & np.isfinite(rss)
    if after.sum() < 5:
        return None
    slope, _, lo, hi = stats.theilslopes(rss[after] / MB, minutes[after], alpha=0.90)
    return slope * 60, lo * 60, hi * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="read this run directory instead of soaking")
    parser.add_argument(
        "-o", "--out", type=Path, help="soak into this run directory and keep it (default: a temporary one)"
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-min", type=float, default=10.0, help="minutes left out as warm-up")
    parser.add_argument("--slice-min", type=float, default=5.0)
    parser.add_argument("soak_args", nargs="*", help="after --: more `soak run` options")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = args.run or args.out or Path(tmp) / "footprint"
        if args.run is None:
            soak(run_dir, args.minutes, args.soak_args)
        report(run_dir, args.warmup_min, args.slice_min)


def report(run_dir: Path, warmup_min: float, slice_min: float) -> None:
    snaps = reader.read_table(run_dir, "snapshots")
    if snaps.empty:
        sys.exit(f"{run_dir}: no snapshots to read")
    life0 = snaps[snaps["engine_life"].fillna(0) == snaps["engine_life"].fillna(0).min()]
    t = pd.to_datetime(life0["t"], utc=True)
    minutes = ((t - t.min()).dt.total_seconds() / 60).to_numpy()
    span_h = minutes.max() / 60
    print(f"run: {run_dir} ({minutes.max():.0f} min of the first engine life, {len(life0)} samples)")
    slices = np.floor(minutes / slice_min) * slice_min
    table = {"min": sorted(set(slices))}
    for name, col in PROCESSES.items():
        if col in life0:
            table[f"{name}_MB"] = [np.nanmedian(life0[col].to_numpy()[slices == s]) / MB for s in table["min"]]
    print(pd.DataFrame(table).round(1).to_string(index=False))
    figures = []
    for name, col in PROCESSES.items():
        if col not in life0 or life0[col].isna().all():
            continue
        rss = life0[col].to_numpy(dtype=float)
        g = growth(minutes, rss, warmup_min)
        if g is None:
            print(f"{name}: too few samples after {warmup_min:g} min of warm-up")
            continue
        at_warm = np.nanmedian(rss[(minutes >= warmup_min) & (minutes < warmup_min + slice_min)]) / MB
        share = 12 * g[0] / at_warm * 100
        print(
            f"{name}: {at_warm:.0f} MB after warm-up, {g[0]:+.1f} MB/h (90 % {g[1]:+.1f} to {g[2]:+.1f}), "
            f"{share:+.1f} % over 12 h at that rate"
        )
        if name != "control":  # the twin is started afresh through the run: its row is across processes
            figures.append(f"{name} {g[0]:+.1f} MB/h ({share:+.1f} % in 12 h)")
    counts = {table: len(parts.live(run_dir / table)) for table in TABLES if (run_dir / table).is_dir()}
    written = max(parts.last_number(run_dir / table) for table in counts)  # part numbers run across tables
    print("parts now:", ", ".join(f"{k} {v}" for k, v in counts.items()), f"({written} written in all, merged since)")
    total = sum(counts.values())
    figures.append(f"parts {total} after {span_h * 60:.0f} min ({written / span_h:.0f} written an hour)")
    print("soak footprint: " + ", ".join(figures))


if __name__ == "__main__":
    main()
