"""opencode sessions: an `opencode export` JSON, a storage folder of JSON files, or opencode.db.

Shapes (opencode's `MessageV2`): a message is `{info, parts}`; an assistant `info` has
`time.created/completed` (ms), `parentID` (the user message), `summary`/`mode`/`agent`
("compaction" for a summary); parts are ordered by id and one model call ends at each
`step-finish`, whose `tokens = {input, output, reasoning, cache: {read, write}}` are that
call's own. `input` is the uncached prompt only, so a call's prompt is input + cache read +
cache write; its output is output + reasoning. Tool parts carry `state.time.start/end`.

opencode does not store prefix hashes, so they are rebuilt: each session's calls append
onto the previous call's context (prompt + output) and a call shorter than that context
(after compaction) keeps only the fixed prefix (system prompt + tools) every session shares.
A compaction call (opencode sends it with its own short system prompt and no tools) shares
nothing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeAlias

from replay.blocks import BlockChain, IdAllocator
from replay.errors import TraceError
from replay.importers.base import ImportOptions, ImportResult, read_json
from replay.trace import Call, TraceHeader

log = logging.getLogger(__name__)

DEFAULT_BLOCK_SIZE = 64

_Obj: TypeAlias = dict[str, Any]  # a decoded JSON object: a message info, a part, a tokens record
_Message: TypeAlias = tuple[_Obj, list[_Obj]]  # (info, parts)


@dataclass
class _Session:
    id: str
    parent_id: str | None
    created: float  # ms
    messages: list[_Message]  # parts in id order


@dataclass(kw_only=True)
class _Step:
    t_ms: float
    think_ms: float | None
    tokens: _Obj
    kind: str
    where: str


def import_opencode(src: Path, options: ImportOptions) -> ImportResult:
    sessions = _load(src)
    if not sessions:
        raise TraceError(f"{src}: no opencode sessions found")
    block_size = options.block_size or DEFAULT_BLOCK_SIZE
    steps_by_session = {s.id: _steps(s) for s in sessions}
    all_steps = [st for steps in steps_by_session.values() for st in steps]
    if not all_steps:
        raise TraceError(f"{src}: opencode sessions hold no finished model call (no step-finish part)")
    base_ms = min(st.t_ms for st in all_steps)
    prefix = options.prefix_tokens
    if prefix is None:
        firsts = [_input(steps[0]) for steps in steps_by_session.values() if steps]
        prefix = int(0.9 * min(firsts)) // block_size * block_size
    alloc = IdAllocator()
    shared = BlockChain(block_size, alloc)
    shared.extend(prefix)
    calls: list[Call] = []
    for session in sorted(sessions, key=lambda s: (s.created, s.id)):
        chain = shared.copy()
        for turn, step in enumerate(steps_by_session[session.id]):
            num_in = _input(step)
            if step.kind == "compaction":
                # opencode summarises with its own system prompt and no tools: nothing is shared.
                fresh = BlockChain(block_size, alloc)
                fresh.extend(num_in)
                hash_ids = tuple(fresh.ids)
            else:
                chain.advance_to(num_in, reset_to=prefix)
                hash_ids = tuple(chain.ids)
            tokens = step.tokens
            reasoning = int(tokens.get("reasoning") or 0)
            output = int(tokens.get("output") or 0) + reasoning
            kind = "subagent" if session.parent_id and step.kind == "turn" else step.kind
            calls.append(
                Call(
                    t=max(0.0, (step.t_ms - base_ms) / 1000),
                    session=session.id,
                    turn=turn,
                    hash_ids=hash_ids,
                    input_tokens=num_in,
                    output_tokens=output,
                    reasoning_tokens=reasoning,
                    think_time=None if step.think_ms is None else max(0.0, step.think_ms / 1000),
                    kind=kind,
                    parent=session.parent_id,
                    cached_tokens=int(_cache(tokens).get("read") or 0),
                )
            )
            if step.kind != "compaction":
                chain.extend(output)
    created = datetime.fromtimestamp(base_ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    header = TraceHeader(
        block_size=block_size,
        source="opencode",
        created=created,
        meta={"prefix_tokens": prefix, "sessions": len(sessions), "imported_from": str(src)},
    )
    return ImportResult(header, calls)


def _steps(session: _Session) -> list[_Step]:
    """One step per step-finish, with its send time and the client time before it.

    opencode writes one assistant message per model call (newer builds) or several calls
    into one message (older builds); both read the same way. A call's think time runs from
    the end of the previous call's generation (its first tool starting, or its message
    completing) to this call's send (its message's creation, or its previous step's tools
    ending), so it holds tool execution and the user's pauses.
    """
    steps: list[_Step] = []
    user_parts: dict[str, list[_Obj]] = {}
    gen_end: float | None = None
    for info, parts in session.messages:
        mid = info.get("id", "?")
        if info.get("role") == "user":
            user_parts[mid] = parts
            continue
        if info.get("role") != "assistant":
            continue
        where = f"session {session.id} message {mid}"
        time = info.get("time") or {}
        created = _num(time.get("created"), "time.created", where)
        compaction = (
            info.get("summary") is True
            or "compaction" in (info.get("mode"), info.get("agent"))
            or any(p.get("type") == "compaction" for p in user_parts.get(str(info.get("parentID")), []))
        )
        kind = "compaction" if compaction else "turn"
        groups = _split_steps(parts)
        if not groups and isinstance(info.get("tokens"), dict) and _input_of(info["tokens"]) > 0:
            groups = [([], {"tokens": info["tokens"]})]  # an older build without step parts
        tools_end: float | None = None
        t = created
        for j, (step_parts, finish) in enumerate(groups):
            tokens = finish.get("tokens")
            if not isinstance(tokens, dict):
                raise TraceError(f"{where}: step-finish without a tokens object")
            if j > 0:
                t = tools_end if tools_end is not None else (_first_time(step_parts) or t)
            think = None if gen_end is None else max(0.0, t - gen_end)
            if _input_of(tokens) > 0:
                steps.append(_Step(t_ms=t, think_ms=think, tokens=tokens, kind=kind, where=where))
            else:
                log.info("%s: step %d reports no prompt tokens; skipped", where, j)
            tools = [
                p
                for p in step_parts
                if p.get("type") == "tool"
                and isinstance((p.get("state") or {}).get("time"), dict)
                and "end" in p["state"]["time"]
            ]
            if tools:
                gen_end = min(_tool_time(p, "start", where) for p in tools)
                tools_end = max(_tool_time(p, "end", where) for p in tools)
            else:
                gen_end = _last_time(step_parts) or t
                tools_end = None
        completed = time.get("completed")
        if tools_end is None and isinstance(completed, (int, float)):
            gen_end = float(completed)
    return steps


def _split_steps(parts: list[_Obj]) -> list[tuple[list[_Obj], _Obj]]:
    groups: list[tuple[list[_Obj], _Obj]] = []
    current: list[_Obj] = []
    for part in parts:
        if part.get("type") == "step-finish":
            groups.append((current, part))
            current = []
        else:
            current.append(part)
    return groups


def _first_time(parts: list[_Obj]) -> float | None:
    times = []
    for p in parts:
        time = p.get("time") if p.get("type") in ("text", "reasoning") else (p.get("state") or {}).get("time")
        if isinstance(time, dict) and isinstance(time.get("start"), (int, float)):
            times.append(float(time["start"]))
    return min(times) if times else None


def _last_time(parts: list[_Obj]) -> float | None:
    times = [
        float(p["time"]["end"])
        for p in parts
        if p.get("type") in ("text", "reasoning")
        and isinstance(p.get("time"), dict)
        and isinstance(p["time"].get("end"), (int, float))
    ]
    return max(times) if times else None


def _tool_time(part: _Obj, key: str, where: str) -> float:
    return _num(part["state"]["time"].get(key), f"tool {part.get('callID', '?')} state.time.{key}", where)


def _num(value: Any, name: str, where: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TraceError(f"{where}: {name}: expected a number (ms), found {json.dumps(value)[:40]}")
    return float(value)


def _cache(tokens: _Obj) -> _Obj:
    cache = tokens.get("cache")
    return cache if isinstance(cache, dict) else {}


def _input_of(tokens: _Obj) -> int:
    cache = _cache(tokens)
    return int(tokens.get("input") or 0) + int(cache.get("read") or 0) + int(cache.get("write") or 0)


def _input(step: _Step) -> int:
    return _input_of(step.tokens)


# --- loading the three storage shapes ---------------------------------------------------


def _load(src: Path) -> list[_Session]:
    if src.is_dir():
        db = src / "opencode.db"
        if db.exists():
            return _load_db(db)
        for root in (src, src / "storage"):
            if (root / "message").is_dir() and (root / "part").is_dir():
                return _load_storage(root)
        exports = sorted(src.glob("*.json"))
        if exports:
            return [s for path in exports for s in _load_export(path)]
        raise TraceError(f"{src}: expected an opencode export, a storage folder (message/, part/) or opencode.db")
    with open(src, "rb") as f:
        magic = f.read(16)
    if magic.startswith(b"SQLite format 3"):
        return _load_db(src)
    return _load_export(src)


def _load_export(path: Path) -> list[_Session]:
    text = path.read_text(encoding="utf-8")
    start = text.find("{") if not text.lstrip().startswith(("{", "[")) else 0  # tolerate a banner line
    try:
        data = json.loads(text[max(start, 0) :])
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    exports = data if isinstance(data, list) else [data]
    sessions = []
    for i, export in enumerate(exports):
        where = f"{path}" if len(exports) == 1 else f"{path}[{i}]"
        if not isinstance(export, dict) or not isinstance(export.get("messages"), list):
            raise TraceError(
                f"{where}: expected an opencode export {{info, messages: [...]}}, found keys "
                f"{sorted(export) if isinstance(export, dict) else type(export).__name__}"
            )
        info = export.get("info") or {}
        messages = []
        for k, m in enumerate(export["messages"]):
            if (
                not isinstance(m, dict)
                or not isinstance(m.get("info"), dict)
                or not isinstance(m.get("parts", []), list)
            ):
                raise TraceError(f"{where}: messages[{k}]: expected {{info, parts}}")
            messages.append((m["info"], list(m.get("parts", []))))
        sid = info.get("id") or (messages[0][0].get("sessionID") if messages else None) or f"{path.stem}-{i}"
        sessions.append(_session(sid, info.get("parentID"), (info.get("time") or {}).get("created"), messages))
    return sessions


def _load_storage(root: Path) -> list[_Session]:
    infos: dict[str, _Obj] = {}
    session_dir = root / "session"
    if session_dir.is_dir():
        for path in session_dir.rglob("*.json"):
            info = read_json(path)
            if isinstance(info, dict) and "id" in info:
                infos[info["id"]] = info
    sessions = []
    for msg_dir in sorted(p for p in (root / "message").iterdir() if p.is_dir()):
        messages = []
        for path in sorted(msg_dir.glob("*.json")):
            info = read_json(path)
            if not isinstance(info, dict):
                raise TraceError(f"{path}: expected a message object")
            part_dir = root / "part" / info.get("id", path.stem)
            parts = [read_json(p) for p in sorted(part_dir.glob("*.json"))] if part_dir.is_dir() else []
            messages.append((info, sorted(parts, key=lambda p: p.get("id", ""))))
        info = infos.get(msg_dir.name, {})
        sessions.append(_session(msg_dir.name, info.get("parentID"), (info.get("time") or {}).get("created"), messages))
    return sessions


def _load_db(path: Path) -> list[_Session]:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open SQLite database ({exc})") from None
    try:
        sessions_rows = con.execute("SELECT id, parent_id, time_created FROM session").fetchall()
        messages_rows = con.execute("SELECT id, session_id, time_created, data FROM message").fetchall()
        parts_rows = con.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id").fetchall()
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: expected opencode tables session, message, part ({exc})") from None
    finally:
        con.close()
    parts_by_message: dict[str, list[_Obj]] = {}
    for pid, mid, data in parts_rows:
        part = _row_json(data, path, "part", pid)
        parts_by_message.setdefault(mid, []).append({**part, "id": pid, "messageID": mid})
    msgs_by_session: dict[str, list[_Message]] = {}
    for mid, sid, created, data in messages_rows:
        info = {**_row_json(data, path, "message", mid), "id": mid, "sessionID": sid}
        info.setdefault("time", {}).setdefault("created", created)
        msgs_by_session.setdefault(sid, []).append((info, parts_by_message.get(mid, [])))
    return [_session(sid, parent, created, msgs_by_session.get(sid, [])) for sid, parent, created in sessions_rows]


def _row_json(data: Any, path: Path, table: str, row_id: str) -> _Obj:
    try:
        obj = json.loads(data)
    except (TypeError, json.JSONDecodeError):
        raise TraceError(f"{path}: {table} {row_id}: data is not a JSON object") from None
    if not isinstance(obj, dict):
        raise TraceError(f"{path}: {table} {row_id}: data is not a JSON object")
    return obj


def _session(sid: str, parent: str | None, created: Any, messages: list[_Message]) -> _Session:
    def created_of(m: _Message) -> tuple[float, str]:
        value = (m[0].get("time") or {}).get("created")
        return (value if isinstance(value, (int, float)) else 0, m[0].get("id", ""))

    messages = sorted(messages, key=created_of)
    if not isinstance(created, (int, float)):
        created = created_of(messages[0])[0] if messages else 0
    return _Session(str(sid), parent, float(created), messages)
