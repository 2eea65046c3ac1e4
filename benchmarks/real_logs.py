"""diag on real engine logs that users published: every corpus log's answer, and the headline last.

    .venv/bin/python benchmarks/real_logs.py [--corpus DIR] [--only NAME,...] [--json OUT]

The corpus is data from public repositories, kept byte for byte outside this repository (the
logs are other people's; see docs/real-logs.md): `--corpus DIR`, else `$TOKDRIFT_REAL_LOGS`,
else `../shared/real-logs` beside the checkout. What each log is, where it came from (repository,
path, commit, blob) and what establishes its truth is in `benchmarks/real_logs.json`, which also
pins the answers the tests expect (tests/diagnostics/test_real_logs.py).

One row per log: its verdict, confidence, the comparison it rests on and its figure, the clock
engine age was measured in, and the seconds `diag analyze` took. Then, last:

    real logs: false age verdicts F/N, answered M/N

A false age verdict is `engine_age_degradation` on a log whose source does not establish age;
answered is any verdict but `insufficient_data`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CATALOGUE = ROOT / "benchmarks" / "real_logs.json"


class Entry(NamedTuple):
    """One corpus log as the catalogue describes it."""

    file: str
    engine: str
    truth: str  # no_age_established, age_established, unknown
    args: tuple[str, ...]  # diag options the log needs (--year for yearless dates)
    expect: tuple[str, ...]  # verdicts the tests accept
    what: str


class Row(NamedTuple):
    entry: Entry
    verdict: str
    confidence: str | None
    basis: str | None
    ratio: float | None
    clock: str
    seconds: float
    reason: str


def corpus_dir(given: str | None = None) -> Path:
    """Where the corpus lies: the argument, $TOKDRIFT_REAL_LOGS, or ../shared/real-logs."""
    if given:
        return Path(given)
    env = os.environ.get("TOKDRIFT_REAL_LOGS")
    return Path(env) if env else ROOT.parent / "shared" / "real-logs"


def catalogue() -> list[Entry]:
    doc = json.loads(CATALOGUE.read_text(encoding="utf-8"))
    return [
        Entry(
            file=e["file"],
            engine=e["engine"],
            truth=e["truth"],
            args=tuple(e.get("args", ())),
            expect=tuple(e["expect"]),
            what=e["what"],
        )
        for e in doc["logs"]
    ]


def analyze_one(path: Path, args: tuple[str, ...]):
    """`diag analyze` of one log, as the command does it (the same options)."""
    import datetime as dt

    from diagnostics.analysis import analyze
    from diagnostics.source import load_source

    opts = dict(zip(args[0::2], args[1::2]))
    date = dt.date.fromisoformat(opts["--date"]) if "--date" in opts else None
    year = int(opts["--year"]) if "--year" in opts else None
    return analyze(load_source(path, date=date, year=year))


def _worker(job: tuple[Entry, str]) -> Row:
    entry, folder = job
    from diagnostics.errors import DiagnosticsError

    t0 = time.perf_counter()
    try:
        result = analyze_one(Path(folder) / entry.file, entry.args)
    except DiagnosticsError as exc:  # what `diag analyze` prints as its one-line error
        return Row(
            entry=entry,
            verdict="error",
            confidence=None,
            basis=None,
            ratio=None,
            clock="-",
            seconds=time.perf_counter() - t0,
            reason=str(exc),
        )
    seconds = time.perf_counter() - t0
    doc = result.to_dict()
    clock = next(
        (
            c["detail"].split(":", 1)[1].split("(")[0].strip()
            for c in doc["checks"]
            if c["name"] == "engine_age" and c["detail"].startswith("clock:")
        ),
        "wall",
    )
    ratio = doc["slowdown"]["ratio"] if doc["slowdown"] else None
    return Row(
        entry=entry,
        verdict=doc["verdict"],
        confidence=doc["confidence"],
        basis=doc["basis"],
        ratio=ratio,
        clock=clock,
        seconds=seconds,
        reason=doc["reason"],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpus", help="folder of the corpus logs (default $TOKDRIFT_REAL_LOGS or ../shared/real-logs)"
    )
    parser.add_argument("--only", help="comma-separated file names (or parts of them)")
    parser.add_argument("--jobs", type=int, default=2, help="logs analysed in parallel processes")
    parser.add_argument("--json", help="write every row as JSON here")
    args = parser.parse_args(argv)
    folder = corpus_dir(args.corpus)
    entries = catalogue()
    if args.only:
        wanted = args.only.split(",")
        entries = [e for e in entries if any(w in e.file for w in wanted)]
    missing = [e.file for e in entries if not (folder / e.file).is_file()]
    if missing:
        print(
            f"{len(missing)} of {len(entries)} corpus logs are not in {folder}: {', '.join(missing[:5])}"
            + (" ..." if len(missing) > 5 else ""),
            file=sys.stderr,
        )
        entries = [e for e in entries if e.file not in missing]
    if not entries:
        print(f"no corpus logs to analyse in {folder} (see docs/real-logs.md)", file=sys.stderr)
        return 2
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(_worker, [(e, str(folder)) for e in entries]))
    print(f"diag on {len(rows)} real logs from {folder}")
    print(f"{'log':58} {'truth':7} {'verdict':22} {'conf':6} {'basis':14} {'ratio':>6} {'clock':12} {'s':>5}")
    for r in rows:
        truth = {"no_age_established": "healthy", "age_established": "age"}.get(r.entry.truth, "?")
        flag = "" if r.verdict in r.entry.expect else "  <- expected " + "|".join(r.entry.expect)
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        print(
            f"{r.entry.file[:58]:58} {truth:7} {r.verdict:22} {r.confidence or '-':6} {r.basis or '-':14} "
            f"{ratio:>6} {r.clock[:12]:12} {r.seconds:5.1f}{flag}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        "file": r.entry.file,
                        "verdict": r.verdict,
                        "confidence": r.confidence,
                        "basis": r.basis,
                        "ratio": r.ratio,
                        "clock": r.clock,
                        "seconds": round(r.seconds, 2),
                        "reason": r.reason,
                    }
                    for r in rows
                ],
                indent=1,
            )
        )
    false_age = sum(r.verdict == "engine_age_degradation" and r.entry.truth != "age_established" for r in rows)
    healthy = sum(r.entry.truth != "age_established" for r in rows)
    answered = sum(r.verdict != "insufficient_data" for r in rows)
    high_wrong = sum(
        r.verdict == "engine_age_degradation" and r.confidence == "high" and r.entry.truth != "age_established"
        for r in rows
    )
    print(f"high-confidence age verdicts on logs without established age: {high_wrong}/{healthy}")
    print(f"real logs: false age verdicts {false_age}/{healthy}, answered {answered}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
