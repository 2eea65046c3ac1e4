"""Importers, each against a small fixture written in its source's shape."""

import json
import sqlite3
from pathlib import Path

import pytest

from replay import TraceError
from replay.importers import ImportOptions, import_trace

FIXTURES = Path(__file__).parent / "fixtures"


def _opencode_export():
    return json.loads((FIXTURES / "opencode_export.json").read_text())


def _check_opencode_calls(calls, prefix_tokens, session="ses_4f2a9c1d7ffeA1"):
    main = [c for c in calls if c.session == session]
    # One call per step-finish: three in the first assistant message, then one, a compaction, one.
    assert [c.kind for c in main] == ["turn", "turn", "turn", "turn", "compaction", "turn"]
    # input = uncached + cache read + cache write; output = output + reasoning
    assert [c.input_tokens for c in main] == [9800, 12000, 12700, 13300, 13500, 10400]
    assert [c.output_tokens for c in main] == [180, 300, 100, 90, 900, 40]
    assert [c.reasoning_tokens for c in main] == [60, 0, 20, 0, 0, 0]
    assert [c.cached_tokens for c in main] == [0, 9900, 12200, 12600, 12900, 0]
    # Send times: the first step at the message's creation, later steps when their tools ended.
    assert [c.t for c in main] == [0.0, 3.4, 9.0, 59.7, 70.6, 94.6]
    # Think gaps: from the end of the previous call's generation (its tools starting, or its
    # message completing) to this send: tool execution and the user's pauses.
    assert [c.think_time for c in main] == [None, 0.8, 1.5, 39.2, 9.1, 5.1]
    # Each call extends the previous context (all its full blocks are a prefix) ...
    for prev, cur in zip(main[:3], main[1:4]):
        full = prev.input_tokens // 64
        assert cur.hash_ids[:full] == prev.hash_ids[:full]
    # ... the compaction call (own system prompt, no tools) shares nothing ...
    assert not set(main[4].hash_ids) & {h for c in calls if c is not main[4] for h in c.hash_ids}
    # ... and after it the history is gone: the next call keeps only the fixed prefix.
    prefix_blocks = prefix_tokens // 64
    assert main[5].hash_ids[:prefix_blocks] == main[3].hash_ids[:prefix_blocks]
    assert main[5].hash_ids[prefix_blocks] != main[3].hash_ids[prefix_blocks]


def test_opencode_export():
    header, calls = import_trace("opencode", FIXTURES / "opencode_export.json")
    assert header.source == "opencode" and header.block_size == 64
    assert header.meta["prefix_tokens"] == 8768  # 90% of the smallest first prompt, whole blocks
    assert header.created.startswith("2025-11-30T00:00:00.500")
    _check_opencode_calls(calls, 8768)


