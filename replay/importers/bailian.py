"""Alibaba Bailian traces (JSONL): `chat_id`, `parent_chat_id` (-1 for a first turn),
`timestamp` (s), `input_length`, `output_length`, `type`, `turn`, `hash_ids` (16-token blocks).

A session is a chain of chats linked by `parent_chat_id`; it is named after its first chat.
"""

from __future__ import annotations

from pathlib import Path

from replay.errors import TraceError
from replay.importers.base import ImportOptions, ImportResult, count, field, int_list, iter_jsonl, number
from replay.trace import Call, TraceHeader

DEFAULT_BLOCK_SIZE = 16


def import_bailian(src: Path, options: ImportOptions) -> ImportResult:
    rows = []
    parent_of: dict[int, int] = {}
    for lineno, obj in iter_jsonl(src):
        where = f"{src}:{lineno}"
        chat_id = field(obj, "chat_id", int, where)
        parent = obj.get("parent_chat_id", -1)
        if not isinstance(parent, int) or isinstance(parent, bool):
            raise TraceError(f"{where}: parent_chat_id: expected an integer (-1 for none), found {parent!r}")
        if parent >= 0:
            parent_of[chat_id] = parent
        rows.append(
            (
                number(obj.get("timestamp"), "timestamp", where),
                chat_id,
                int_list(obj, "hash_ids", where),
                count(obj.get("input_length"), "input_length", where),
                count(obj.get("output_length"), "output_length", where),
            )
        )
    base = min((r[0] for r in rows), default=0.0)
    rows.sort(key=lambda r: (r[0], r[1]))
    turns: dict[str, int] = {}
    calls = []
    for ts, chat_id, ids, num_in, num_out in rows:
        session = f"c{_root(chat_id, parent_of)}"
        turn = turns.get(session, 0)
        turns[session] = turn + 1
        calls.append(
            Call(t=ts - base, session=session, turn=turn, hash_ids=ids, input_tokens=num_in, output_tokens=num_out)
        )
    header = TraceHeader(
        block_size=options.block_size or DEFAULT_BLOCK_SIZE, source="bailian", meta={"imported_from": str(src)}
    )
    return ImportResult(header, calls)


def _root(chat_id: int, parent_of: dict[int, int]) -> int:
    seen = set()
    while chat_id in parent_of and chat_id not in seen:
        seen.add(chat_id)
        chat_id = parent_of[chat_id]
    return chat_id
