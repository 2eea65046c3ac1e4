"""llama.cpp's server (`llama-server`) and Ollama: lines, their clocks, and the formats' detection.

A line is unwrapped in one regex (WRAPPER): an optional outer stamp (journald's `Mon DD
HH:MM:SS host ident[pid]: `, `docker logs -t`'s ISO stamp), llama-server's router prefix
`[port] `, llama.cpp's own prefix (`--log-prefix`: a level letter, with `--log-timestamps` a
`M.SS.mmm.uuu` stamp, the time since the process started) and the message. The message is
then one of: a slot or server line (`slot print_timing: id  0 | task 5 | ...`, `srv
update_slots: ...`), the 2024 server's `INFO [function] text | tid="..." timestamp=UNIX k=v`
(or the same as a JSON object with `--log-format json`), Ollama's own `time=... level=...
msg="..."` and `[GIN] YYYY/MM/DD - HH:MM:SS | 200 | 2.6s | ip | POST "/api/chat"` lines,
Go's `YYYY/MM/DD HH:MM:SS file.go:N: ` (older Ollama), or plain text (llama.cpp prints most
lines without any prefix, timings included).

The clock of a file is the best its lines offer (`clock`): `wall` when some lines carry a date
(lines without one take the next stamped line's time; the 2024 server's UTC `timestamp=` only
where no line has a local one); `relative` when only llama.cpp's
stamps are there (time since the engine started: engine age itself, and a stamp that goes
back is a restart); `busy` when nothing is stamped: the engine's cumulative busy time, the
prompt and eval milliseconds of its requests added in order (slots.py).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from logformats.logtime import EPOCH, file_year, iso_times, journal_iso
from logformats.text import Readable, is_text, read_lines

logger = logging.getLogger(__name__)

WRAPPER = re.compile(
    r"\s*(?:(?P<iso>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?)(?:Z|[+-]\d{2}:?\d{2})?\s+"
    r"(?:(?:\S+\s+)?(?P<iident>[^\s\[:]+)\[\d+\]:\s)?"
    r"|(?P<jmon>[A-Z][a-z]{2})\s+(?P<jday>\d{1,2})\s+(?P<jtime>\d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+"
    r"(?:\S+\s+)?(?P<ident>[^\s\[:]+)(?:\[\d+\])?:\s)?"
    r"(?:\[(?P<child>\d+)\]\s+)?"
    r"(?:(?P<rel>\d+)\.(?P<rels>\d{2})\.(?P<relf>\d{3}\.\d{3})\s)?"
    r"(?:(?P<lvl>[IWEDT])\s)?"
    r"(?P<msg>.*)"
)
SLOT = re.compile(r"slot\s+(\w+): id\s+(\d+) \| task (-?\d+) \|\s?(.*)")
SRV = re.compile(r"srv\s+(\w+): (.*)")
OLD = re.compile(r"(INFO|WARN|WARNING|ERR|ERROR|DEBUG|VERB)\s+\[\s*(\w+)\] (.*?) \|(.*)")
OLD_KV = re.compile(r"(\w+)=(\"(?:[^\"\\]|\\.)*\"|\S+)")
SLOG = re.compile(r"time=(\S+) level=(\w+) (?:source=\S+ )?msg=(\"(?:[^\"\\]|\\.)*\"|\S+)(.*)")
GIN = re.compile(
    r"\[GIN\] (\d{4})/(\d{2})/(\d{2}) - (\d{2}:\d{2}:\d{2}) \|\s*(\d{3})\s*\|\s*(\S+)\s*\|\s*(\S*)\s*\|"
    r"\s*([A-Z]+)\s+\"([^\"]*)\""
)
GOLOG = re.compile(r"(\d{4})/(\d{2})/(\d{2}) (\d{2}:\d{2}:\d{2}) \S+\.go:\d+: (.*)")
ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?")
# Lines only llama.cpp or Ollama print: one of them in a file's head makes it a candidate.
SIGNATURE = re.compile(
    r"slot\s+\w+: id\s+\d+ \| task |srv\s+\w+: |(?:INFO|WARN|ERR|DEBUG|VERB)\s+\[\s*\w+\] .*\| |"
    r"time=\S+ level=\w+ |\[GIN(?:-debug)?\] |\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \S+\.go:\d+: |"
    r"(?:llama|ggml|gguf|common|clip|mtmd)_\w+\s*: |print_info: |load_tensors: |build(?:_info)?: |"
    r"system_info: |main: |(?:prompt eval|eval|total) time\s*=|\{\"(?:tid|timestamp|level|function)\""
)
TAG = re.compile(r"[A-Za-z_][\w.]*\s*: ")  # `function: text`, the shape of most llama.cpp lines
TEXT_KEPT = re.compile(
    r"(?:prompt eval|generation eval|eval|total) time\s*=|draft acceptance|build(?:_info)?: |"
    r"system_info: |main: loading model|(?:done )?request: [A-Z]+ |"
    # the KV cache had no room for a batch (messages.KV_NO_SPACE, KV_FULL)
    r"(?:\w+\s*: )?failed to (?:find free space in the KV|find a memory slot|decode the batch)|"
    r"(?:llama_context|llama_new_context_with_model): +(?:n_ctx|flash_attn) +=|"
    # what the engine says it is (logformats.identity)
    r"main: build = |common_params_print_info: build |llama_model_loader: loaded meta|"
    r"\w+: using device |ggml_\w+: [Ff]ound \d+ |(?:llm_)?load_tensors: offloaded"
)
MAX_SECONDS = 10 * 365 * 86400.0  # a llama.cpp stamp beyond ten years is a garbled one
RESTART_BACKSTEP_S = 1.0  # relative stamps that go back further than this: a new process


class Entry(NamedTuple):
    """One line that matters, after unwrapping."""

    lineno: int
    kind: str  # slot, srv, old, slog, gin, golog, text, tick (only a time)
    payload: Any  # its shape depends on `kind`: (func, body) for srv, (level, msg, rest) for slog, ...
    wall: str  # ISO text of the line's date and time (local, as printed), "" when none
    journal: tuple[str, ...]  # (month name, "DD HH:MM:SS") of a journald stamp, () when none
    rel: float  # llama.cpp's time since start, NaN when none
    unix: str  # ISO text (UTC) of the 2024 server's `timestamp=`, "" when none


class Clock(NamedTuple):
    kind: str  # wall, relative, busy
    secs: np.ndarray  # per entry, seconds after `base`; NaN where the stamp is impossible (the entry is dropped)
    lives: np.ndarray  # per entry, its engine life (relative stamps)
    origins: np.ndarray  # per life, where its stamp 0 lies (relative stamps)
    base: np.datetime64 | None  # wall: the first whole second of the file; else None (--date or 1970)


class Scan(NamedTuple):
    entries: list[Entry]
    num_lines: int
    num_unknown: int
    num_other: int  # lines of text no reader needs
    num_bad_lines: int  # a stamp that is no possible time
    ollama: bool  # Ollama's own lines (or journald ident) seen


def _wrapped(line: str) -> re.Match[str]:
    """The line's wrapper fields and its message: WRAPPER matches every line (all its fields optional)."""
    m = WRAPPER.match(line)
    assert m is not None
    return m


