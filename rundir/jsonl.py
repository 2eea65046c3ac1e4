"""JSON Lines files a crash may have cut mid-line (events.jsonl, traces)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def cut_torn_tail(path: Path) -> None:
    """Drop a last line a crash left half-written, so the next line starts on its own line."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        log.warning("%s: cutting a torn last line of %d bytes", path, len(data) - keep)
        f.truncate(keep)
