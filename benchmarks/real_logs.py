"""diag on real engine logs: those users published, and our own runs' logs of known age; every log's answer, the headline last.

    .venv/bin/python benchmarks/real_logs.py [--corpus DIR] [--only NAME,...] [--json OUT]

The corpus is data from public repositories, kept byte for byte outside this repository (the
logs are other people's; see docs/real-logs.md): `--corpus DIR`, else `$TOKDRIFT_REAL_LOGS`,
else `../shared/real-logs` beside the checkout. What each log is, where it came from (repository,
path, commit, blob) and what establishes its truth is in `benchmarks/real_logs.json`, which also
pins the answers the tests expect (tests/diagnostics/test_real_logs.py).

Beside them, the engine logs of our own runs (`benchmarks/own_logs.json`: the case studies' llama-server
logs, kept in this repository with the run directory each came from), whose truth is known: the
build ages (`age_established`) or is the fixed one (`fixed`). Each is read alone, as a user of that
build has it.

One row per log: its verdict, confidence, the comparison it rests on and its figure, the clock
engine age was measured in, and the seconds `diag analyze` took. Then the published corpus's own
line, and last:

    real logs: false age F/H, found age M/P, answered A/N

F: `engine_age_degradation` on the H logs whose truth is not age (the published logs whose source
does not establish it, and the fixed builds'); M: that verdict on the P logs of established age;
A: any verdict but `insufficient_data`, of all N logs.
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
OWN_CATALOGUE = ROOT / "benchmarks" / "own_logs.json"


class Entry(NamedTuple):
    """One corpus log as the catalogue describes it."""

    file: str
    engine: str
    truth: str  # no_age_established, age_established, unknown; our own logs: age_established, fixed
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


def catalogue(path: Path = CATALOGUE) -> list[Entry]:
    """The published corpus (CATALOGUE: files in the corpus folder), or our own logs (OWN_CATALOGUE:
    files relative to the repository)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
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
    from diagnostics.source.source import load_source

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
    own = catalogue(OWN_CATALOGUE)
    if args.only:
        own = [e for e in own if any(w in e.file for w in args.only.split(","))]
    if not entries and not own:
        print(f"no corpus logs to analyse in {folder} (see docs/real-logs.md)", file=sys.stderr)
        return 2
    jobs = [(e, str(folder)) for e in entries] + [(e, str(ROOT)) for e in own]
    with ProcessPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(_worker, jobs))
    print(f"diag on {len(entries)} real logs from {folder} and {len(own)} of our own runs (benchmarks/own_logs.json)")
    print(f"{'log':58} {'truth':7} {'verdict':22} {'conf':6} {'basis':14} {'ratio':>6} {'clock':12} {'s':>5}")
    for r in rows:
        truth = {"no_age_established": "healthy", "age_established": "age", "fixed": "fixed"}.get(r.entry.truth, "?")
        flag = "" if r.verdict in r.entry.expect else "  <- expected " + "|".join(r.entry.expect)
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
        name = r.entry.file.removeprefix("tests/fixtures/case-studies/")
        print(
            f"{name[-58:]:58} {truth:7} {r.verdict:22} {r.confidence or '-':6} {r.basis or '-':14} "
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
    published = rows[: len(entries)]

    def aged(r: Row) -> bool:
        return r.verdict == "engine_age_degradation"

    def healthy(some: list[Row]) -> list[Row]:
        return [r for r in some if r.entry.truth != "age_established"]

    def answered(some: list[Row]) -> int:
        return sum(r.verdict != "insufficient_data" for r in some)

    high_wrong = sum(aged(r) and r.confidence == "high" for r in healthy(rows))
    age = [r for r in rows if r.entry.truth == "age_established"]
    print(f"high-confidence age verdicts on logs without established age: {high_wrong}/{len(healthy(rows))}")
    print(
        f"published logs: false age verdicts {sum(map(aged, healthy(published)))}/{len(healthy(published))}, "
        f"answered {answered(published)}/{len(published)}"
    )
    print(
        f"real logs: false age {sum(map(aged, healthy(rows)))}/{len(healthy(rows))}, found age "
        f"{sum(map(aged, age))}/{len(age)}, answered {answered(rows)}/{len(rows)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
