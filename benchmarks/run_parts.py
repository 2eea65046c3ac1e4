"""What merging a run's parts buys a reader: a run directory written as a 2-hour soak writes its
steps (one flush every 10 s, 720 flushes, 150 steps each), once with parts merged as it goes
(rundir.parts) and once without, then read back by `rundir.reader.read_table` as diag reads it.

    .venv/bin/python benchmarks/run_parts.py [--flushes 720] [--rows 150] [--reps 5]

Both stores are written side by side; the reads alternate (merged, unmerged, ...) and the figure
is the median of each, their ratio measured in the same run, printed last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rundir import parts, reader  # noqa: E402
from rundir.writer import RunStore  # noqa: E402


def write(run_dir: Path, flushes: int, rows: int) -> float:
    store, t, start = RunStore(run_dir), 1.8e9, time.perf_counter()
    for _ in range(flushes):
        for _ in range(rows):
            t += 0.0667
            store.add("steps", {"t": t, "phase": "decode", "num_running_reqs": 4, "gen_tps": 60.0, "step_time_s": 0.06})
        store.flush()
    store.close()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flushes", type=int, default=720)
    parser.add_argument("--rows", type=int, default=150)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        merged, unmerged = Path(tmp) / "merged", Path(tmp) / "unmerged"
        fan_in = parts.FAN_IN
        write_merged = write(merged, args.flushes, args.rows)
        parts.FAN_IN = 10**9  # never merges
        write_unmerged = write(unmerged, args.flushes, args.rows)
        parts.FAN_IN = fan_in
        times: dict[Path, list[float]] = {merged: [], unmerged: []}
        for _ in range(args.reps):
            for run in (merged, unmerged):
                start = time.perf_counter()
                df = reader.read_table(run, "steps")
                times[run].append(time.perf_counter() - start)
                assert len(df) == args.flushes * args.rows
        files = {run: len(list((run / "steps").glob(parts.GLOB))) for run in times}
        print(
            f"writing {args.flushes} flushes of {args.rows} steps: {write_merged:.1f} s merged, {write_unmerged:.1f} s not"
        )
        for run in times:
            print(
                f"{run.name}: {files[run]} parts, read in {statistics.median(times[run]):.2f} s (median of {args.reps})"
            )
        ratio = statistics.median(times[unmerged]) / statistics.median(times[merged])
        print(f"read time, unmerged over merged: {ratio:.1f}x ({files[unmerged]} parts against {files[merged]})")


if __name__ == "__main__":
    main()
