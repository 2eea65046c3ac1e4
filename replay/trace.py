"""Trace format v1: a JSON Lines file, a header line, then one line per model call.

```
{"format": "tokdrift-trace", "version": 1, "block_size": 64, "source": "synth:agentic", ...}
{"t": 0.0, "session": "s0", "turn": 0, "hash_ids": [1, 2, 3], "input_tokens": 180, "output_tokens": 42, ...}
```

`hash_ids` are prefix blocks of `block_size` tokens: two calls whose first k ids are equal
share their first k blocks of prompt. Readers refuse a malformed line with the file, the
line number and what was wrong, or count and skip it when asked to.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from replay.errors import TraceError
from rundir.jsonl import cut_torn_tail

log = logging.getLogger(__name__)

FORMAT_NAME = "tokdrift-trace"
FORMAT_VERSION = 1
CALL_KINDS = ("turn", "compaction", "subagent")


@dataclass(frozen=True, kw_only=True)
class TraceHeader:
    """The first line of a trace."""

    block_size: int  # tokens per hash id
    source: str  # where the calls came from: "synth:agentic", "opencode", "record", ...
    created: str | None = None  # ISO-8601 with time zone; t = 0 is this instant when known
    meta: dict[str, Any] = field(default_factory=dict)  # free-form: generator options, max_context, ...
    version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.block_size, int) or isinstance(self.block_size, bool) or self.block_size < 1:
            raise TraceError(f"block_size: expected an integer >= 1, found {self.block_size!r}")
        if not isinstance(self.source, str):
            raise TraceError(f"source: expected a string, found {self.source!r}")
        if self.version != FORMAT_VERSION:
            raise TraceError(f"version: this reader understands version {FORMAT_VERSION}, found {self.version!r}")

    @property
    def created_unix(self) -> float | None:
        """`created` as seconds since the epoch, or None when unknown."""
        if self.created is None:
            return None
        return datetime.fromisoformat(self.created).timestamp()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT_NAME,
            "version": self.version,
            "block_size": self.block_size,
            "source": self.source,
        }
        if self.created is not None:
            out["created"] = self.created
        if self.meta:
            out["meta"] = self.meta
        return out


@dataclass(frozen=True, kw_only=True)
class Call:
    """One model call. Lengths are in tokens, times in seconds."""

    t: float  # send time, from trace start
    session: str
    turn: int  # index of the call within its session
    hash_ids: tuple[int, ...]  # prefix blocks; equal ids mean equal content
    input_tokens: int  # every prompt token, cached or not
    output_tokens: int  # every generated token, reasoning included
    reasoning_tokens: int | None = None  # the reasoning share of output_tokens
    think_time: float | None = None  # client time between the previous call's end and this send
    kind: str = "turn"  # turn | compaction | subagent
    parent: str | None = None  # the parent session of a subagent
    cached_tokens: int | None = None  # prompt tokens the original server reported as cached
    ttft: float | None = None  # as originally observed
    duration: float | None = None  # as originally observed, send to last byte
    messages: list[Any] | None = None  # original text, only when the user kept it

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens"):
            _check_count(name, getattr(self, name))
        for name in ("reasoning_tokens", "cached_tokens"):
            if getattr(self, name) is not None:
                _check_count(name, getattr(self, name))
        _check_time("t", self.t)
        for name in ("think_time", "ttft", "duration"):
            if getattr(self, name) is not None:
                _check_time(name, getattr(self, name))
        if not isinstance(self.session, str) or not self.session:
            raise TraceError(f"session: expected a non-empty string, found {self.session!r}")
        _check_count("turn", self.turn)
        if self.kind not in CALL_KINDS:
            raise TraceError(f"kind: expected one of {', '.join(CALL_KINDS)}, found {self.kind!r}")
        if self.parent is not None and not isinstance(self.parent, str):
            raise TraceError(f"parent: expected a string, found {self.parent!r}")
        if not isinstance(self.hash_ids, tuple) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in self.hash_ids
        ):
            raise TraceError(f"hash_ids: expected a list of integers, found {_short(self.hash_ids)}")
        if self.reasoning_tokens is not None and self.reasoning_tokens > self.output_tokens:
            raise TraceError(
                f"reasoning_tokens: expected at most output_tokens ({self.output_tokens}), found {self.reasoning_tokens}"
            )
        if self.messages is not None and not isinstance(self.messages, list):
            raise TraceError(f"messages: expected a list, found {_short(self.messages)}")

    @classmethod
    def from_json(cls, obj: Any) -> Call:
        """Build a call from one decoded line; raises TraceError naming the bad field."""
        if not isinstance(obj, dict):
            raise TraceError(f"expected an object, found {_short(obj)}")
        missing = [k for k in ("t", "session", "turn", "hash_ids", "input_tokens", "output_tokens") if k not in obj]
        if missing:
            raise TraceError(f"missing field {', '.join(missing)}")
        hash_ids = obj["hash_ids"]
        if not isinstance(hash_ids, list):
            raise TraceError(f"hash_ids: expected a list of integers, found {_short(hash_ids)}")
        kwargs = {k: obj[k] for k in _CALL_FIELDS if k in obj}
        kwargs["hash_ids"] = tuple(hash_ids)
        return cls(**kwargs)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["hash_ids"] = list(self.hash_ids)
        return {k: v for k, v in out.items() if v is not None and not (k == "kind" and v == "turn")}


_CALL_FIELDS = tuple(Call.__dataclass_fields__)


class Trace(NamedTuple):
    header: TraceHeader
    calls: list[Call]
    num_bad: int  # malformed lines skipped (only with skip_bad)
    bad_lines: list[str]  # the first few of their messages


def read_trace(path: str | os.PathLike[str], *, skip_bad: bool = False) -> Trace:
    """Read a whole trace. A malformed call line raises TraceError unless `skip_bad`."""
    calls: list[Call] = []
    bad: list[str] = []
    num_bad = 0
    header = None
    for item in _iter_lines(Path(path), skip_bad):
        if isinstance(item, TraceHeader):
            header = item
        elif isinstance(item, Call):
            calls.append(item)
        else:
            num_bad += 1
            if len(bad) < 20:
                bad.append(item)
    if header is None:
        raise TraceError(f"{path}: empty file, expected a {FORMAT_NAME} header line")
    if num_bad:
        log.warning("%s: skipped %d malformed line(s), first: %s", path, num_bad, bad[0])
    return Trace(header, calls, num_bad, bad)


def read_header(path: str | os.PathLike[str]) -> TraceHeader:
    """Only the header line of a trace."""
    with open(path, encoding="utf-8") as f:
        line = f.readline()
    if not line.strip():
        raise TraceError(f"{path}: empty file, expected a {FORMAT_NAME} header line")
    return _parse_header(line, path)


def _iter_lines(path: Path, skip_bad: bool) -> Iterator[TraceHeader | Call | str]:
    try:
        f = open(path, encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open trace ({exc.strerror})") from None
    with f:
        header_seen = False
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if not header_seen:
                header_seen = True
                yield _parse_header(line, path)
                continue
            try:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
                yield Call.from_json(obj)
            except (TraceError, TypeError) as exc:
                message = f"{path}:{lineno}: {exc}"
                if not skip_bad:
                    raise TraceError(message) from None
                yield message


def _parse_header(line: str, path: str | os.PathLike[str]) -> TraceHeader:
    where = f"{path}:1"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{where}: header is not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
        found = obj.get("format") if isinstance(obj, dict) else _short(obj)
        raise TraceError(f'{where}: expected a header with "format": "{FORMAT_NAME}", found {found!r}')
    version = obj.get("version")
    if version != FORMAT_VERSION:
        raise TraceError(f"{where}: this reader understands trace version {FORMAT_VERSION}, found {version!r}")
    if "block_size" not in obj:
        raise TraceError(f"{where}: header is missing block_size")
    meta = obj.get("meta", {})
    if not isinstance(meta, dict):
        raise TraceError(f"{where}: meta: expected an object, found {_short(meta)}")
    try:
        return TraceHeader(
            block_size=obj["block_size"], source=obj.get("source", "unknown"), created=obj.get("created"), meta=meta
        )
    except TraceError as exc:
        raise TraceError(f"{where}: {exc}") from None


class TraceWriter:
    """Writes a trace one call per line, flushed as each call is written.

    A crash loses at most the line being written. Opening an existing trace with
    `append=True` checks its header and cuts a torn last line left by an earlier crash.
    """

    def __init__(self, path: str | os.PathLike[str], header: TraceHeader, *, append: bool = False) -> None:
        self.path = Path(path)
        self.num_written = 0
        try:
            self._open(header, append)
        except OSError as exc:
            raise TraceError(f"{self.path}: cannot write trace ({exc.strerror})") from None

    def _open(self, header: TraceHeader, append: bool) -> None:
        if append and self.path.exists() and self.path.stat().st_size > 0:
            existing = read_header(self.path)
            if existing.block_size != header.block_size:
                raise TraceError(
                    f"{self.path}: cannot append: block_size {header.block_size} differs from the trace's {existing.block_size}"
                )
            self.header = existing
            cut_torn_tail(self.path)
            self._file = open(self.path, "a", encoding="utf-8", buffering=1)
        else:
            self.header = header
            self._file = open(self.path, "w", encoding="utf-8", buffering=1)
            self._write_line(header.to_json())

    def write(self, call: Call) -> None:
        self._write_line(call.to_json())
        self.num_written += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _write_line(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()


def write_trace(path: str | os.PathLike[str], header: TraceHeader, calls: Iterable[Call]) -> int:
    """Write a whole trace; returns the number of calls written."""
    with TraceWriter(path, header) as writer:
        for call in calls:
            writer.write(call)
        return writer.num_written


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _check_count(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TraceError(f"{name}: expected an integer >= 0, found {_short(value)}")


def _check_time(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{name}: expected a number of seconds >= 0, found {_short(value)}")


def _short(value: Any) -> str:
    text = json.dumps(list(value) if isinstance(value, tuple) else value, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."
