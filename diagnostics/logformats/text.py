"""The lines of a log file as text, whatever it was saved as.

UTF-8 is the usual; a byte-order mark selects UTF-8 or UTF-16 (PowerShell's `>` writes
UTF-16), as do NUL bytes at every other position without one. Line ends may be CRLF. NUL
bytes elsewhere are dropped (a file whose tail was never flushed before a crash reads as
NULs), ANSI colour codes are removed, undecodable bytes become U+FFFD. A line longer than
MAX_LINE characters is no engine's line: it comes back as None, to be counted and skipped
without being read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, Optional

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")  # tab excepted
MAX_LINE = 65536
HEAD_LINES = 200  # lines a format is detected from
OVERLONG = "(a line longer than 64 KiB)"  # stands for one in a head: a line no format matches


def read_lines(path: Path) -> Iterator[tuple[int, Optional[str]]]:
    """(line number, text without its line end), or (line number, None) for an over-long line."""
    with open(path, encoding=_encoding(path), errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if len(line) > MAX_LINE:
                yield lineno, None
                continue
            if "\x00" in line:
                line = line.replace("\x00", "")
            if "\x1b" in line:
                line = ANSI.sub("", line)
            yield lineno, line.rstrip("\r\n")


def head(path: Path, num_lines: int = HEAD_LINES) -> list[str]:
    """The first `num_lines` non-blank lines."""
    out: list[str] = []
    for _, line in read_lines(path):
        if line is None or line.strip():
            out.append(OVERLONG if line is None else line)
            if len(out) >= num_lines:
                break
    return out


def is_text(line: str) -> bool:
    """False for a line holding control characters or bytes that did not decode."""
    return CONTROL.search(line) is None


def _encoding(path: Path) -> str:
    with open(path, "rb") as f:
        start = f.read(4096)
    if start.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if start.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    even, odd = start[0::2], start[1::2]
    if len(odd) >= 16:
        # ASCII text in UTF-16: every other byte is NUL (odd positions little-endian).
        if odd.count(0) > 0.4 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le"
        if even.count(0) > 0.4 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be"
    return "utf-8"
