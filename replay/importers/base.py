"""What every importer shares: options, the result type, small readers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from replay.errors import TraceError
from replay.trace import Call, TraceHeader


@dataclass(frozen=True)
class ImportOptions:
    """Options of the importers; each uses the ones that apply to its format."""

    block_size: int | None = None  # None: the format's own (mooncake 512, bailian 16, agentic 64, else 64)
    prefix_tokens: int | None = None  # opencode: tokens of the fixed prefix every session shares; None = estimate

    def __post_init__(self) -> None:
        if self.block_size is not None and self.block_size < 1:
            raise TraceError(f"block_size: expected an integer >= 1, found {self.block_size!r}")
        if self.prefix_tokens is not None and self.prefix_tokens < 0:
            raise TraceError(f"prefix_tokens: expected an integer >= 0, found {self.prefix_tokens!r}")


class ImportResult(NamedTuple):
    header: TraceHeader
    calls: list[Call]


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line raises naming file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{path}:{lineno}: expected an object, found {type(obj).__name__}")
            yield lineno, obj


def field(obj: dict[str, Any], name: str, kind: type | tuple[type, ...], where: str) -> Any:
    """obj[name], checked for type; raises TraceError naming where and what."""
    if name not in obj:
        raise TraceError(f"{where}: missing field {name!r}")
    value = obj[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TraceError(f"{where}: {name}: expected {expected}, found {json.dumps(value, default=repr)[:60]}")
    return value


def int_list(obj: dict[str, Any], name: str, where: str) -> tuple[int, ...]:
    value = field(obj, name, list, where)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise TraceError(f"{where}: {name}: expected a list of integers")
    return tuple(value)


def count(value: Any, name: str, where: str) -> int:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise TraceError(f"{where}: {name}: expected a count >= 0, found {json.dumps(value, default=repr)[:60]}")
    return int(value)


def number(value: Any, name: str, where: str) -> float:
    """A time or timestamp >= 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise TraceError(f"{where}: {name}: expected a number >= 0, found {json.dumps(value, default=repr)[:60]}")
    return float(value)
