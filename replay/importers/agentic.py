"""Agentic coding traces (the Weka / Claude Code shape).

One session per object: `id`, `block_size` (64), `requests[]` of `{t, type, in, out,
hash_ids, think_time, ttft}`, where an entry that holds its own `requests[]` is a subagent.
The file is one JSON object, a JSON list of them, or JSON Lines of them. Times are seconds
from the session's start (a session's own `t`/`start` offsets it; default 0), and a
subagent's requests are on its parent's clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from replay.errors import TraceError
from replay.importers.base import ImportOptions, ImportResult, count, int_list
from replay.trace import Call, TraceHeader

DEFAULT_BLOCK_SIZE = 64


def import_agentic(src: Path, options: ImportOptions) -> ImportResult:
    sessions = _read_sessions(src)
    block_sizes = {s["block_size"] for _, s in sessions if s.get("block_size") is not None}
    if len(block_sizes) > 1:
        raise TraceError(f"{src}: sessions disagree on block_size: {sorted(block_sizes)}")
    block_size = options.block_size or (block_sizes.pop() if block_sizes else DEFAULT_BLOCK_SIZE)
    calls: list[Call] = []
    for where, session in sessions:
        sid = session.get("id")
        if sid is None:
            raise TraceError(f"{where}: missing field 'id'")
        offset = session.get("t", session.get("start", 0))
        if not isinstance(offset, (int, float)):
            raise TraceError(f"{where}: t: expected seconds, found {offset!r}")
        _session_calls(str(sid), None, session, float(offset), where, calls)
    header = TraceHeader(block_size=block_size, source="agentic", meta={"imported_from": str(src)})
    return ImportResult(header, calls)


def _session_calls(
    sid: str, parent: str | None, session: dict[str, Any], offset: float, where: str, out: list[Call]
) -> None:
    requests = session.get("requests")
    if not isinstance(requests, list):
        raise TraceError(f"{where}: requests: expected a list")
    turn = 0
    for k, req in enumerate(requests):
        at = f"{where} requests[{k}]"
        if not isinstance(req, dict):
            raise TraceError(f"{at}: expected an object")
        if isinstance(req.get("requests"), list):
            sub_id = f"{sid}/{req.get('id', k)}"
            _session_calls(sub_id, sid, req, offset, at, out)
            continue
        t = req.get("t")
        if not isinstance(t, (int, float)) or isinstance(t, bool):
            raise TraceError(f"{at}: t: expected seconds, found {json.dumps(t)}")
        num_out = count(req.get("out"), "out", at)
        kind = "subagent" if parent is not None else ("compaction" if req.get("type") == "compaction" else "turn")
        think = req.get("think_time")
        ttft = req.get("ttft")
        out.append(
            Call(
                t=max(0.0, offset + float(t)),
                session=sid,
                turn=turn,
                hash_ids=int_list(req, "hash_ids", at),
                input_tokens=count(req.get("in"), "in", at),
                output_tokens=num_out,
                think_time=float(think) if isinstance(think, (int, float)) and think >= 0 else None,
                ttft=float(ttft) if isinstance(ttft, (int, float)) and ttft >= 0 else None,
                kind=kind,
                parent=parent,
            )
        )
        turn += 1


def _read_sessions(src: Path) -> list[tuple[str, dict[str, Any]]]:
    text = src.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
        items = data if isinstance(data, list) else [data]
        found = [(f"{src}[{i}]" if isinstance(data, list) else str(src), s) for i, s in enumerate(items)]
    except json.JSONDecodeError:
        found = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    found.append((f"{src}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise TraceError(f"{src}:{lineno}: not valid JSON ({exc.msg})") from None
    for where, s in found:
        if not isinstance(s, dict):
            raise TraceError(f"{where}: expected a session object with requests[]")
    return found
