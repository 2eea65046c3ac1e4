"""Importers: public and agent trace formats into tokdrift traces.

Each importer is a function `(src: Path, options: ImportOptions) -> (TraceHeader, list[Call])`
registered under its format name; an unknown name lists the known ones.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from replay.errors import TraceError
from replay.importers import agentic, azure, bailian, mooncake, opencode
from replay.importers.base import ImportOptions, ImportResult

IMPORTERS: dict[str, Callable[[Path, ImportOptions], ImportResult]] = {
    "opencode": opencode.import_opencode,
    "mooncake": mooncake.import_mooncake,
    "bailian": bailian.import_bailian,
    "agentic": agentic.import_agentic,
    "azure": azure.import_azure,
}


def import_trace(fmt: str, src: str | Path, options: ImportOptions | None = None) -> ImportResult:
    """Read `src` in format `fmt` and return the header and calls of a tokdrift trace, sorted by t."""
    try:
        importer = IMPORTERS[fmt]
    except KeyError:
        raise TraceError(f"unknown trace format {fmt!r}; known: {', '.join(sorted(IMPORTERS))}") from None
    src = Path(src)
    if not src.exists():
        raise TraceError(f"{src}: no such file or directory")
    result = importer(src, options or ImportOptions())
    calls = sorted(result.calls, key=lambda c: (c.t, c.session, c.turn))
    return ImportResult(result.header, calls)


__all__ = ["IMPORTERS", "ImportOptions", "ImportResult", "import_trace"]
