"""The scores suspects reach where nothing aged: the bar diagnostics.evidence.suspects holds a figure to.

Every candidate figure is scored with no bar (and no |rho| gate) on runs known to be healthy, and
on the aged runs beside them for the margin:

    .venv/bin/python benchmarks/suspect_bar.py                  # fixtures and the real-log corpus
    .venv/bin/python benchmarks/suspect_bar.py --healthy runs/a  # and more healthy run directories

healthy: tests/fixtures/healthy-soaks/* and soak validate's recorded fault-free controls
(tests/soak/fixtures/matrix/control-*: the built-in engine, no fault), the case studies' fixed
builds (tests/fixtures/case-studies/*/after, as run directories and their engine logs alone), and
the published logs of benchmarks/real_logs.json where the corpus is present (none of them aged).
aged: tests/fixtures/aged-soaks/*, the recorded gc-pressure soaks, and the case studies' buggy
builds, the same two ways.

Prints one row per figure (its highest healthy score and where, its highest aged score), then
the table to paste into diagnostics.evidence.suspects.HEALTHY_SCORES and CLASS_BAR, then the headline,
last: `healthy runs listing a suspect: 0/N`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.real_logs import analyze_one, catalogue, corpus_dir  # noqa: E402
from diagnostics.evidence import suspects  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
MATRIX = ROOT / "tests" / "soak" / "fixtures" / "matrix"  # soak validate's recorded runs: control-*, gc-pressure-*


# Scores a healthy run reached whose run directory was not kept: `make demo` on a host busy with
# another soak (2026-12-05, main at 28051d4), as its summary printed them (../shared/reader-test/
# before-1.md; the paired control undecided, the engine's own probes 1.03).
NOT_KEPT = {"radix_evictable_tokens": 0.23, "gc_last_full_pause_s": 0.22, "kv_gather_breaks": 0.20}


def sources(extra: list[str]) -> tuple[list[Path], list[Path]]:
    healthy = sorted((FIXTURES / "healthy-soaks").iterdir()) + sorted(MATRIX.glob("control-*"))
    aged = sorted((FIXTURES / "aged-soaks").iterdir()) + sorted(MATRIX.glob("gc-pressure-*"))
    for case in sorted((FIXTURES / "case-studies").iterdir()):
        healthy += [case / "after", case / "after" / "engine.log"]
        aged += [case / "before", case / "before" / "engine.log"]
    folder = corpus_dir()
    if folder.is_dir():
        healthy += [folder / e.file for e in catalogue() if (folder / e.file).exists()]
    return healthy + [Path(p) for p in extra], aged


def scores(path: Path) -> dict[str, float]:
    """Every candidate's score on one source, with no bar and no |rho| gate."""
    saved = suspects.bar, suspects.MIN_SCORE, suspects.MAX_SUSPECTS
    suspects.bar, suspects.MIN_SCORE, suspects.MAX_SUSPECTS = (lambda name: -1.0), 0.0, 10_000
    try:
        a = analyze_one(path, ())
    finally:
        suspects.bar, suspects.MIN_SCORE, suspects.MAX_SUSPECTS = saved
    return {s.name: s.score for s in a.suspects if "wall time" not in s.evidence}


def _up(x: float) -> float:
    return math.ceil(x * 1000) / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--healthy", nargs="*", default=[], help="More healthy run directories or logs.")
    args = parser.parse_args(argv)
    healthy, aged = sources(args.healthy)
    best: dict[str, tuple[float, str]] = {}
    for path in healthy:
        for name, score in scores(path).items():
            if score > best.get(name, (-1.0, ""))[0]:
                best[name] = (score, path.name if path.name not in ("after", "engine.log") else str(path)[-40:])
    for name, score in NOT_KEPT.items():
        if score > best.get(name, (-1.0, ""))[0]:
            best[name] = (score, "a busy-host demo, not kept (reader-test before-1)")
    worst_aged: dict[str, float] = {}
    for path in aged:
        for name, score in scores(path).items():
            worst_aged[name] = max(worst_aged.get(name, 0.0), score)
    print(f"{'figure':32s} {'kind':9s} {'healthy max':>11s}  {'aged max':>8s}  where (healthy)")
    for name, (score, where) in sorted(best.items(), key=lambda kv: -kv[1][0]):
        aged_max = worst_aged.get(name)
        print(
            f"{name:32s} {suspects.kind(name):9s} {score:11.3f}  {'' if aged_max is None else f'{aged_max:8.3f}':>8s}  "
            f"{where}"
        )
    classes: dict[str, float] = {}
    for name, (score, _) in best.items():
        classes[suspects.kind(name)] = max(classes.get(suspects.kind(name), 0.0), score)
    # Rounded up: a bar printed below the score it came from would let that very run list it.
    print("\nHEALTHY_SCORES = {")
    for name, (score, _) in sorted(best.items(), key=lambda kv: -kv[1][0]):
        print(f'    "{name}": {_up(score):.3f},')
    print("}")
    print("CLASS_BAR =", {k: _up(v) for k, v in sorted(classes.items())})
    listed = 0
    for path in healthy:
        a = analyze_one(path, ())
        listed += bool(a.suspects)
    print(f"\nhealthy runs listing a suspect: {listed}/{len(healthy)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
