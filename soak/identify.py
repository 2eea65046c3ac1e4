"""Which engine a URL target is, as it says over HTTP when it starts: asked again at every start, so a
restart onto another release or model shows as another engine (diagnostics.source.identity compares lives).

    GET /v1/models   data[0]: owned_by (vllm, sglang, llamacpp: the engine's name), root (the
                     model's path: its last part is the model), else id; max_model_len
    GET /version     {"version": "0.32.0"} (vLLM)

The facts are named as the readers of start-up lines name them (logformats.identity: `version`,
`model`, `max_seq_len`), so that a fact said by the log and by the server is one fact. A server
that answers neither is an engine of unknown name with no facts: never an error.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import httpx

logger = logging.getLogger(__name__)

TIMEOUT_S = 5.0


class EngineIdentity(NamedTuple):
    name: str | None  # the engine, as its /v1/models says who owns the model; None where it does not
    facts: dict[str, str]  # version, model, max_seq_len: what it said

    def to_json(self) -> dict[str, Any]:
        """The manifest's view: `name` and each fact beside it."""
        return {"name": self.name or "unknown", **self.facts}


async def identify(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> EngineIdentity:
    """Ask the server at `url` who it is (nothing it leaves unsaid is guessed)."""
    facts: dict[str, str] = {}
    name = None
    models = await _get_json(http, url + "/v1/models", headers)
    first = _first_model(models)
    if first is not None:
        owner = first.get("owned_by")
        name = owner if isinstance(owner, str) and owner else None
        model = first.get("root") or first.get("id")
        if isinstance(model, str) and model:
            facts["model"] = _short(model)
        if isinstance(first.get("max_model_len"), int):
            facts["max_seq_len"] = str(first["max_model_len"])
    version = await _get_json(http, url + "/version", headers)
    if isinstance(version, dict) and isinstance(version.get("version"), str):
        facts["version"] = version["version"]
    return EngineIdentity(name, facts)


def _first_model(models: Any) -> dict[str, Any] | None:
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list) and data and isinstance(data[0], dict):
        first: dict[str, Any] = data[0]
        return first
    return None


def _short(path: str) -> str:
    """A model's short name, as logformats.identity names it: the file or folder name."""
    return path.strip().rstrip("/").rsplit("/", 1)[-1]


async def _get_json(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Any:
    try:
        response = await http.get(url, headers=headers, timeout=TIMEOUT_S)
        if response.status_code != 200:
            return None
        return response.json()
    except (httpx.HTTPError, ValueError) as exc:
        logger.debug("%s: %s", url, exc)
        return None


def differences(a: EngineIdentity | None, b: EngineIdentity | None) -> str | None:
    """How `b` is another engine than `a` (`version 0.32.0 -> 0.27.1`), in what both said; None when
    nothing both said differs."""
    if a is None or b is None:
        return None
    said = [("name", a.name, b.name)] if a.name and b.name else []
    said += [(key, a.facts[key], b.facts[key]) for key in a.facts if key in b.facts]
    diffs = [f"{key} {x} -> {y}" for key, x, y in said if x != y]
    return ", ".join(diffs) or None