def detect(head: list[str]) -> tuple[str, int] | None:
    """("ollama" or "llama.cpp", number of head lines of that family), or None."""
    strong = count = 0
    ollama = False
    for line in head:
        m = _wrapped(line)
        msg = m.group("msg")
        if SIGNATURE.match(msg):
            strong += 1
            count += 1
            ollama = ollama or msg.startswith(("time=", "[GIN")) or bool(GOLOG.match(msg))
        elif TAG.match(msg) or m.group("rel") or m.group("lvl"):
            count += 1
        ollama = ollama or "ollama" in ((m.group("ident") or m.group("iident") or "").lower())
    if not strong:
        return None
    return ("ollama" if ollama else "llama.cpp"), count


def scan(path: Readable) -> Scan:
    """Pass one: every line unwrapped and classified; the lines that matter are kept."""
    entries: list[Entry] = []
    num_lines = num_unknown = num_other = num_bad = 0
    ollama = False
    for lineno, line in read_lines(path):
        num_lines += 1
        if line is None:
            num_unknown += 1
            continue
        if not line.strip():
            continue
        iso, jmon, jday, jtime, ident, iident, rel_m, rel_s, rel_f, msg = _wrapped(line).group(
            "iso", "jmon", "jday", "jtime", "ident", "iident", "rel", "rels", "relf", "msg"
        )
        # Through journald a bare timing line keeps its alignment after the prefix (`       eval time = ...`).
        msg = msg.strip()
        journal: tuple[str, ...] = ()
        wall, rel = "", np.nan
        if jmon:
            journal = (jmon, f"{jday} {jtime}")
        elif iso:
            wall = iso
        if ident or iident:
            ollama = ollama or "ollama" in (ident or iident).lower()
        if rel_m:
            seconds = int(rel_s)
            rel = int(rel_m) * 60.0 + seconds + int(rel_f[:3]) / 1e3 + int(rel_f[4:]) / 1e6
            if seconds >= 60 or rel > MAX_SECONDS:
                num_bad += 1
                continue
        kind, payload, inner = _classify(msg)
        if kind == "bad":
            num_bad += 1
            continue
        if kind in ("slog", "gin", "golog"):
            ollama = True
        unix = inner if kind == "old" else ""
        wall = wall or (inner if kind != "old" else "")
        if kind == "text":
            if not is_text(msg):
                num_unknown += 1
                continue
            if not TEXT_KEPT.match(msg):
                num_other += 1
                if not (wall or journal or rel == rel):
                    continue
                kind = "tick"
        entries.append(Entry(lineno=lineno, kind=kind, payload=payload, wall=wall, journal=journal, rel=rel, unix=unix))
    return Scan(
        entries=entries,
        num_lines=num_lines,
        num_unknown=num_unknown,
        num_other=num_other,
        num_bad_lines=num_bad,
        ollama=ollama,
    )


