"""The engine's user-facing errors, all subclasses of the project's one error class."""

from __future__ import annotations

from ground import TokdriftError


class EngineError(TokdriftError):
    """Something the engine was asked to do cannot be done (bad option, request too long)."""


class ConfigError(EngineError):
    """A model `config.json` that tokdrift cannot serve: the message names the field."""


class CheckpointError(EngineError):
    """A checkpoint whose tensors do not match its config: the message names the tensor."""
