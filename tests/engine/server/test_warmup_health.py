"""A served engine warms up on its own thread before serving: /health says so until it is done,
and a request sent meanwhile waits for it instead of failing."""

import queue
import threading

import httpx

from engine.runtime import warmup
from engine.server import runner as runner_module
from engine.server.config import ServerConfig
from tests.engine.server.conftest import engine_config, running_server, wait_until


def test_health_is_503_until_the_warm_up_ends(tiny_checkpoint, monkeypatch):
    release, seen = threading.Event(), queue.Queue()

    def held_warm_up(engine, num_chunks):
        seen.put((threading.current_thread().name, num_chunks))
        release.wait(30)
        return warmup.warm_up(engine, num_chunks)

    monkeypatch.setattr(runner_module, "warm_up", held_warm_up)
    with running_server(engine_config(tiny_checkpoint), ServerConfig(port=0, warmup_chunks=3)) as server:
        assert seen.get(timeout=10) == ("engine", 3)  # the engine's thread, whose arena keeps the memory
        health = httpx.get(server.base_url + "/health")
        assert health.status_code == 503 and "warming up" in health.text
        early = {}
        post = threading.Thread(
            target=lambda: early.update(
                r=httpx.post(
                    server.v1 + "/completions",
                    json={"model": "x", "prompt": [5, 6, 7], "max_tokens": 3, "temperature": 0},
                    timeout=30,
                )
            )
        )
        post.start()
        release.set()
        wait_until(lambda: httpx.get(server.base_url + "/health").status_code == 200, timeout=20, what="health")
        post.join(30)
        assert early["r"].status_code == 200 and early["r"].json()["usage"]["completion_tokens"] == 3