def clocks(entries: list[Entry], path: Readable, year: int | None) -> Clock:
    """The file's clock and each entry's seconds on it."""
    n = len(entries)
    lives = np.zeros(n, dtype=np.int64)
    journal = [k for k, e in enumerate(entries) if e.journal]
    wall = [k for k, e in enumerate(entries) if e.wall]
    unix = [] if journal or wall else [k for k, e in enumerate(entries) if e.unix]
    if journal or wall or unix:
        # A Unix stamp is UTC and the others are local time: it is the clock only when it is the only one.
        texts = [e.unix for e in entries] if unix else [e.wall for e in entries]
        if journal:
            if year is None:
                years = [int(entries[k].wall[:4]) for k in wall]
                year = years[0] if years else file_year(path, "journal stamps have no year")
            iso = journal_iso([entries[k].journal[0] for k in journal], [entries[k].journal[1] for k in journal], year)
            for k, text in zip(journal, iso):
                texts[k] = text  # the outer stamp wins: one clock for every line
        stamped_at = [k for k, text in enumerate(texts) if text]
        times = iso_times([texts[k] for k in stamped_at])
        valid = ~np.isnat(times)
        base = times[valid].min().astype("datetime64[s]").astype("datetime64[ns]") if valid.any() else EPOCH
        secs = np.full(n, np.nan)
        secs[stamped_at] = (times - base) / np.timedelta64(1, "s")  # NaN where NaT
        bad = np.zeros(n, dtype=bool)
        bad[stamped_at] = ~valid
        # A line without a stamp (llama.cpp's, inside Ollama's log) took place by the next stamped line.
        filled = _fill(secs, backward=True)
        filled[bad] = np.nan
        return Clock(kind="wall", secs=filled, lives=lives, origins=np.zeros(0), base=base)
    rel = np.array([e.rel for e in entries], dtype=float)
    if np.isfinite(rel).any():
        stamped = np.flatnonzero(np.isfinite(rel))
        values = rel[stamped]
        breaks = np.concatenate([[False], np.diff(values) < -RESTART_BACKSTEP_S])
        life_of_stamped = np.cumsum(breaks)
        # Lives end to end: each starts a second after the previous one's last stamp.
        starts = np.flatnonzero(np.concatenate([[True], breaks[1:]]))  # first stamp of each life
        ends = np.maximum.reduceat(values, starts)
        origins = np.concatenate([[0.0], np.cumsum(ends + 1.0)])[:-1]
        secs = np.full(n, np.nan)
        secs[stamped] = values + origins[life_of_stamped]
        lives_f = np.full(n, np.nan)
        lives_f[stamped] = life_of_stamped
        lives = _fill(lives_f, backward=False).astype(np.int64)
        return Clock(kind="relative", secs=_fill(secs, backward=False), lives=lives, origins=origins, base=None)
    return Clock(kind="busy", secs=np.full(n, np.nan), lives=lives, origins=np.zeros(0), base=None)


