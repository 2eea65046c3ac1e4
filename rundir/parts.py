"""A table's Parquet parts: their names, which of them hold each row once, and merging them.

Every flush writes `part-NNNNNN.parquet` (NNNNNN a counter shared by all tables, so name order
is write order). A long soak would leave thousands of them (a 2-hour soak: 1,750), and diag
opens every one; so the writer merges them as it goes (`merge_trailing`): when the newest
FAN_IN parts of one level follow each other, they are rewritten as one part of the next level,
`part-LLLLLL-HHHHHH.lK.parquet`, which holds the rows of every part of this table numbered
LLLLLL to HHHHHH. Levels stop at MAX_LEVEL (a 12-hour soak keeps under 50 parts a table), and a
merge streams its parts, one in memory at a time: a soak's driver holds at most FAN_IN **
(MAX_LEVEL - 1) flushes of one table's rows for a merge, whatever the run's length.

Crash safety: the merged part is written through a temporary name and renamed before the parts
it covers are deleted. A crash between the two leaves both; `live` then leaves out every part a
merged part covers, so each row is read once, and the writer deletes them when it opens the run
again (`covered`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

GLOB = "part-*.parquet"
FAN_IN = 16  # parts of one level merged into one of the next
MAX_LEVEL = 2  # the highest level a merge makes (16 ** 2 flushes, about 43 minutes of rows at 10 s)
_NAME = re.compile(r"^part-(\d+)(?:-(\d+)\.l(\d+))?\.parquet$")


class Part(NamedTuple):
    path: Path
    lo: int  # the first and the last part number whose rows it holds
    hi: int
    level: int  # 0: one flush; k: a merge of FAN_IN parts of level k - 1


def parse(path: Path) -> Part | None:
    m = _NAME.match(path.name)
    if m is None:
        return None
    lo = int(m.group(1))
    return Part(path, lo, int(m.group(2) or lo), int(m.group(3) or 0))


def name(lo: int, hi: int, level: int) -> str:
    return f"part-{lo:06d}.parquet" if level == 0 else f"part-{lo:06d}-{hi:06d}.l{level}.parquet"


def _all(folder: Path) -> list[Part]:
    if not folder.is_dir():
        return []
    found = (parse(p) for p in folder.glob(GLOB))
    return sorted((p for p in found if p is not None), key=lambda p: (p.lo, -p.hi))


def live(folder: Path) -> list[Part]:
    """The parts that hold each row of the table once, in write order: a part whose numbers a
    merged part covers is left out."""
    out: list[Part] = []
    for part in _all(folder):
        if out and out[-1].lo <= part.lo and part.hi <= out[-1].hi:
            continue  # a merge holds its rows; a crash came before it was deleted
        out.append(part)
    return out


def covered(folder: Path) -> list[Part]:
    """Parts a merged part covers (left behind by a crash between a merge and its deletes)."""
    keep = {p.path for p in live(folder)}
    return [p for p in _all(folder) if p.path not in keep]


def last_number(folder: Path) -> int:
    return max((p.hi for p in _all(folder)), default=0)


def merge_trailing(folder: Path) -> int:
    """Merge the newest parts while FAN_IN of one level (below MAX_LEVEL) follow each other;
    returns how many merges were made."""
    merges = 0
    for level in range(MAX_LEVEL):
        parts = live(folder)
        run: list[Part] = []
        for part in reversed(parts):
            if part.level != level:
                break
            run.append(part)
        if len(run) < FAN_IN:
            break
        run.reverse()
        _merge(folder, run, level + 1)
        merges += 1
    return merges


def _merge(folder: Path, run: list[Part], level: int) -> None:
    """The parts of `run` as one part, streamed: one part in memory at a time (a 43-minute merge
    of a soak's steps is ~14 MB as a table; its high-water mark is what the allocators keep)."""
    schema = pa.unify_schemas([pq.read_schema(p.path) for p in run], promote_options="permissive")
    path = folder / name(run[0].lo, run[-1].hi, level)
    tmp = path.with_name(path.name + ".tmp")
    with pq.ParquetWriter(tmp, schema) as writer:
        for part in run:
            writer.write_table(_conform(pq.read_table(part.path), schema))
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    for part in run:
        part.path.unlink(missing_ok=True)


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns in its order: a column it lacks as nulls, each cast to the
    unified type (as concat_tables' permissive promotion does)."""
    columns = [
        table[field.name].cast(field.type) if field.name in table.column_names else pa.nulls(len(table), field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)
