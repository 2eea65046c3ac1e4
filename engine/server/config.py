"""Server options (the engine's own are engine.runtime.config.EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.runtime.config import option
from engine.server.errors import ServerError

DEFAULT_MODEL_NAME = "tokdrift-default"


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    host: str = option("127.0.0.1", "Address to listen on; loopback unless you mean to expose the engine.")
    port: int = option(1919, "Port to listen on (FreeToken's `ft serve` port).")
    api_key: str | None = option(
        None, "Require 'Authorization: Bearer KEY' on every route but /health (env TOKDRIFT_API_KEY)."
    )
    served_model_name: str | None = option(
        None, "Model id in /v1/models and responses; the checkpoint directory's name when unset."
    )
    step_history: int = option(65536, "Engine steps kept for GET /v1/engine/steps (minutes of a fast GPU engine).")
    max_steps_per_reply: int = option(8192, "Rows of one /v1/engine/steps reply at most.")
    warmup_chunks: int = option(
        2,
        "Prompt chunks run once before serving (/health answers 503 until done), so that malloc holds "
        "the largest steps' memory from the start and RSS stays flat after; 0: none.",
    )
    stream_ping_s: float = option(
        15.0, "Seconds between the SSE comment lines sent while a stream waits (keeps proxies open)."
    )

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ServerError(f"port must be an integer in [0, 65535], got {self.port!r}")
        if self.api_key is not None and not self.api_key.strip():
            raise ServerError("api_key must be a non-empty string or unset, got an empty string")
        for name in ("step_history", "max_steps_per_reply"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ServerError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.warmup_chunks, int) or self.warmup_chunks < 0:
            raise ServerError(f"warmup_chunks must be an integer >= 0, got {self.warmup_chunks!r}")
        if not self.stream_ping_s > 0:
            raise ServerError(f"stream_ping_s must be > 0, got {self.stream_ping_s!r}")
