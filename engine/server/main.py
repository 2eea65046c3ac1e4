"""Build the server around an engine and run it under uvicorn."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from fastapi import FastAPI

from engine.runtime.config import EngineConfig
from engine.runtime.engine import Engine
from engine.server.app import build_app
from engine.server.config import DEFAULT_MODEL_NAME, ServerConfig
from engine.server.errors import ServerError
from engine.server.metrics import ServerMetrics
from engine.server.runner import EngineRunner

logger = logging.getLogger(__name__)


def make_app(engine_config: EngineConfig, server_config: ServerConfig = ServerConfig()) -> FastAPI:
    """Load the engine and wrap it; the engine thread starts with the app's lifespan."""
    engine = Engine(engine_config)
    name = server_config.served_model_name or (
        Path(engine_config.model).name if engine_config.model else DEFAULT_MODEL_NAME
    )
    metrics = ServerMetrics(name)
    runner = EngineRunner(engine, server_config.step_history, metrics, server_config.warmup_chunks)
    return build_app(runner, metrics, server_config, name)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a ServerError saying why not."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto given explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says IPPROTO_TCP; without it every response written in two parts (head,
    # body) waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        return sock
    except OSError as exc:
        sock.close()
        raise ServerError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}"
            + (" (another server is using the port; pick one with --port)" if exc.errno in (98, 48) else "")
        ) from None


def serve(
    engine_config: EngineConfig,
    server_config: ServerConfig,
    log_level: str = "warning",
    access_log: bool = False,
    sock: socket.socket | None = None,
) -> None:
    """Serve until interrupted, on `sock` or a socket bound here before the engine loads (so a
    port in use fails at once)."""
    import uvicorn

    sock = sock or bind(server_config.host, server_config.port)
    app = make_app(engine_config, server_config)
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])
