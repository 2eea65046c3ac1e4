"""The server's user-facing errors."""

from __future__ import annotations

from engine.errors import EngineError


class ServerError(EngineError):
    """The server cannot start or serve as asked (bad option, port in use)."""


class EngineUnavailable(ServerError):
    """The engine thread has stopped (shutdown, or the engine failed): no request can run."""
