"""The lines of a log file as text, whatever it was saved as.

A gzip-compressed file (a rotated `engine.log.1.gz`) is read through gzip, by its magic bytes.
UTF-8 is the usual; a byte-order mark selects UTF-8 or UTF-16 (PowerShell's `>` writes
UTF-16), as do NUL bytes at every other position without one. Line ends may be CRLF. NUL
bytes elsewhere are dropped (a file whose tail was never flushed before a crash reads as
NULs), ANSI colour codes are removed, undecodable bytes become U+FFFD. A line longer than
MAX_LINE characters is no engine's line: it comes back as None, to be counted and skipped
without being read.
"""

from __future__ import annotations

import gzip
import io
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ufffd]")  # tab excepted
MAX_LINE = 65536
HEAD_LINES = 200  # lines a format is detected from
OVERLONG = "(a line longer than 64 KiB)"  # stands for one in a head: a line no format matches


class Text(NamedTuple):
    """Log or scrape text already in memory (the lines a soak just tailed, a test's lines), read
    as a file with that content would be; `name` stands for the path in messages."""

    data: str | bytes
    name: str = "<text>"

    def __str__(self) -> str:
        return self.name


Readable = Path | str | Text  # a path, or the text itself


def read_lines(path: Readable) -> Iterator[tuple[int, str | None]]:
    """(line number, text without its line end), or (line number, None) for an over-long line."""
    with _open(path) as f:
        for lineno, line in enumerate(_lines(f, path), 1):
            if len(line) > MAX_LINE:
                yield lineno, None
                continue
            if "\x00" in line:
                line = line.replace("\x00", "")
            if "\x1b" in line:
                line = ANSI.sub("", line)
            yield lineno, line.rstrip("\r\n")


def _lines(f: io.TextIOBase, path: Readable) -> Iterator[str]:
    """The file's lines; a compressed file cut short (a crash while it was written) ends where
    its readable part does, with a warning."""
    try:
        yield from f
    except (EOFError, OSError) as exc:
        logger.warning("%s: compressed data ends early (%s); read up to there", path, exc)


def head(path: Readable, num_lines: int = HEAD_LINES) -> list[str]:
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


GZIP_MAGIC = b"\x1f\x8b"


def _open(path: Readable) -> io.TextIOBase:
    if not isinstance(path, Text):
        if _raw_start(path).startswith(GZIP_MAGIC):
            return gzip.open(path, "rt", encoding=_encoding(_start(path)), errors="replace")
        return open(path, encoding=_encoding(_start(path)), errors="replace")
    if isinstance(path.data, str):
        return io.StringIO(path.data)
    return io.TextIOWrapper(io.BytesIO(path.data), encoding=_encoding(path.data[:4096]), errors="replace")


def _raw_start(path: Path | str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4096)


def _start(path: Path | str) -> bytes:
    """The first bytes of the text (decompressed where the file is gzip)."""
    start = _raw_start(path)
    if start.startswith(GZIP_MAGIC):
        try:
            with gzip.open(path, "rb") as f:
                return f.read(4096)
        except (OSError, EOFError):
            return b""
    return start


def _encoding(start: bytes) -> str:
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
