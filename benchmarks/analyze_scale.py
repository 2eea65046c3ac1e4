"""How long `diag analyze` takes on a 12-hour FreeToken log of about a million lines.

Generates the log (logsim.synthetic: a coding agent, an engine-age slowdown at hour 7,
a restart at hour 10), then analyses it in a fresh child process so that the peak memory
reported is the analysis's own (ru_maxrss of that process). Targets: <= 20 s, <= 2 GB.

    .venv/bin/python benchmarks/analyze_scale.py [--hours 12] [--forwards-per-line 1]

The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 20.0
TARGET_BYTES = 2 * 1024**3


def _analyze_child(path: str) -> None:
    from diagnostics.analysis import analyze
    from diagnostics.source.source import load_source

    t0 = time.perf_counter()
    source = load_source(Path(path))
    t1 = time.perf_counter()
    result = analyze(source)
    t2 = time.perf_counter()
    doc = result.to_dict()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(
        json.dumps(
            {
                "ingest_s": t1 - t0,
                "analyze_s": t2 - t1,
                "peak_bytes": peak,
                "num_steps": len(source.steps),
                "num_lines": source.log_info.num_lines,
                "verdict": doc["verdict"],
                "onset": doc["onset"] and doc["onset"]["t"],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, default=12.0, help="simulated hours of serving")
    parser.add_argument(
        "--forwards-per-line",
        type=int,
        default=1,
        help="decode forwards per decode line; 1 gives about a million lines in 12 hours",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _analyze_child(args.child)
        return
    from logsim.synthetic import Scenario, write

    sc = Scenario(
        hours=args.hours,
        forwards_per_line=args.forwards_per_line,
        onset_h=args.hours * 7 / 12,
        restart_h=args.hours * 10 / 12,
        lines_per_turn=(20, 60),
        idle_every=40,
        idle_s=20.0,
    )
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "freetoken-12h.log"
        t0 = time.perf_counter()
        write(sc, "freetoken", log)
        gen_s = time.perf_counter() - t0
        size = log.stat().st_size
        proc = subprocess.run([sys.executable, __file__, "--child", str(log)], capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            raise SystemExit(proc.returncode)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
    total = r["ingest_s"] + r["analyze_s"]
    print(
        f"log: {r['num_lines']:,} lines, {size / 1e6:.0f} MB, {args.hours:g} simulated hours "
        f"(generated in {gen_s:.1f} s)"
    )
    print(f"ingest {r['ingest_s']:.2f} s, analyze {r['analyze_s']:.2f} s, {r['num_steps']:,} steps")
    print(
        f"verdict {r['verdict']}, onset {r['onset']} (truth: engine_age_degradation, onset at hour "
        f"{args.hours * 7 / 12:g})"
    )
    print(
        f"diag analyze on {r['num_lines']:,} lines: {total:.1f} s ({total / TARGET_S:.2f}x the {TARGET_S:.0f} s "
        f"target), peak {r['peak_bytes'] / 1024**2:.0f} MiB ({r['peak_bytes'] / TARGET_BYTES:.2f}x the 2 GiB target)"
    )


if __name__ == "__main__":
    main()