def _fill(values: np.ndarray, backward: bool) -> np.ndarray:
    """NaNs take the next finite value (backward) or the previous one, then the other way."""
    s = pd.Series(values)
    filled: np.ndarray = (s.bfill().ffill() if backward else s.ffill().bfill()).to_numpy(dtype=float, copy=True)
    return filled


def _classify(msg: str) -> tuple[str, object, str]:
    """(kind, payload, ISO stamp the message itself carries or "")."""
    if msg.startswith("slot "):
        m = SLOT.match(msg)
        if m:
            return "slot", (m.group(1), int(m.group(2)), int(m.group(3)), m.group(4).strip()), ""
    elif msg.startswith("srv "):
        m = SRV.match(msg)
        if m:
            return "srv", (m.group(1), m.group(2).strip()), ""
    elif msg.startswith("time="):
        m = SLOG.match(msg)
        if m:
            iso = ISO.match(m.group(1))
            if iso is None:
                return "bad", None, ""
            return "slog", (m.group(2), m.group(3).strip('"'), m.group(4)), iso.group(0)
    elif msg.startswith("[GIN]"):
        m = GIN.match(msg)
        if m is None:
            return "bad", None, ""
        y, mo, d, clock, status, latency, ip, method, route = m.groups()
        return "gin", (int(status), latency, ip, method, route), f"{y}-{mo}-{d}T{clock}"
    elif msg.startswith(("INFO", "WARN", "ERR", "DEBUG", "VERB")):
        m = OLD.match(msg)
        if m:
            kv = {k: v.strip('"') for k, v in OLD_KV.findall(m.group(4))}
            return "old", (m.group(2), m.group(3).strip(), kv), _unix_iso(kv.get("timestamp"))
    elif msg.startswith("{"):
        try:
            doc = json.loads(msg)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "msg" in doc and "function" in doc:
            kv = {str(k): str(v) for k, v in doc.items()}
            return "old", (kv["function"], kv["msg"], kv), _unix_iso(kv.get("timestamp"))
    elif msg[:4].isdigit() and msg[4:5] == "/":
        m = GOLOG.match(msg)
        if m:
            return "golog", m.group(5), f"{m.group(1)}-{m.group(2)}-{m.group(3)}T{m.group(4)}"
    return "text", msg, ""


def _unix_iso(text: str | None) -> str:
    """ISO text (UTC) of a Unix timestamp, "" when there is none or it is impossible."""
    try:
        seconds = float(text) if text is not None else np.nan
        if not 0 <= seconds < 9e9:
            return ""
        return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    except (ValueError, OverflowError, OSError):
        return ""
