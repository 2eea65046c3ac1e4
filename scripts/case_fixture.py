"""Keep a case study's run directory as a test fixture: the manifest, the events, the engine's log
and each table's Parquet parts as one part (what `diag analyze` reads; the metrics scrape, the
report and the profiles are left out).

    python scripts/case_fixture.py RUN_DIR tests/fixtures/case-studies/<case>/<before|after>

The copy must analyse exactly as the run: the script compares `diag analyze --json` of both and
fails where they differ.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from diagnostics.analysis import analyze  # noqa: E402
from diagnostics.source.source import load_source  # noqa: E402
from rundir import parts, schema  # noqa: E402

FILES = (schema.MANIFEST, "events.jsonl", "engine.log")


def keep(run: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in FILES:
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)
    for table in schema.TABLES:
        found = parts.live(run / table)
        if found:
            (dest / table).mkdir()
            whole = pa.concat_tables([pq.read_table(p.path) for p in found], promote_options="default")
            pq.write_table(whole, dest / table / "part-000001.parquet", compression="zstd")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args()
    keep(args.run, args.dest)
    full = analyze(load_source(args.run)).to_dict()
    kept = analyze(load_source(args.dest)).to_dict()
    for doc in (full, kept):
        doc.pop("source", None)
    if json.dumps(full, sort_keys=True, default=str) != json.dumps(kept, sort_keys=True, default=str):
        raise SystemExit(f"{args.dest}: the copy analyses differently from {args.run}")
    size = sum(p.stat().st_size for p in args.dest.rglob("*") if p.is_file())
    print(f"{args.dest}: {size / 1e3:.0f} kB, {kept['verdict']} ({kept.get('confidence')})")


if __name__ == "__main__":
    main()
