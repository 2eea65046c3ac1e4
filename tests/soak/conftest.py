"""Fixtures of the soak tests: a fake OpenAI-compatible server in its own process, small traces."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from soak.targets import free_port

ROOT = Path(__file__).resolve().parents[2]


class FakeServer:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.soak.fake_server", "--port", str(self.port), *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"fake server did not start: {self.proc.stderr.read().decode()[-2000:]}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def fake_server():
    servers = []

    def start(*args: str) -> FakeServer:
        servers.append(FakeServer(*args))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def write_trace(
    path: Path,
    sessions: int = 3,
    turns: int = 4,
    think: float = 0.05,
    gap: float = 0.1,
    overlong: bool = False,
    block_size: int = 4,
) -> Path:
    """A small agentic trace: sessions growing over a shared prefix; one over-long call when asked."""
    lines = [{"format": "tokdrift-trace", "version": 1, "block_size": block_size, "source": "test"}]
    next_id = 100
    for s in range(sessions):
        ids = [1, 2, 3]
        for turn in range(turns):
            ids = ids + list(range(next_id, next_id + 2))
            next_id += 2
            n_in = len(ids) * block_size
            call = {
                "t": s * gap + turn * 0.2,
                "session": f"s{s}",
                "turn": turn,
                "hash_ids": ids,
                "input_tokens": n_in,
                "output_tokens": 6,
                "think_time": think,
            }
            if overlong and s == 0 and turn == turns - 1:
                call["input_tokens"] = 5000
            lines.append(call)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
