"""Writing the run directory: parts, events, manifest (docs/run-directory.md).

Nothing written is ever rewritten in place: a part is written to `part-NNNNNN.parquet.tmp`
and renamed, `events.jsonl` is appended a whole line at a time and flushed, the manifest is
replaced by rename. A crash at any instant loses at most the rows buffered since the last
flush and leaves every file that was there readable. Parts are merged as the run goes
(rundir.parts), the merge renamed into place before the parts it holds are deleted.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, overload

import pyarrow as pa
import pyarrow.parquet as pq

from rundir import parts, schema
from rundir.jsonl import cut_torn_tail
from rundir.manifest import RunManifest
from rundir.rows import Event, ProbeRow, RequestRow, SnapshotRow, StepRow

logger = logging.getLogger(__name__)

_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}


class RunStore:
    """Buffers rows per table and writes them out as parts; appends events; keeps the manifest."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for table in schema.TABLES:
            (self.run_dir / table).mkdir(exist_ok=True)
        (self.run_dir / schema.PROFILES).mkdir(exist_ok=True)
        self._rows: dict[str, list[Mapping[str, object]]] = {table: [] for table in schema.TABLES}
        self._next_part = 1 + max((parts.last_number(self.run_dir / table) for table in schema.TABLES), default=0)
        for tmp in self.run_dir.glob("*/*.tmp"):  # a part torn by a crash; its rows are lost either way
            tmp.unlink(missing_ok=True)
        for table in schema.TABLES:  # parts a merge holds, left behind by a crash before their delete
            for part in parts.covered(self.run_dir / table):
                part.path.unlink(missing_ok=True)
        cut_torn_tail(self.run_dir / schema.EVENTS)
        self._events = open(self.run_dir / schema.EVENTS, "a", encoding="utf-8")
        self.num_rows = {table: 0 for table in schema.TABLES}  # written or buffered since open

    # --- rows and events -----------------------------------------------------------------------

    # One row type a table (rundir.rows): a row of another table does not type-check.
    @overload
    def add(self, table: Literal["requests"], row: RequestRow) -> None: ...
    @overload
    def add(self, table: Literal["steps"], row: StepRow) -> None: ...
    @overload
    def add(self, table: Literal["snapshots"], row: SnapshotRow, extra: Mapping[str, float] | None = None) -> None: ...
    @overload
    def add(self, table: Literal["probes"], row: ProbeRow) -> None: ...

    def add(self, table: str, row: Mapping[str, object], extra: Mapping[str, float] | None = None) -> None:
        """One row of `table`; a snapshot's `extra` columns (rundir.rows.Snapshot) written after its documented ones."""
        if table not in self._rows:
            raise KeyError(f"unknown table {table!r}; known: {', '.join(self._rows)}")
        self._rows[table].append({**row, **extra} if extra else row)
        self.num_rows[table] += 1

    def event(self, kind: str, t: float | None = None, **fields: Any) -> Event:
        """One line of events.jsonl, written now; `fields` are the kind's own (schema.EVENT_KINDS)."""
        if kind not in schema.EVENT_KINDS:
            raise KeyError(f"unknown event kind {kind!r}; known: {', '.join(schema.EVENT_KINDS)}")
        event = Event(time.time() if t is None else t, kind, fields)
        self._events.write(json.dumps(event.to_json(), default=_json_default) + "\n")
        self._events.flush()
        return event

    def flush(self) -> int:
        """Write every table's buffered rows as one new part each; returns the rows written."""
        written = 0
        for table, rows in self._rows.items():
            if not rows:
                continue
            path = self.run_dir / table / parts.name(self._next_part, self._next_part, 0)
            _write_part(path, table, rows)
            self._next_part += 1
            written += len(rows)
            self._rows[table] = []
            parts.merge_trailing(self.run_dir / table)
        os.fsync(self._events.fileno())
        return written

    def close(self) -> None:
        self.flush()
        self._events.close()

    # --- manifest ------------------------------------------------------------------------------

    def write_manifest(self, manifest: RunManifest) -> None:
        write_json_atomic(self.run_dir / schema.MANIFEST, manifest.to_json())


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, default=_json_default)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _write_part(path: Path, table: str, rows: list[Mapping[str, object]]) -> None:
    columns = schema.TABLES[table]
    names = list(columns) + sorted({k for row in rows for k in row} - set(columns))
    arrays, fields = [], []
    for name in names:
        kind = _ARROW_TYPES[columns[name][0]] if name in columns else None
        values: list[Any] = [row.get(name) for row in rows]  # Parquet's: converted to the column's type
        if kind is pa.float64():
            values = [None if v is None else float(v) for v in values]
        elif kind is pa.int64():
            values = [None if v is None else int(v) for v in values]
        elif kind is pa.string():
            values = [None if v is None else str(v) for v in values]
        array = pa.array(values, type=kind)
        arrays.append(array)
        fields.append(pa.field(name, array.type))
    data = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(data, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _json_default(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        return value._asdict()
    if hasattr(value, "item"):
        return value.item()
    return str(value)