def _child_session():
    """A subagent session (parentID set) of one step, 30 s into the parent."""
    sid, t = "ses_child01", 1764460800000 + 30000
    return {
        "info": {"id": sid, "parentID": "ses_4f2a9c1d7ffeA1", "title": "explore", "time": {"created": t}},
        "messages": [
            {
                "info": {"id": "msg_c1", "sessionID": sid, "role": "user", "time": {"created": t}},
                "parts": [{"id": "prt_c1", "type": "text", "text": "find the tests"}],
            },
            {
                "info": {
                    "id": "msg_c2",
                    "sessionID": sid,
                    "role": "assistant",
                    "parentID": "msg_c1",
                    "time": {"created": t + 100, "completed": t + 2000},
                    "mode": "explore",
                    "agent": "explore",
                    "tokens": {"input": 9000, "output": 50, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                },
                "parts": [
                    {"id": "prt_c2", "type": "step-start"},
                    {
                        "id": "prt_c3",
                        "type": "step-finish",
                        "reason": "stop",
                        "cost": 0,
                        "tokens": {"input": 9000, "output": 50, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                    },
                ],
            },
        ],
    }


def test_opencode_storage_folder(tmp_path):
    storage = tmp_path / "opencode" / "storage"
    for export in (_opencode_export(), _child_session()):
        info = export["info"]
        (storage / "session" / "prj_1").mkdir(parents=True, exist_ok=True)
        (storage / "session" / "prj_1" / f"{info['id']}.json").write_text(json.dumps(info))
        for m in export["messages"]:
            mdir = storage / "message" / info["id"]
            mdir.mkdir(parents=True, exist_ok=True)
            (mdir / f"{m['info']['id']}.json").write_text(json.dumps(m["info"]))
            pdir = storage / "part" / m["info"]["id"]
            pdir.mkdir(parents=True, exist_ok=True)
            for p in m["parts"]:
                (pdir / f"{p['id']}.json").write_text(json.dumps(p))
    header, calls = import_trace("opencode", tmp_path / "opencode")  # the data folder, storage/ below it
    assert header.meta["prefix_tokens"] == 8064  # now the subagent's 9000-token first prompt is the smallest
    _check_opencode_calls(calls, 8064)
    child = [c for c in calls if c.session == "ses_child01"]
    assert len(child) == 1 and child[0].kind == "subagent" and child[0].parent == "ses_4f2a9c1d7ffeA1"
    assert child[0].t == 29.6
    main_first = next(c for c in calls if c.session == "ses_4f2a9c1d7ffeA1")
    # The subagent shares the fixed prefix every session shares.
    prefix_blocks = header.meta["prefix_tokens"] // 64
    assert child[0].hash_ids[:prefix_blocks] == main_first.hash_ids[:prefix_blocks]


def test_opencode_sqlite(tmp_path):
    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db)
    # The tables of opencode's session.sql.ts (the columns the importer reads, and a few more).
    con.executescript("""
        CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT, slug TEXT NOT NULL,
            directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL,
            time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL);
        CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL,
            time_updated INTEGER NOT NULL, data TEXT NOT NULL);
        CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
            time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL);
    """)
    for export in (_opencode_export(), _child_session()):
        info = export["info"]
        created = info["time"]["created"]
        con.execute(
            "INSERT INTO session VALUES (?,?,?,?,?,?,?,?,?)",
            (info["id"], "prj_1", info.get("parentID"), "s", "/w", "t", "1", created, created),
        )
        for m in export["messages"]:
            mi = dict(m["info"])
            mid = mi.pop("id")
            mi.pop("sessionID", None)
            con.execute(
                "INSERT INTO message VALUES (?,?,?,?,?)",
                (mid, info["id"], mi["time"]["created"], mi["time"]["created"], json.dumps(mi)),
            )
            for p in m["parts"]:
                p = dict(p)
                pid = p.pop("id")
                p.pop("sessionID", None)
                p.pop("messageID", None)
                con.execute("INSERT INTO part VALUES (?,?,?,?,?,?)", (pid, mid, info["id"], 0, 0, json.dumps(p)))
    con.commit()
    con.close()
    for src in (db, tmp_path):  # the file itself, or the folder holding it
        header, calls = import_trace("opencode", src)
        _check_opencode_calls(calls, header.meta["prefix_tokens"])
        assert sum(c.kind == "subagent" for c in calls) == 1


def test_opencode_refuses_what_is_not_opencode(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text('{"sessions": []}')
    with pytest.raises(TraceError, match=r"expected an opencode export \{info, messages"):
        import_trace("opencode", bad)
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="expected an opencode export, a storage folder"):
        import_trace("opencode", tmp_path / "empty")


def test_mooncake():
    header, calls = import_trace("mooncake", FIXTURES / "mooncake.jsonl")
    assert header.block_size == 512
    assert [(c.t, c.input_tokens, c.output_tokens, c.hash_ids) for c in calls] == [
        (0.0, 1200, 10, (0, 1, 2)),
        (1.5, 1500, 20, (0, 1, 3)),
        (2.5, 600, 5, (4, 5)),
    ]
    assert len({c.session for c in calls}) == 3


def test_bailian_sessions_follow_parent_chat_ids():
    header, calls = import_trace("bailian", FIXTURES / "bailian.jsonl")
    assert header.block_size == 16
    assert [(c.session, c.turn, c.t) for c in calls] == [
        ("c10", 0, 0.0),
        ("c11", 0, 0.5),
        ("c10", 1, 30.25),
        ("c10", 2, 60.0),
    ]
    assert calls[3].hash_ids == (1, 2, 3, 4, 5, 6)


def test_agentic_with_subagent_and_compaction():
    header, calls = import_trace("agentic", FIXTURES / "agentic.json")
    assert header.block_size == 64
    sub = [c for c in calls if c.kind == "subagent"]
    assert [(c.session, c.parent, c.turn, c.t) for c in sub] == [
        ("cc-0042/explore", "cc-0042", 0, 14.0),
        ("cc-0042/explore", "cc-0042", 1, 20.0),
    ]
    main = [c for c in calls if c.session == "cc-0042"]
    assert [c.kind for c in main] == ["turn", "turn", "compaction"]
    assert [c.think_time for c in main] == [0.0, 3.2, 0.2] and main[0].ttft == 0.8


def test_agentic_jsonl_of_sessions(tmp_path):
    session = json.loads((FIXTURES / "agentic.json").read_text())
    other = {**session, "id": "cc-0043", "t": 100.0}
    path = tmp_path / "sessions.jsonl"
    path.write_text(json.dumps(session) + "\n" + json.dumps(other) + "\n")
    _, calls = import_trace("agentic", path)
    assert len(calls) == 10
    assert min(c.t for c in calls if c.session == "cc-0043") == 100.0


def test_azure_csv():
    header, calls = import_trace("azure", FIXTURES / "azure.csv")
    assert [(c.t, c.input_tokens, c.output_tokens) for c in calls] == [
        (0.0, 374, 44),
        (4.314579, 396, 109),
        (4.541848, 879, 15),
    ]
    assert [len(c.hash_ids) for c in calls] == [6, 7, 14]  # ceil(tokens / 64), nothing shared
    assert len({h for c in calls for h in c.hash_ids}) == 27


@pytest.mark.parametrize(
    "fmt, name, content, message",
    [
        (
            "mooncake",
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
            '{"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": [1]}\n',
            "m.jsonl:2: input_length: expected a count >= 0, found -5",
        ),
        (
            "mooncake",
            "m.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n',
            "m.jsonl:1: missing field 'hash_ids'",
        ),
        (
            "bailian",
            "b.jsonl",
            '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, '
            '"output_length": 1, "hash_ids": [1]}\nnot json\n',
            "b.jsonl:2: not valid JSON",
        ),
        ("azure", "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", "a.csv:1: expected columns"),
        (
            "azure",
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,x\n",
            "a.csv:2: GeneratedTokens: expected an integer, found 'x'",
        ),
        (
            "agentic",
            "g.json",
            '{"id": "a", "requests": [{"t": 0, "in": 5, "out": 1}]}',
            "g.json requests[0]: missing field 'hash_ids'",
        ),
    ],
)
def test_bad_source_names_file_line_and_problem(tmp_path, fmt, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(TraceError) as info:
        import_trace(fmt, path)
    assert message in str(info.value)


def test_unknown_format_lists_known_ones(tmp_path):
    with pytest.raises(
        TraceError, match="unknown trace format 'sharegpt'; known: agentic, azure, bailian, mooncake, opencode"
    ):
        import_trace("sharegpt", tmp_path)


def test_block_size_option_overrides_the_formats_own():
    header, _ = import_trace("azure", FIXTURES / "azure.csv", ImportOptions(block_size=16))
    assert header.block_size == 16


# Made with opencode 1.18.33 (npm opencode-ai), `opencode run` against a small local
# OpenAI-compatible server that answers with a read tool call, a task (subagent) call and
# text, with the model's context limit set low enough to trigger one automatic compaction;
# then `opencode export <session>` and a dump of the opencode.db it wrote (the rows of
# session, message, part and project, and the whole schema).
REAL_SESSION = "ses_dd5847435ffeXYYCCOiK54NwZj"
REAL_CHILD = "ses_dd5846873ffek42432S5kwjtJi"


def _check_real(calls):
    main = [c for c in calls if c.session == REAL_SESSION]
    assert [c.kind for c in main] == ["turn", "turn", "turn", "compaction", "turn"]
    # every prompt token: uncached + cache read (+ cache write); output includes reasoning
    assert [c.input_tokens for c in main] == [7733, 7837, 7955, 699, 7779]
    assert [(c.output_tokens, c.reasoning_tokens) for c in main] == [(12, 4)] * 5
    assert [c.cached_tokens for c in main] == [7433, 7537, 7655, 399, 7479]
    assert [c.t for c in main] == [0.0, 1.12, 1.813, 2.047, 2.285]
    # The second call waited for the read tool; the third for the subagent.
    assert main[1].think_time == 0.351 and main[2].think_time == 0.538
    full = main[0].input_tokens // 64
    assert main[1].hash_ids[:full] == main[0].hash_ids[:full]


def test_opencode_real_export():
    header, calls = import_trace("opencode", FIXTURES / "opencode_real_export.json")
    assert header.meta["sessions"] == 1
    _check_real(calls)


def test_opencode_real_database(tmp_path):
    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db)
    con.executescript((FIXTURES / "opencode_real_db.sql").read_text())
    con.close()
    header, calls = import_trace("opencode", db)
    _check_real(calls)
    child = [c for c in calls if c.session == REAL_CHILD]
    assert [(c.kind, c.parent, c.input_tokens) for c in child] == [
        ("subagent", REAL_SESSION, 6066),
        ("subagent", REAL_SESSION, 6168),
    ]
    # The subagent ran while its parent waited on the task tool.
    main = [c for c in calls if c.session == REAL_SESSION]
    assert main[1].t < child[0].t < child[1].t < main[2].t
