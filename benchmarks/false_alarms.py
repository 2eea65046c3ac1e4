"""How often a healthy engine is called aged: real soaks of the built-in engine with no fault,
each judged by `diag`, some with a noisy neighbour started halfway and left running.

    .venv/bin/python benchmarks/false_alarms.py                       # 10 short, 2 long, 4 noisy
    .venv/bin/python benchmarks/false_alarms.py --short 10 --long 0 --neighbours 2 --out runs/fa
    .venv/bin/python benchmarks/false_alarms.py --quick               # 2 short soaks of 40 s

Each soak is `soak run` with the defaults (a fresh twin probed beside the engine where memory
allows, driver and engines on separate cores), the example agent trace scaled down and sped up
as in `make demo`, concurrency 1 and 4 in turn, then `diag analyze`. A noisy neighbour is a
CPU hog (a busy loop) or a memory-bandwidth hog (copying a 256 MB array), started halfway
through the soak as a separate, unpinned process and killed when the soak ends. A false alarm
is any `engine_age_degradation`. One row per soak (verdict, confidence, basis, cause, matched
ratio with its interval), then the headline, last:

    false age verdicts: 0/12 (noisy neighbour: 0/4)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "examples" / "opencode.jsonl"
SOAK_ARGS = (
    "--scale",
    "0.1",
    "--speed",
    "4",
    "--probe-tokens",
    "32",
    "--probe-output",
    "96",
    "--engine-arg=--kv-tokens=2048",
    "--no-profiles",
)
HOGS = {
    "cpu": "while True: pass",
    "membw": (
        "import numpy as np\na = np.ones(32 * 2**20)\nb = np.empty_like(a)\n"
        "while True: np.copyto(b, a); np.copyto(a, b)"
    ),
}


class Case(NamedTuple):
    name: str
    minutes: float
    concurrency: int
    neighbour: str | None  # cpu, membw or None
    probe_every_s: float


class Result(NamedTuple):
    case: Case
    verdict: str
    confidence: str | None
    basis: str | None
    cause: str | None
    ratio: float | None
    interval: list | None
    run_dir: str
    wall_s: float

    @property
    def false_alarm(self) -> bool:
        return self.verdict == "engine_age_degradation"


def cases(
    num_short: int,
    short_minutes: float,
    num_long: int,
    long_minutes: float,
    num_neighbours: int,
    neighbour_minutes: float,
) -> list[Case]:
    out = [
        Case(name=f"short-{i}", minutes=short_minutes, concurrency=(1, 4)[i % 2], neighbour=None, probe_every_s=10.0)
        for i in range(num_short)
    ]
    out += [
        Case(name=f"long-{i}", minutes=long_minutes, concurrency=(1, 4)[i % 2], neighbour=None, probe_every_s=60.0)
        for i in range(num_long)
    ]
    out += [
        Case(
            name=f"noisy-{('cpu', 'membw')[i % 2]}-{i}",
            minutes=neighbour_minutes,
            concurrency=(1, 4)[(i // 2) % 2],
            neighbour=("cpu", "membw")[i % 2],
            probe_every_s=10.0,
        )
        for i in range(num_neighbours)
    ]
    return out


def run_case(case: Case, out: Path) -> Result:
    run_dir = out / case.name
    cmd = [
        sys.executable,
        "-m",
        "tokdrift.cli.soak",
        "run",
        "--trace",
        str(TRACE),
        "--minutes",
        f"{case.minutes:g}",
        "--concurrency",
        str(case.concurrency),
        "--probe-every",
        f"{case.probe_every_s:g}",
        *SOAK_ARGS,
        "-o",
        str(run_dir),
    ]
    start = time.time()
    log = open(out / f"{case.name}.out", "w")
    soak = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    hog = None
    try:
        if case.neighbour is not None:
            try:
                soak.wait(timeout=case.minutes * 30)  # halfway
            except subprocess.TimeoutExpired:
                hog = subprocess.Popen(
                    [sys.executable, "-c", HOGS[case.neighbour]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
        soak.wait()
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        log.close()
    if soak.returncode != 0:
        raise SystemExit(f"{case.name}: soak exited {soak.returncode}; see {out / (case.name + '.out')}")
    from diagnostics.analysis import analyze
    from diagnostics.source.source import load_source

    doc = analyze(load_source(run_dir)).to_dict()
    (run_dir / "analysis.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    slow = doc.get("slowdown") or {}
    return Result(
        case=case,
        verdict=doc["verdict"],
        confidence=doc.get("confidence"),
        basis=doc.get("basis"),
        cause=doc.get("cause"),
        ratio=slow.get("ratio"),
        interval=slow.get("interval"),
        run_dir=str(run_dir),
        wall_s=time.time() - start,
    )


def row(r: Result) -> str:
    c = r.case
    interval = f"{r.interval[0]:.2f}-{r.interval[1]:.2f}" if r.interval else "-"
    ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
    return (
        f"| {c.name} | {c.minutes:g} | {c.concurrency} | {c.neighbour or '-'} | {r.verdict} | {r.confidence or '-'} "
        f"| {r.basis or '-'} | {r.cause or '-'} | {ratio} | {interval} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", type=int, default=10, help="healthy soaks of --short-minutes")
    ap.add_argument("--short-minutes", type=float, default=2.0)
    ap.add_argument("--long", type=int, default=2, help="healthy soaks of --long-minutes")
    ap.add_argument("--long-minutes", type=float, default=30.0)
    ap.add_argument(
        "--neighbours", type=int, default=4, help="healthy soaks with a noisy neighbour (cpu, membw in turn)"
    )
    ap.add_argument("--neighbour-minutes", type=float, default=3.0)
    ap.add_argument(
        "--concurrency", type=int, default=None, help="every soak at this concurrency (default: 1 and 4 in turn)"
    )
    ap.add_argument("--out", type=Path, default=None, help="directory for the runs (default runs/false-alarms-<time>)")
    ap.add_argument("--quick", action="store_true", help="two short soaks of 40 s, nothing else (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.short, args.short_minutes, args.long, args.neighbours = 2, 40 / 60, 0, 0
    out = args.out or ROOT / "runs" / f"false-alarms-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from tokdrift.cli.fault_matrix import machine_description

    print(f"machine: {machine_description()}", flush=True)
    print(
        "| run | minutes | concurrency | neighbour | verdict | confidence | basis | cause | ratio | interval |",
        flush=True,
    )
    print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
    results = []
    for case in cases(
        args.short, args.short_minutes, args.long, args.long_minutes, args.neighbours, args.neighbour_minutes
    ):
        if args.concurrency is not None:
            case = case._replace(concurrency=args.concurrency)
        r = run_case(case, out)
        results.append(r)
        print(row(r), flush=True)
        (out / "results.json").write_text(
            json.dumps([{**r._asdict(), "case": r.case._asdict()} for r in results], indent=2) + "\n", encoding="utf-8"
        )
    quiet = [r for r in results if r.case.neighbour is None]
    noisy = [r for r in results if r.case.neighbour is not None]
    verdicts = {}
    for r in results:
        verdicts[r.verdict] = verdicts.get(r.verdict, 0) + 1
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())), flush=True)
    print(
        f"false age verdicts: {sum(r.false_alarm for r in quiet)}/{len(quiet)} "
        f"(noisy neighbour: {sum(r.false_alarm for r in noisy)}/{len(noisy)})",
        flush=True,
    )


if __name__ == "__main__":
    main()
