"""The recording proxy in front of the real built-in server: an agent's turns become a trace."""

import contextlib
import threading
import time

import openai
import uvicorn

from engine.server.main import bind
from replay.proxy import RecordConfig, create_app
from replay.trace import read_trace
from tests.engine.server.conftest import engine_config, running_server

SYSTEM = "You are a coding agent working in a repository. " * 8


@contextlib.contextmanager
def proxy_in_front_of(upstream: str, out):
    sock = bind("127.0.0.1", 0)
    app = create_app(RecordConfig(upstream=upstream, output=out, block_size=16))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_proxy_records_a_real_agent_session_against_the_builtin_server(tiny_checkpoint, tmp_path):
    out = tmp_path / "recorded.jsonl"
    with running_server(engine_config(tiny_checkpoint)) as server, proxy_in_front_of(server.base_url, out) as url:
        client = openai.OpenAI(base_url=url, api_key="none")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Fix the failing test."}]
        replies = []
        for turn in range(3):
            stream = client.chat.completions.create(
                model="tokdrift-default",
                messages=messages,
                max_tokens=8,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
            chunks = list(stream)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            replies.append((text, chunks[-1].usage))
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": f"Tool output {turn}: " + "ok " * 40},
            ]
    calls = read_trace(out).calls
    assert len(calls) == 3
    assert [c.input_tokens for c in calls] == [usage.prompt_tokens for _, usage in replies]
    assert [c.output_tokens for c in calls] == [usage.completion_tokens for _, usage in replies]
    # Each turn appends onto the previous one: its prefix blocks repeat the previous call's,
    # and the server served the shared part from its prefix cache.
    for before, after in zip(calls, calls[1:]):
        shared = len(before.hash_ids) - 1
        assert after.hash_ids[:shared] == before.hash_ids[:shared]
        assert len(after.hash_ids) > len(before.hash_ids)
    assert all(usage.prompt_tokens_details.cached_tokens > 0 for _, usage in replies[1:])
    assert len({c.session for c in calls}) == 1
