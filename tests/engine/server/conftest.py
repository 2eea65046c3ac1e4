import contextlib
import threading
import time

import httpx
import pytest
import uvicorn

from engine.runtime.config import EngineConfig
from engine.server.config import ServerConfig
from engine.server.main import bind, make_app

API_KEY = "sk-test-key"


class RunningServer:
    def __init__(self, app, base_url: str) -> None:
        self.app = app
        self.base_url = base_url
        self.runner = app.state.runner

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"


@contextlib.contextmanager
def running_server(engine_config: EngineConfig, server_config: ServerConfig = ServerConfig(port=0)):
    """The real app under uvicorn on a free loopback port, in a thread of this process."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    app = make_app(engine_config, server_config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.02)
    try:
        yield RunningServer(app, base)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def engine_config(checkpoint: str, **kw) -> EngineConfig:
    kw.setdefault("kv_tokens", 2048)
    kw.setdefault("max_running_requests", 4)
    kw.setdefault("decode_log_interval", 10)
    return EngineConfig(model=checkpoint, **kw)


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with running_server(engine_config(tiny_checkpoint)) as s:
        yield s


@pytest.fixture(scope="module")
def keyed_server(tiny_checkpoint):
    with running_server(engine_config(tiny_checkpoint, kv_tokens=512), ServerConfig(port=0, api_key=API_KEY)) as s:
        yield s


def wait_until(predicate, timeout: float = 20.0, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value; that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def status(server: RunningServer, **params) -> dict:
    r = httpx.get(server.v1 + "/cache/status", params=params, timeout=10)
    r.raise_for_status()
    return r.json()
