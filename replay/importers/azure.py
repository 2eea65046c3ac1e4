"""Azure LLM inference traces (CSV): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`.

No sessions and no prefix information: each row is a session of one call whose blocks
are all fresh, so nothing is shared.
"""

from __future__ import annotations

import csv
from datetime import datetime, timezone
from pathlib import Path

from replay.blocks import IdAllocator
from replay.errors import TraceError
from replay.importers.base import ImportOptions, ImportResult
from replay.trace import Call, TraceHeader

DEFAULT_BLOCK_SIZE = 64
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def import_azure(src: Path, options: ImportOptions) -> ImportResult:
    block_size = options.block_size or DEFAULT_BLOCK_SIZE
    rows = []
    with open(src, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise TraceError(f"{src}:1: expected columns {', '.join(COLUMNS)}, missing {', '.join(missing)}")
        reader.fieldnames = header
        for lineno, row in enumerate(reader, start=2):
            where = f"{src}:{lineno}"
            rows.append(
                (
                    _timestamp(row["TIMESTAMP"], where),
                    _int(row["ContextTokens"], "ContextTokens", where),
                    _int(row["GeneratedTokens"], "GeneratedTokens", where),
                    lineno,
                )
            )
    base = min((r[0] for r in rows), default=0.0)
    alloc = IdAllocator()
    calls = [
        Call(
            t=round(ts - base, 6),
            session=f"r{lineno}",
            turn=0,
            hash_ids=tuple(alloc.take(-(-num_in // block_size))),
            input_tokens=num_in,
            output_tokens=num_out,
        )
        for ts, num_in, num_out, lineno in rows
    ]
    created = datetime.fromtimestamp(base, timezone.utc).isoformat() if rows else None
    return ImportResult(
        TraceHeader(block_size=block_size, source="azure", created=created, meta={"imported_from": str(src)}), calls
    )


def _timestamp(text: str, where: str) -> float:
    """'2023-11-16 18:15:46.6805900' (7-digit fractions) as UTC seconds."""
    text = text.strip()
    main, _, frac = text.partition(".")
    try:
        value = datetime.strptime(main, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP: expected 'YYYY-MM-DD HH:MM:SS[.fraction]', found {text!r}") from None
    if frac:
        if not frac.isdigit():
            raise TraceError(f"{where}: TIMESTAMP: bad fraction in {text!r}")
        value += int(frac) / 10 ** len(frac)
    return value


def _int(text: str, name: str, where: str) -> int:
    try:
        value = int(text.strip())
    except (ValueError, AttributeError):
        raise TraceError(f"{where}: {name}: expected an integer, found {text!r}") from None
    if value < 0:
        raise TraceError(f"{where}: {name}: expected an integer >= 0, found {value}")
    return value
