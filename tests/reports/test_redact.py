"""Redaction: secrets, home paths and prompt text go; the figures a report needs stay."""

from __future__ import annotations

import pytest

from reports.redact import API_KEY, BEARER, HOME, PROMPT, Redactor


@pytest.mark.parametrize(
    "line, expected, category",
    [
        ("Authorization: Bearer abcDEF0123456789xyz", "Authorization: Bearer [redacted]", BEARER),
        ("using key sk-proj-ABCDEFGHIJKLMNOPQRSTUV now", "using key [redacted key] now", API_KEY),
        ("hf_token=hf_ABCDEFGHIJKLMNOPQRSTUVWXYZ12", "hf_token=[redacted key]", API_KEY),
        ('{"api_key": "abc123"}', '{"api_key": "[redacted]"}', API_KEY),
        ("weights in /home/alice/models/qwen", "weights in ~/models/qwen", HOME),
        ("cache at /root/.cache/hf", "cache at ~/.cache/hf", HOME),
        ("C:\\Users\\bob\\AppData", "~\\AppData", HOME),
        (
            "Received request r1: prompt: 'write a poem, please', params: x",
            "Received request r1: prompt: '[redacted 20 chars]', params: x",
            PROMPT,
        ),
        (
            'obj=GenerateReqInput(text="fix my bug", rid=3)',
            "obj=GenerateReqInput(text='[redacted 10 chars]', rid=3)",
            PROMPT,
        ),
    ],
)
def test_line_is_redacted(line, expected, category):
    r = Redactor()
    assert r.text(line) == expected
    assert r.counts[category] == 1


@pytest.mark.parametrize(
    "line",
    [
        "[2026-09-23|21:18:50] INFO     Prefill batch, #new-token: 5792, #cached-token: 121712, token usage: 0.52",
        "Decode batch, #running-req: 2, #token: 127542, gen throughput (token/s): 3.63",
        "Resolved config: moe_backend='offload', attention_backend='triton', cache_type='hybrid_radix', page_size=1",
        "Engine 000: Avg prompt throughput: 5120.3 tokens/s, Avg generation throughput: 101.3 tokens/s",
        "runs at /rooted/x and /homework/y and ~/z",
    ],
)
def test_engine_lines_are_left_alone(line):
    r = Redactor()
    assert r.text(line) == line
    assert sum(r.counts.values()) == 0


def test_json_and_event_fields():
    r = Redactor()
    doc = r.json(
        {
            "command": ["soak", "--api-key", "s3cr3t", "--trace", "/home/al/t.jsonl"],
            "probe": {"prompt": "Tell me a story", "max_tokens": 5},
            "Authorization": "Basic xyz",
        }
    )
    assert doc == {
        "command": ["soak", "--api-key", "[redacted]", "--trace", "~/t.jsonl"],
        "probe": {"prompt": "[redacted 15 chars]", "max_tokens": 5},
        "Authorization": "[redacted]",
    }
    assert r.fields("prompt=Write a poem, about cats, request_id=r1") == "prompt=[redacted 24 chars], request_id=r1"
    assert "2 API keys and secrets" in r.describe() and "2 prompt or completion text" in r.describe()


def test_disabled_redactor_keeps_everything():
    r = Redactor(enabled=False)
    line = "Bearer abcDEF0123456789xyz /home/alice prompt: 'hi'"
    assert r.text(line) == line and r.fields(line) == line
    assert r.json({"prompt": "hi"}) == {"prompt": "hi"}
    assert r.describe().startswith("nothing: made with --no-redact")


@pytest.mark.parametrize(
    "exe",
    ["/work/proj/.venv/bin/soak", "/work/proj/tokdrift/cli/soak.py"],
    ids=["the venv's soak", "the package's soak.py run as a script"],
)
def test_a_path_under_the_project_the_soak_ran_from_is_said_relative_to_it(exe):
    """benchmarks/false_alarms.py runs tokdrift/cli/soak.py: its trace read `…/examples/opencode.jsonl`,
    a placeholder in the command a summary tells the reader to run next."""
    r = Redactor()
    r.anchor_to("/tmp/runs/short-0", [exe, "run", "--trace", "/work/proj/examples/opencode.jsonl"])
    assert r.text("soak run --trace /work/proj/examples/opencode.jsonl") == "soak run --trace examples/opencode.jsonl"
