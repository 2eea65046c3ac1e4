"""Mooncake traces (JSONL): `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512-token blocks).

Mooncake has no sessions: each request becomes a session of one call, and prefix sharing
lives entirely in the hash ids.
"""

from __future__ import annotations

from pathlib import Path

from replay.importers.base import ImportOptions, ImportResult, count, int_list, iter_jsonl, number
from replay.trace import Call, TraceHeader

DEFAULT_BLOCK_SIZE = 512


def import_mooncake(src: Path, options: ImportOptions) -> ImportResult:
    rows = []
    for lineno, obj in iter_jsonl(src):
        where = f"{src}:{lineno}"
        rows.append(
            (
                number(obj.get("timestamp"), "timestamp", where) / 1000,
                int_list(obj, "hash_ids", where),
                count(obj.get("input_length"), "input_length", where),
                count(obj.get("output_length"), "output_length", where),
                lineno,
            )
        )
    base = min((r[0] for r in rows), default=0.0)
    calls = [
        Call(t=ts - base, session=f"r{lineno}", turn=0, hash_ids=ids, input_tokens=num_in, output_tokens=num_out)
        for ts, ids, num_in, num_out, lineno in rows
    ]
    header = TraceHeader(
        block_size=options.block_size or DEFAULT_BLOCK_SIZE, source="mooncake", meta={"imported_from": str(src)}
    )
    return ImportResult(header, calls)
